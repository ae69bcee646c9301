"""The router spec every policy's spec extends: `cluster.router:`, told apart by its `policy`."""

from __future__ import annotations

import math

import numpy as np

from sim.cluster.signals import Router
from sim.cluster.staleness import StaleLoads
from sim.core.spec import NonNegFloat, Strict


class RouterSpec(Strict):
    """`cluster.router:` — the policy that picks a server for each request (SGLang model
    gateway's `--policy`), and that policy's own knobs (its flags)."""

    policy: str
    """One of `ROUTERS`; the gateway's default is cache_aware."""
    signal_delay_s: NonNegFloat = 0.0
    """How old the view the router decides on is: the servers' loads as they were this long
    ago, and (for the routers that read caches through KV events) a page only once it has been
    on its way to that server this long. 0: the current view."""

    def make(self, servers: int, page_size: int, rng: np.random.Generator) -> Router:
        """The policy's router, deciding on the current view."""
        raise NotImplementedError

    def build(
        self, servers: int, page_size: int, rng: np.random.Generator, horizon_s: float = math.inf
    ) -> Router:
        """The router of one run ending at `horizon_s`, deciding on loads `signal_delay_s` old
        when that is above 0."""
        router = self.make(servers, page_size, rng)
        if self.signal_delay_s > 0:
            return StaleLoads(router, self.signal_delay_s, horizon_s)
        return router
