"""SGLang model gateway's `random` policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from sim.cluster.signals import Router, ServerLoad
from sim.cluster.spec import RouterSpec
from sim.workload.kinds import Request


class Random:
    """A server drawn uniformly (random.rs)."""

    def __init__(self, servers: int, rng: np.random.Generator) -> None:
        self.servers = servers
        self.rng = rng

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        return int(self.rng.integers(self.servers))


class RandomSpec(RouterSpec):
    policy: Literal["random"] = "random"

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return Random(servers, rng)
