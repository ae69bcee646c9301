"""llm-d's inference scheduler with its precise-prefix-cache profile, policy `llm_d`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from sim.cluster.signals import KvEvents, Router, ServerLoad, Signals, cache_views, observe
from sim.cluster.spec import RouterSpec
from sim.core.spec import IntervalS, NonNegFloat
from sim.workload.kinds import Request


def min_max(values: Sequence[float], higher_is_better: bool) -> list[float]:
    """A scorer's min-max normalisation to [0, 1], 1 for all when they are equal."""
    low, high = min(values), max(values)
    if low == high:
        return [1.0] * len(values)
    if higher_is_better:
        return [(v - low) / (high - low) for v in values]
    return [(high - v) / (high - low) for v in values]


def llm_d_scores(
    spec: LlmDSpec, prefix_pages: Sequence[int], loads: Sequence[Signals]
) -> list[float]:
    """The weighted sum of llm-d's three scorers per server: precise-prefix-cache (the leading
    blocks its KV-event index holds, min-max normalised over the servers holding any; 0 for
    the others), queue (min-max of the waiting queue, shortest 1) and KV-cache utilization
    (1 - the share of KV cache in use)."""
    held = [pages for pages in prefix_pages if pages > 0]
    low, high = (min(held), max(held)) if held else (0, 0)
    prefix = [
        0.0 if pages == 0 else 1.0 if low == high else (pages - low) / (high - low)
        for pages in prefix_pages
    ]
    queue = min_max([load.waiting for load in loads], higher_is_better=False)
    return [
        spec.prefix_cache_weight * p
        + spec.kv_utilization_weight * (1.0 - load.kv_usage)
        + spec.queue_weight * q
        for p, q, load in zip(prefix, queue, loads, strict=True)
    ]


class LlmD:
    """llm-d's inference scheduler with the precise-prefix-cache guide's profile: the server of
    highest weighted score (`llm_d_scores`), a tie drawn at random (max-score-picker). Queue
    depth and KV utilization are the metrics scraped every `metrics_refresh_interval_s`; the
    prefix index is fed by the servers' KV events."""

    def __init__(
        self, spec: LlmDSpec, servers: int, page_size: int, rng: np.random.Generator
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.events = KvEvents(servers, spec.signal_delay_s)
        self.loads = [Signals()] * servers
        self.next_refresh_s = 0.0

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        if len(servers) == 1:
            return 0
        if now_s >= self.next_refresh_s:
            self.loads = [observe(server) for server in servers]
            every = self.spec.metrics_refresh_interval_s
            self.next_refresh_s = (now_s // every + 1) * every
        prompt = req.pages[: req.prompt_pages]
        views = cache_views(prompt, servers, self.events, now_s)
        scores = llm_d_scores(self.spec, [view.device_pages for view in views], self.loads)
        best = max(scores)
        ties = [i for i, score in enumerate(scores) if score == best]
        chosen = ties[int(self.rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
        self.events.routed(chosen, req.pages, now_s)
        return chosen


class LlmDSpec(RouterSpec):
    """llm-d's inference scheduler, weights as its precise-prefix-cache-aware guide ships them
    (guides/precise-prefix-cache-aware, scheduler values: 2 : 1 : 1)."""

    policy: Literal["llm_d"] = "llm_d"
    prefix_cache_weight: NonNegFloat = 2.0
    """Weight of the precise-prefix-cache scorer."""
    kv_utilization_weight: NonNegFloat = 1.0
    """Weight of the kv-cache-utilization scorer."""
    queue_weight: NonNegFloat = 1.0
    """Weight of the queue scorer."""
    metrics_refresh_interval_s: IntervalS = 0.05
    """How often the endpoint picker scrapes the servers' metrics (queue depth, KV usage):
    the gateway API inference extension's `--refresh-metrics-interval`, 50 ms."""

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return LlmD(self, servers, page_size, rng)
