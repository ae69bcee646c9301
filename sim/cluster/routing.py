"""Routers: which server of a cluster each request goes to (SGLang model gateway's `--policy`).

A router is built once per run from its spec (`cluster.router`, told apart by its `policy`, each
policy's spec holding only its own knobs), the server count, the page size and its own random
stream, and is asked `route(request, servers, now_s)` at each arrival, with what the gateway
knows of each server's load. The gateway matches text; here a request is its chained page keys,
so prefixes are matched and hashed page by page.
Router specs are registered in `ROUTERS`, which is also the list `cluster.router.policy`
accepts. Beside the gateway's policies, `dynamo_kv` (NVIDIA Dynamo's KV router) and `llm_d`
(llm-d's scorer pipeline) read the servers' caches as their KV events report them. Every
router may decide on signals `signal_delay_s` old.
Sources and the exact rules: docs/model.md, "Routers".
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, cast

import numpy as np
from pydantic import Field

from sim.core.registry import Registry
from sim.core.spec import (
    IntervalS,
    NonNegFloat,
    NonNegInt,
    PositiveInt,
    Probability,
    Strict,
)
from sim.workload.kinds import Request


class ServerLoad(Protocol):
    """What a router may know of a server: its requests in flight (the gateway's own count, up
    at dispatch and down when the response ends) and the tokens of those requests (what a
    server's `/get_load` reports)."""

    @property
    def in_flight(self) -> int: ...

    @property
    def load_tokens(self) -> int: ...


class Router(Protocol):
    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int: ...


class RouterSpec(Strict):
    """`cluster.router:` — the policy that picks a server for each request (SGLang model
    gateway's `--policy`), and that policy's own knobs (its flags)."""

    policy: str
    """One of `ROUTERS`; the gateway's default is cache_aware."""
    signal_delay_s: NonNegFloat = 0.0
    """How old the view the router decides on is: the servers' loads as they were at the last
    routing at least this long ago, and (for the routers that read caches through KV events)
    a page only once it has been on its way to that server this long. 0: the current view."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        raise NotImplementedError

    def delayed(self, router: Router) -> Router:
        """`router`, deciding on loads `signal_delay_s` old when that is above 0."""
        return StaleLoads(router, self.signal_delay_s) if self.signal_delay_s > 0 else router


DEFAULT_ROUTER = "cache_aware"

ROUTERS: Registry[type[RouterSpec]] = Registry("router")
"""Router specs by `policy`; the spec's `build` makes the router of one run."""


def least_loaded(servers: Sequence[ServerLoad]) -> int:
    """The server with the fewest requests in flight, the lowest index on a tie (Rust's
    `min_by_key`)."""
    loads = [server.in_flight for server in servers]
    return loads.index(min(loads))


class RoundRobin:
    """Each server in turn, whatever it holds or has queued (round_robin.rs)."""

    def __init__(self, servers: int) -> None:
        self.servers = servers
        self.count = 0

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        chosen = self.count % self.servers
        self.count += 1
        return chosen


class Random:
    """A server drawn uniformly (random.rs)."""

    def __init__(self, servers: int, rng: np.random.Generator) -> None:
        self.servers = servers
        self.rng = rng

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        return int(self.rng.integers(self.servers))


class PowerOfTwo:
    """Two distinct servers drawn uniformly; the second only if its load is strictly lower
    (power_of_two.rs). The load is the tokens each server reported at the last poll of the
    gateway's load monitor, every `load_poll_interval_s`."""

    def __init__(self, servers: int, poll_interval_s: float, rng: np.random.Generator) -> None:
        self.servers = servers
        self.rng = rng
        self.poll_interval_s = poll_interval_s
        self.loads = [0] * servers
        self.next_poll_s = 0.0

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        n = self.servers
        if n == 1:
            return 0
        if now_s >= self.next_poll_s:
            self.loads = [server.load_tokens for server in servers]
            self.next_poll_s = now_s + self.poll_interval_s
        first = int(self.rng.integers(n))
        second = (first + 1 + int(self.rng.integers(n - 1))) % n
        return first if self.loads[first] <= self.loads[second] else second


class PrefixHash:
    """A consistent-hash ring over the servers, keyed by the request's first `prefix_tokens`
    tokens, with bounded load (prefix_hash.rs): the ring's server unless it has more than
    `load_factor` times the mean load (counting this request), then the least loaded server
    within that bound."""

    VIRTUAL_NODES = 150

    def __init__(self, servers: int, prefix_tokens: int, load_factor: float, page_size: int):
        self.prefix_pages = max(1, -(-prefix_tokens // page_size))
        self.load_factor = load_factor
        points = sorted(
            (_hash64(f"worker-{server}#{replica}".encode()), server)
            for server in range(servers)
            for replica in range(self.VIRTUAL_NODES)
        )
        self.ring = [point for point, _ in points]
        self.owner = [server for _, server in points]

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        prompt = req.pages[: req.prompt_pages]
        key = prompt[min(self.prefix_pages, len(prompt)) - 1] if prompt else 0
        slot = bisect.bisect_left(self.ring, _hash64(key.to_bytes(8, "little", signed=True)))
        chosen = self.owner[slot % len(self.ring)]
        loads = [server.in_flight for server in servers]
        total = sum(loads)
        if total == 0:
            return chosen
        bound = (total + 1) / len(loads) * self.load_factor
        if loads[chosen] <= bound:
            return chosen
        within = [i for i, load in enumerate(loads) if load <= bound]
        return min(within, key=loads.__getitem__) if within else chosen


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class PrefixTree:
    """The router's picture of one server's cache: the page keys it routed there, least recently
    routed first. Page keys are prefix-chained, and a request's pages are refreshed from its end
    back to its start, so a page is never older than a page that extends it: trimming the oldest
    keeps the set prefix-closed, and a match is a binary search."""

    def __init__(self) -> None:
        self.pages: OrderedDict[int, None] = OrderedDict()

    def match(self, prompt: Sequence[int]) -> int:
        """Leading pages of `prompt` this tree holds."""
        pages = self.pages
        hi = len(prompt)
        # Prefix-closed: a tree without the first page holds none, one with the last holds all
        # (most trees, for most requests: the servers a prompt was never routed to, and the one
        # it was).
        if not hi or prompt[0] not in pages:
            return 0
        if prompt[hi - 1] in pages:
            return hi
        lo = 1
        hi -= 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if prompt[mid - 1] in pages:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def insert(self, prompt: Sequence[int]) -> None:
        """Make `prompt`'s pages the most recently routed, its first page last."""
        pages = self.pages
        refresh = pages.move_to_end
        if prompt and prompt[-1] in pages:
            # Prefix-closed, so the tree holds every page: refresh them in one C-level pass.
            try:
                deque(map(refresh, reversed(prompt)), maxlen=0)
                return
            except KeyError:  # not prefix-closed after all: the loop below moves every page
                pass
        for key in reversed(prompt):
            if key in pages:
                refresh(key)
            else:
                pages[key] = None

    def trim(self, max_pages: int) -> None:
        pages = self.pages
        while len(pages) > max_pages:
            pages.popitem(last=False)


class CacheAware:
    """The gateway's default (cache_aware.rs): when the load is imbalanced, the server with the
    fewest requests in flight; otherwise the server whose tree holds the longest prefix of the
    request if it covers more than `cache_threshold` of it, else (a miss) the least loaded
    server, or with `cache_aware_miss: smallest_tree` the server with the smallest tree (the
    rule before SGLang PR #14650). The prompt is then added to the chosen server's tree."""

    def __init__(self, spec: CacheAwareSpec, servers: int, page_size: int) -> None:
        self.spec = spec
        self.trees = [PrefixTree() for _ in range(servers)]
        self.max_pages = max(1, spec.max_tree_tokens // page_size)
        self.next_trim_s = spec.eviction_interval_s
        """The gateway trims on a timer, every interval; here at the first routing after each
        tick (the trees are only read when routing)."""

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        if now_s >= self.next_trim_s:
            for tree in self.trees:
                tree.trim(self.max_pages)
            every = self.spec.eviction_interval_s
            self.next_trim_s = (now_s // every + 1) * every
        prompt = req.pages[: req.prompt_pages]
        chosen = self._choose(prompt, servers)
        self.trees[chosen].insert(prompt)
        return chosen

    def _choose(self, prompt: Sequence[int], servers: Sequence[ServerLoad]) -> int:
        spec = self.spec
        loads = [server.in_flight for server in servers]
        most, least = max(loads), min(loads)
        if most - least > spec.balance_abs_threshold and most > least * spec.balance_rel_threshold:
            return loads.index(least)
        matches = [tree.match(prompt) for tree in self.trees]
        best = max(matches)
        if prompt and best / len(prompt) > spec.cache_threshold:
            return matches.index(best)
        if spec.cache_aware_miss == "smallest_tree":
            sizes = [len(tree.pages) for tree in self.trees]
            return sizes.index(min(sizes))
        return loads.index(least)


class ServerState(ServerLoad, Protocol):
    """What the routers that read caches and engine metrics reach of a server (the simulated
    `Server`): its queue, its running requests, its radix tree and the storage it shares."""

    @property
    def waiting(self) -> Sequence[Any]: ...

    @property
    def running(self) -> Mapping[int, Any]: ...

    @property
    def tree(self) -> Any: ...

    @property
    def storage(self) -> Any: ...


@dataclass(frozen=True)
class Signals:
    """One server's load signals at one instant: requests in flight and their prompt tokens
    (the gateway's), requests waiting (vLLM's `num_requests_waiting`, llm-d's queue depth), the
    share of device KV pages running requests hold, their prompts and the reservations for
    their output (llm-d's KV-cache utilization: cached pages no request holds count as free,
    as in vLLM's and SGLang's usage metrics) and the prompt tokens of
    requests whose first token has not come (Dynamo's active prefill tokens)."""

    in_flight: int = 0
    load_tokens: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    prefill_tokens: int = 0


def observe(server: ServerLoad) -> Signals:
    """`server`'s signals now (a server without a queue, as in the unit tests, has only its
    load)."""
    if isinstance(server, Seen):
        return server.signals
    queue = getattr(server, "waiting", None)
    if queue is None:
        return Signals(server.in_flight, server.load_tokens, 0, 0.0, server.load_tokens)
    state = cast(ServerState, server)
    kv = state.tree.kv
    prefill = running_pages = 0
    for job in queue:
        prefill += job.req.prompt_tokens
    for job in state.running.values():
        running_pages += job.req.prompt_pages
        if job.first_token_s is None:
            prefill += job.req.prompt_tokens
    held = min(1.0, (running_pages + kv.reserved) / kv.capacity)
    return Signals(state.in_flight, state.load_tokens, len(queue), held, prefill)


class Seen:
    """A server as a delayed router sees it: old load signals, and the live server behind them
    (whose caches the KV-event routers read with their own lag)."""

    __slots__ = ("server", "signals")

    def __init__(self, server: ServerLoad, signals: Signals) -> None:
        self.server = server
        self.signals = signals

    @property
    def in_flight(self) -> int:
        return self.signals.in_flight

    @property
    def load_tokens(self) -> int:
        return self.signals.load_tokens


def live(server: ServerLoad) -> ServerLoad:
    return server.server if isinstance(server, Seen) else server


class StaleLoads:
    """A router deciding on the servers' loads as they were at the last routing at least
    `delay_s` earlier (before any: idle). Snapshots are taken at routings, the only moments a
    router looks."""

    def __init__(self, router: Router, delay_s: float) -> None:
        self.router = router
        self.delay_s = delay_s
        self.history: deque[tuple[float, list[Signals]]] = deque()

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        history = self.history
        history.append((now_s, [observe(server) for server in servers]))
        cutoff = now_s - self.delay_s
        while len(history) > 1 and history[1][0] <= cutoff:
            history.popleft()
        when, old = history[0]
        view = old if when <= cutoff else [Signals()] * len(servers)
        seen = [Seen(server, signals) for server, signals in zip(servers, view, strict=True)]
        return self.router.route(req, seen, now_s)


class KvEvents:
    """A router's picture of the servers' caches from their KV events: a page is known on a
    server once the first request carrying it, in its prompt or its output (both are stored
    in the server's tree), was routed there `lag_s` ago (its store event has come); the pages
    a server holds beyond what is known are not seen. Removals are seen at once (the picture
    is the live cache, cut at the known pages)."""

    def __init__(self, servers: int, lag_s: float) -> None:
        self.lag_s = lag_s
        self.known: list[dict[int, float]] | None = (
            [{} for _ in range(servers)] if lag_s > 0 else None
        )

    def visible(self, server: int, prompt: Sequence[int], now_s: float) -> int:
        """Leading pages of `prompt` whose store events on `server` have come by `now_s`."""
        if self.known is None:
            return len(prompt)
        known, cutoff = self.known[server], now_s - self.lag_s
        for i, key in enumerate(prompt):
            if known.get(key, math.inf) > cutoff:
                return i
        return len(prompt)

    def routed(self, server: int, pages: Sequence[int], now_s: float) -> None:
        if self.known is not None:
            known = self.known[server]
            for key in pages:
                known.setdefault(key, now_s)


@dataclass(frozen=True)
class CacheView:
    """Leading pages of a prompt one server can restore, as the router sees them: from its
    device, extended by its host (HiCache's host tier), and from the shared storage."""

    device_pages: int = 0
    host_pages: int = 0
    storage_pages: int = 0


def cache_views(
    prompt: Sequence[int], servers: Sequence[ServerLoad], events: KvEvents, now_s: float
) -> list[CacheView]:
    """Each server's cache view of `prompt`: its tree's match, cut at what its KV events have
    told, and the shared storage's leading run (asked of the backend, not lagged)."""
    views = []
    storage_pages = 0
    for i, server in enumerate(servers):
        state = cast(ServerState, live(server))
        tree = getattr(state, "tree", None)
        if tree is None:
            views.append(CacheView())
            continue
        if i == 0 and state.storage is not None:
            storage_pages = state.storage.kv.leading_run(prompt, now_s)
        match = tree.match(prompt)
        seen = events.visible(i, prompt, now_s)
        views.append(
            CacheView(min(match.device_pages, seen), min(match.host_pages, seen), storage_pages)
        )
    return views


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


class CacheAwareSpec(RouterSpec):
    policy: Literal["cache_aware"] = "cache_aware"
    cache_threshold: Probability = 0.3
    """The prefix match ratio above which the best-matching server is chosen."""
    balance_abs_threshold: NonNegInt = 64
    """In-flight requests by which the busiest server must lead the idlest..."""
    balance_rel_threshold: Annotated[float, Field(strict=True, ge=1.0)] = 1.5
    """...and the factor by which it must lead it, for the load to count as imbalanced."""
    cache_aware_miss: Literal["min_load", "smallest_tree"] = "min_load"
    """Below the threshold: the least loaded server (SGLang since PR #14650) or the server with
    the smallest tree (before)."""
    eviction_interval_s: IntervalS = 60.0
    """How often the router trims its per-server prefix trees."""
    max_tree_tokens: PositiveInt = 2**24
    """What each server's tree is trimmed to, least recently routed first (the gateway's
    2^26-character budget at about four characters a token)."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(CacheAware(self, servers, page_size))


class RoundRobinSpec(RouterSpec):
    policy: Literal["round_robin"] = "round_robin"

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(RoundRobin(servers))


class RandomSpec(RouterSpec):
    policy: Literal["random"] = "random"

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(Random(servers, rng))


class PowerOfTwoSpec(RouterSpec):
    policy: Literal["power_of_two"] = "power_of_two"
    load_poll_interval_s: IntervalS = 10.0
    """How often the gateway polls each server's load (tokens in flight): the Python
    launcher's `--worker-load-check-interval` (`RouterArgs.worker_load_check_interval` 10, as
    `RouterConfig::default()`; the Rust binary's own flag defaults to 1)."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(PowerOfTwo(servers, self.load_poll_interval_s, rng))


class PrefixHashSpec(RouterSpec):
    policy: Literal["prefix_hash"] = "prefix_hash"
    prefix_tokens: PositiveInt = 256
    """How many leading tokens are hashed to pick a server."""
    prefix_hash_load_factor: Annotated[float, Field(strict=True, ge=1.0)] = 1.25
    """A server above this multiple of the mean load is passed over."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(
            PrefixHash(servers, self.prefix_tokens, self.prefix_hash_load_factor, page_size)
        )


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

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(DynamoKv(self, servers, page_size, rng))


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

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return self.delayed(LlmD(self, servers, page_size, rng))


ROUTERS.register("cache_aware", CacheAwareSpec)
ROUTERS.register("round_robin", RoundRobinSpec)
ROUTERS.register("random", RandomSpec)
ROUTERS.register("power_of_two", PowerOfTwoSpec)
ROUTERS.register("prefix_hash", PrefixHashSpec)
ROUTERS.register("dynamo_kv", DynamoKvSpec)
ROUTERS.register("llm_d", LlmDSpec)
