"""The cluster in time: arrivals routed to its servers, and the storage backend they share.

A scenario without a `cluster` section is a cluster of one server, run exactly as a lone
server: its reads and writes have the backend's bandwidth to themselves. With several servers,
every storage transfer in flight shares the backend's aggregate read or write bandwidth
(`sim.engine.links.SharedBandwidth`), each capped by its server's own link. Arrivals, follow-up
turns, the backend's eviction sources and the time-series sampling are the cluster's processes;
each server runs its own scheduler and writer (`sim.engine.server`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.cluster.signals import Router
from sim.cluster.staleness import StaleLoads
from sim.engine.links import DedicatedLink, Link, SharedBandwidth
from sim.engine.server import Server
from sim.model.build import ClusterModel, Eviction
from sim.workload.kinds import Request


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts processed events (the `events` summary key).

    Every event SimPy processes was scheduled once, taking the next number of the environment's
    event counter, and left the queue when processed; so the count is read off that counter and
    the queue, and stepping stays SimPy's own (a counting `step` cost a Python call per event).
    """

    @property
    def events(self) -> int:
        scheduled = int(repr(self._eid)[len("count(") : -1])
        return scheduled - len(self._queue)


class Simulation:
    """A cluster of servers sharing one storage backend, run to the horizon: everything it runs
    comes assembled (`sim.model.build.build_cluster`); it reads no scenario."""

    def __init__(
        self, cluster: ClusterModel, *, on_progress: Callable[[float], None] | None = None
    ) -> None:
        self.cluster = cluster
        self.duration_s = cluster.duration_s
        self.warmup_s = cluster.warmup_s
        self.on_progress = on_progress
        """Called with the simulated time at every time-series sample (progress bars)."""
        self.storage = cluster.storage
        self.workload = cluster.workload
        self.env = CountingEnvironment()
        self.arrival_scale = cluster.arrival_scale
        self.reads, self.writes = self._links()
        self.servers = [
            Server(
                self.env,
                model,
                read_link=self.reads,
                write_link=self.writes,
                warmup_s=cluster.warmup_s,
                left=self._left,
            )
            for model in cluster.servers
        ]
        self.router: Router = cluster.router
        self.stale = self.router if isinstance(self.router, StaleLoads) else None
        """A router on delayed signals, told when a server's load changes."""
        self._index = {server: i for i, server in enumerate(self.servers)}
        if self.stale is not None:
            for server in self.servers:
                server.load_changed = self._load_changed
        self._ts_interval = cluster.duration_s / 200.0 or cluster.duration_s

    def _links(self) -> tuple[Link, Link]:
        """The backend's read and write bandwidth: a lone server's own, or shared by all."""
        storage, env, cap = self.storage, self.env, self.cluster.link_bps
        if len(self.cluster.servers) == 1:

            def alone(bytes_per_s: float) -> DedicatedLink:
                return DedicatedLink(env, bytes_per_s if cap is None else min(bytes_per_s, cap))

            return alone(storage.read_bps), alone(storage.write_bps)
        return (
            SharedBandwidth(env, storage.read_bps, cap),
            SharedBandwidth(env, storage.write_bps, cap),
        )

    # ------------------------------------------------------------------ driver

    def start(self) -> Simulation:
        """Register the processes; `run` calls it, tests may then step the environment."""
        env = self.env
        env.process(self.arriving())
        for server in self.servers:
            server.start()
        env.process(self.sampling())
        for eviction in self.cluster.evictions:
            env.process(self.evicting(eviction))
        return self

    def finish(self) -> Simulation:
        """Record the requests still waiting or running at the horizon as unfinished."""
        for server in self.servers:
            server.finish()
        return self

    def run(self) -> Simulation:
        self.start()
        self.env.run(until=self.duration_s)
        return self.finish()

    # ------------------------------------------------------------------ arrivals

    def arriving(self) -> Generator[simpy.Event, Any, None]:
        env, scale = self.env, self.arrival_scale
        for req in self.workload.arrivals():
            if scale != 1.0:
                req.arrival_s *= scale
            if req.arrival_s > self.duration_s:
                return
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.route(req)

    def route(self, req: Request) -> None:
        """Hand a request to the server the router picks (a lone server takes every request:
        its router, which could only pick it, is not asked)."""
        servers = self.servers
        if len(servers) == 1:
            servers[0].arrive(req)
            return
        chosen = self.router.route(req, servers, self.env.now)
        servers[chosen].arrive(req)
        if self.stale is not None:
            self.stale.observed(chosen, servers[chosen], self.env.now)

    def _load_changed(self, server: Server) -> None:
        if self.stale is not None:
            self.stale.observed(self._index[server], server, self.env.now)

    def _left(self, server: Server, req: Request, outcome: str) -> None:
        """A request left a server: a finished turn may be followed by the next."""
        self._load_changed(server)
        if outcome == "finished":
            self.follow_up(req)

    def follow_up(self, req: Request) -> None:
        """Schedule the conversation's next turn, if any: a timer whose callback routes it."""
        nxt = self.workload.follow_up(req, self.env.now)
        if nxt is None or nxt.arrival_s > self.duration_s:
            return
        turn = self.env.timeout(max(0.0, nxt.arrival_s - self.env.now))
        turn.callbacks.append(lambda _e: self.route(nxt))

    # ------------------------------------------------------------------ background

    def evicting(self, eviction: Eviction) -> Generator[simpy.Event, Any, None]:
        rng = eviction.rng
        while True:
            yield self.env.timeout(float(rng.exponential(1.0 / eviction.rate_per_s)))
            eviction.pool.evict_random(rng, self.env.now)

    def sampling(self) -> Generator[simpy.Event, Any, None]:
        while True:
            for server in self.servers:
                server.sample()
            if self.on_progress is not None:
                self.on_progress(self.env.now)
            yield self.env.timeout(self._ts_interval)
