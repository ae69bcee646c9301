"""What routers know of servers: their load signals, and their caches as KV events report them.

A router is asked `route(request, servers, now_s)` with what it may know of each server; the
routers that read caches and engine metrics (`dynamo_kv`, `llm_d`) reach further into the
simulated server (`ServerState`). A router on delayed signals sees each server through `Seen`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

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


IDLE = Signals()
"""A server before any of its signals were noted."""


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
