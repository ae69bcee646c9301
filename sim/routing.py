"""Routers: which server of a cluster each request goes to (SGLang model gateway's `--policy`).

A router is built once per run from `cluster.router`, the server count, the page size and its
own random stream, and is asked `route(request, servers, now_s)` at each arrival, with what the
gateway knows of each server's load. The gateway matches text; here a request is its chained
page keys, so prefixes are matched and hashed page by page.
Routers are registered in `ROUTERS`, which is also the list `cluster.router.policy` accepts.
Sources and the exact rules: docs/model.md, "Routers".
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sim.registry import Registry
from sim.workload import Request

if TYPE_CHECKING:
    from sim.scenario import RouterSpec


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


RouterFactory = Callable[["RouterSpec", int, int, np.random.Generator], Router]
"""(spec, servers, page_size, rng) -> a router for one run."""

ROUTERS: Registry[RouterFactory] = Registry("router")


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

    def __init__(self, spec: RouterSpec, servers: int, page_size: int) -> None:
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


ROUTERS.register(
    "cache_aware", lambda spec, servers, page_size, rng: CacheAware(spec, servers, page_size)
)
ROUTERS.register("round_robin", lambda spec, servers, page_size, rng: RoundRobin(servers))
ROUTERS.register("random", lambda spec, servers, page_size, rng: Random(servers, rng))
ROUTERS.register(
    "power_of_two",
    lambda spec, servers, page_size, rng: PowerOfTwo(servers, spec.load_poll_interval_s, rng),
)
ROUTERS.register(
    "prefix_hash",
    lambda spec, servers, page_size, rng: PrefixHash(
        servers, spec.prefix_tokens, spec.prefix_hash_load_factor, page_size
    ),
)
