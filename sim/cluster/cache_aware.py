"""SGLang model gateway's default policy, `cache_aware`: per-server prefix trees of what it
routed, and a load-balance rule."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.cluster.signals import Router, ServerLoad
from sim.cluster.spec import RouterSpec
from sim.core.spec import IntervalS, NonNegInt, PositiveInt, Probability
from sim.workload.kinds import Request


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

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return CacheAware(self, servers, page_size)
