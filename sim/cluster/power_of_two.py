"""SGLang model gateway's `power_of_two` policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from sim.cluster.signals import Router, ServerLoad
from sim.cluster.spec import RouterSpec
from sim.core.spec import IntervalS
from sim.workload.kinds import Request


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


class PowerOfTwoSpec(RouterSpec):
    policy: Literal["power_of_two"] = "power_of_two"
    load_poll_interval_s: IntervalS = 10.0
    """How often the gateway polls each server's load (tokens in flight): the Python
    launcher's `--worker-load-check-interval` (`RouterArgs.worker_load_check_interval` 10, as
    `RouterConfig::default()`; the Rust binary's own flag defaults to 1)."""

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        return PowerOfTwo(servers, self.load_poll_interval_s, rng)
