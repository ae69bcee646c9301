"""Repeated-failure loops, tracked online from the stream of resolved prefetches.

A loop is a maximal run of consecutive discards at the same endpoint page. It is healed when a
later prefetch whose hit span reaches that endpoint succeeds. A loop counts as retried once any
later prefetch reaches the endpoint after its first discard (a repeat discard or a success);
heal_rate is healed / retried, so single discards nobody came back for do not count either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Loop:
    endpoint_key: int
    first_discard_s: float
    length: int = 1
    retried: bool = False
    healed_s: float | None = None

    @property
    def time_to_heal_s(self) -> float | None:
        return None if self.healed_s is None else self.healed_s - self.first_discard_s


class LoopTracker:
    def __init__(self) -> None:
        self.open: dict[int, Loop] = {}
        self.closed: list[Loop] = []

    def _reached(self, span: Sequence[int]) -> list[Loop]:
        if not self.open:
            return []
        if len(self.open) < len(span):
            keys = set(span)
            return [loop for key, loop in self.open.items() if key in keys]
        return [self.open[key] for key in span if key in self.open]

    def on_discard(self, span: Sequence[int], now_s: float) -> None:
        endpoint = span[-1]
        for loop in self._reached(span):
            loop.retried = True
            if loop.endpoint_key == endpoint:
                loop.length += 1
        if endpoint not in self.open:
            self.open[endpoint] = Loop(endpoint, now_s)

    def on_success(self, span: Sequence[int], now_s: float) -> None:
        for loop in self._reached(span):
            loop.retried = True
            loop.healed_s = now_s
            del self.open[loop.endpoint_key]
            self.closed.append(loop)

    def all_loops(self) -> list[Loop]:
        """Closed loops, then the ones still open at the end of the run, by first discard."""
        return sorted([*self.closed, *self.open.values()], key=lambda lp: lp.first_discard_s)
