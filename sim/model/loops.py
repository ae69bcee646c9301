"""Repeated-failure loops, tracked online from the stream of resolved prefetches.

A loop is a maximal run of consecutive discards at the same endpoint page (the last page key of
the hit span). Attempts at an endpoint are the prefetches whose hit ends there. The loop is
healed when a later attempt at its endpoint succeeds; it counts as retried once any later
attempt was made (a repeat discard, which lengthens it, or a success, which heals it). heal_rate
is healed / retried, so a single discard nobody came back for counts neither way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Loop:
    endpoint_key: int
    first_discard_s: float
    length: int = 1
    healed_s: float | None = None

    @property
    def retried(self) -> bool:
        return self.length > 1 or self.healed_s is not None

    @property
    def time_to_heal_s(self) -> float | None:
        return None if self.healed_s is None else self.healed_s - self.first_discard_s


class LoopTracker:
    def __init__(self) -> None:
        self.open: dict[int, Loop] = {}
        self.closed: list[Loop] = []

    def on_discard(self, endpoint_key: int, now_s: float) -> None:
        loop = self.open.get(endpoint_key)
        if loop is None:
            self.open[endpoint_key] = Loop(endpoint_key, now_s)
        else:
            loop.length += 1

    def on_success(self, endpoint_key: int, now_s: float) -> None:
        loop = self.open.pop(endpoint_key, None)
        if loop is not None:
            loop.healed_s = now_s
            self.closed.append(loop)

    def all_loops(self) -> list[Loop]:
        """Healed loops and the ones still open at the end of the run, by first discard."""
        return sorted([*self.closed, *self.open.values()], key=lambda lp: lp.first_discard_s)
