"""Routing on old signals: `cluster.router.signal_delay_s` (docs/model.md, "Signal staleness")."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from sim.cluster.signals import IDLE, Router, Seen, ServerLoad, Signals, observe
from sim.workload.kinds import Request


class StaleLoads:
    """A router deciding on each server's loads as they were `delay_s` earlier (before any
    were noted: idle).

    A server's signals are noted, dated, at the moments they change (`observed`): a request
    routed to it (once it arrived there), a prefill batch admitted and done there (admissions,
    first tokens), a request leaving it; and at each routing, dated then, which catches any
    other change since. What a routing sees of a server is its latest note at least `delay_s`
    old, so a delay hides what changed within it and nothing older. Each server keeps its
    notes within the delay and the one before; notes later than `horizon_s - delay_s`, which
    no routing before the horizon reads, are not taken."""

    def __init__(self, router: Router, delay_s: float, horizon_s: float = math.inf) -> None:
        self.router = router
        self.delay_s = delay_s
        self.last_read_s = horizon_s - delay_s
        """The latest date a routing before the horizon reads."""
        self.notes: list[deque[tuple[float, Signals]]] = []

    def observed(self, index: int, server: ServerLoad, now_s: float) -> None:
        """Note server `index`'s signals now (they may have changed)."""
        if now_s <= self.last_read_s:
            self._note(self._notes(index + 1)[index], observe(server), now_s)

    def _notes(self, servers: int) -> list[deque[tuple[float, Signals]]]:
        notes = self.notes
        while len(notes) < servers:
            notes.append(deque())
        return notes

    @staticmethod
    def _note(notes: deque[tuple[float, Signals]], signals: Signals, now_s: float) -> None:
        if notes:
            when, last = notes[-1]
            if last == signals:
                return
            if when == now_s:
                notes[-1] = (now_s, signals)
                return
        notes.append((now_s, signals))

    def route(self, req: Request, servers: Sequence[ServerLoad], now_s: float) -> int:
        all_notes = self._notes(len(servers))
        if now_s <= self.last_read_s:
            for notes, server in zip(all_notes, servers, strict=False):
                self._note(notes, observe(server), now_s)
        cutoff = now_s - self.delay_s
        seen = []
        for notes, server in zip(all_notes, servers, strict=False):
            while len(notes) > 1 and notes[1][0] <= cutoff:
                notes.popleft()
            signals = notes[0][1] if notes and notes[0][0] <= cutoff else IDLE
            seen.append(Seen(server, signals))
        return self.router.route(req, seen, now_s)
