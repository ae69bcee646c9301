"""SGLang model gateway's `round_robin` policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from sim.cluster.signals import Router, ServerLoad
from sim.cluster.spec import RouterSpec
from sim.workload.kinds import Request


class RoundRobin:
    """Each server in turn, whatever it holds or has queued (round_robin.rs)."""

    def __init__(self, servers: int) -> None:
        self.servers = servers
        self.count = 0

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        chosen = self.count % self.servers
        self.count += 1
        return chosen


class RoundRobinSpec(RouterSpec):
    policy: Literal["round_robin"] = "round_robin"

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return RoundRobin(servers)
