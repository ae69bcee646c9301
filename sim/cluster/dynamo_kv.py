"""NVIDIA Dynamo's KV router (`--router-mode kv`), policy `dynamo_kv`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.cluster.signals import (
    CacheView,
    KvEvents,
    Router,
    ServerLoad,
    Signals,
    cache_views,
    observe,
)
from sim.cluster.spec import RouterSpec
from sim.core.spec import NonNegFloat, Probability
from sim.workload.kinds import Request


def dynamo_cost(
    spec: DynamoKvSpec,
    prompt_tokens: int,
    prompt_pages: int,
    page_size: int,
    view: CacheView,
    load: Signals,
) -> float:
    """Dynamo's cost of one worker, in blocks (selector/default.rs, `worker_logit`): the
    prefill blocks (its active prompt tokens plus this prompt, over the block size) less the
    overlap credits, scaled, plus its decode blocks (the prompt blocks of its active requests
    and this request's). Each page is credited once, at its best tier: the device prefix at
    `overlap_score_credit`, the host's extension at `host_cache_hit_weight`, the shared
    storage's beyond both at `shared_cache_multiplier`."""
    host = max(view.host_pages, view.device_pages)
    credit = (
        spec.overlap_score_credit * view.device_pages
        + spec.host_cache_hit_weight * (host - view.device_pages)
        + spec.shared_cache_multiplier * max(0, view.storage_pages - host)
    )
    raw_prefill = (load.prefill_tokens + prompt_tokens) / page_size
    decode = load.load_tokens // page_size + prompt_pages
    return spec.prefill_load_scale * max(0.0, raw_prefill - credit) + decode


def softmax_pick(costs: Sequence[float], temperature: float, rng: np.random.Generator) -> int:
    """Dynamo's worker pick (selector/default.rs): at temperature 0 the cheapest, a tie drawn
    uniformly; above, a softmax over the costs normalised by their range. A temperature so
    small that range x temperature underflows to 0 is the softmax's limit, the cheapest (the
    division would be 0/0, a NaN that picked server 0); exponents past the float range are
    the zero weights they tend to, without numpy's overflow warnings."""
    low, high = min(costs), max(costs)
    scale = (high - low) * temperature
    if temperature == 0.0 or (low != high and scale == 0.0):
        ties = [i for i, cost in enumerate(costs) if cost == low]
        return ties[int(rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
    if low == high:
        weights = np.ones(len(costs))
    else:
        with np.errstate(over="ignore", under="ignore"):
            weights = np.exp(-(np.asarray(costs) - low) / scale)
    cumulative = np.cumsum(weights / weights.sum())
    return min(int(np.searchsorted(cumulative, rng.random())), len(costs) - 1)


class DynamoKv:
    """NVIDIA Dynamo's KV router (`--router-mode kv`): the worker of lowest cost, prefill
    blocks after overlap credits plus decode blocks (`dynamo_cost`); its loads are its own
    bookkeeping of the requests it routed, its caches come from the workers' KV events."""

    def __init__(
        self, spec: DynamoKvSpec, servers: int, page_size: int, rng: np.random.Generator
    ) -> None:
        self.spec = spec
        self.page_size = page_size
        self.rng = rng
        self.events = KvEvents(servers, spec.signal_delay_s)

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        if len(servers) == 1:
            return 0
        prompt = req.pages[: req.prompt_pages]
        views = cache_views(prompt, servers, self.events, now_s)
        costs = [
            dynamo_cost(
                self.spec, req.prompt_tokens, req.prompt_pages, self.page_size, view, observe(s)
            )
            for view, s in zip(views, servers, strict=True)
        ]
        chosen = softmax_pick(costs, self.spec.router_temperature, self.rng)
        self.events.routed(chosen, req.pages, now_s)
        return chosen


class DynamoKvSpec(RouterSpec):
    """NVIDIA Dynamo's KV router; defaults as `KvRouterConfig::default()` ships them
    (lib/kv-router/src/scheduling/config.rs), the shared-cache credit as the frontend sets it
    when HiCache's shared storage is the shared cache (`--shared-cache-type hicache`)."""

    policy: Literal["dynamo_kv"] = "dynamo_kv"
    overlap_score_credit: Probability = 1.0
    """Credit per device-cached prefix block (`--router-kv-overlap-score-credit`)."""
    host_cache_hit_weight: Probability = 0.75
    """Credit per block the host tier holds beyond the device (`--router-host-cache-hit-weight`)."""
    shared_cache_multiplier: Probability = 0.5
    """Credit per block the shared storage holds beyond both (`shared_cache_multiplier`: 0 in
    the config, 0.5 from the frontend once a shared cache is enabled)."""
    prefill_load_scale: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 1.0
    """Scale of the prefill blocks left after the credits (`--router-prefill-load-scale`); at
    most 10**6, so scale x blocks stays finite (1e308 made costs inf and their range NaN)."""
    router_temperature: NonNegFloat = 0.0
    """Softmax temperature over the costs; 0 picks the cheapest (`--router-temperature`)."""

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return DynamoKv(self, servers, page_size, rng)
