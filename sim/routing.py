"""Routers: which server of a cluster each request goes to (SGLang model gateway's `--policy`).

A router is built once per run from its spec (`cluster.router`, told apart by its `policy`, each
policy's spec holding only its own knobs), the server count, the page size and its own random
stream, and is asked `route(request, servers, now_s)` at each arrival, with what the gateway
knows of each server's load. The gateway matches text; here a request is its chained page keys,
so prefixes are matched and hashed page by page.
Router specs are registered in `ROUTERS`, which is also the list `cluster.router.policy`
accepts.
Sources and the exact rules: docs/model.md, "Routers".
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import Field

from sim.registry import Registry
from sim.spec import IntervalS, NonNegInt, PositiveInt, Probability, Strict
from sim.workload import Request


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

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        raise NotImplementedError


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
        return CacheAware(self, servers, page_size)


class RoundRobinSpec(RouterSpec):
    policy: Literal["round_robin"] = "round_robin"

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return RoundRobin(servers)


class RandomSpec(RouterSpec):
    policy: Literal["random"] = "random"

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return Random(servers, rng)


class PowerOfTwoSpec(RouterSpec):
    policy: Literal["power_of_two"] = "power_of_two"
    load_poll_interval_s: IntervalS = 10.0
    """How often the gateway polls each server's load (tokens in flight): the Python
    launcher's `--worker-load-check-interval` (`RouterArgs.worker_load_check_interval` 10, as
    `RouterConfig::default()`; the Rust binary's own flag defaults to 1)."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return PowerOfTwo(servers, self.load_poll_interval_s, rng)


class PrefixHashSpec(RouterSpec):
    policy: Literal["prefix_hash"] = "prefix_hash"
    prefix_tokens: PositiveInt = 256
    """How many leading tokens are hashed to pick a server."""
    prefix_hash_load_factor: Annotated[float, Field(strict=True, ge=1.0)] = 1.25
    """A server above this multiple of the mean load is passed over."""

    def build(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return PrefixHash(servers, self.prefix_tokens, self.prefix_hash_load_factor, page_size)


ROUTERS.register("cache_aware", CacheAwareSpec)
ROUTERS.register("round_robin", RoundRobinSpec)
ROUTERS.register("random", RandomSpec)
ROUTERS.register("power_of_two", PowerOfTwoSpec)
ROUTERS.register("prefix_hash", PrefixHashSpec)
