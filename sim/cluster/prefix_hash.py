"""SGLang model gateway's `prefix_hash` policy."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.cluster.signals import Router, ServerLoad
from sim.cluster.spec import RouterSpec
from sim.core.spec import PositiveInt
from sim.workload.kinds import Request


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


class PrefixHashSpec(RouterSpec):
    policy: Literal["prefix_hash"] = "prefix_hash"
    prefix_tokens: PositiveInt = 256
    """How many leading tokens are hashed to pick a server."""
    prefix_hash_load_factor: Annotated[float, Field(strict=True, ge=1.0)] = 1.25
    """A server above this multiple of the mean load is passed over."""

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return PrefixHash(servers, self.prefix_tokens, self.prefix_hash_load_factor, page_size)
