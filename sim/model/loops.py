"""Repeated-failure loops, tracked online from the stream of resolved prefetches.

A loop is a maximal run of consecutive discards at the same endpoint page (the last page key of
the hit span). An attempt reaches an endpoint when its hit span holds that page: page keys are
chained, so the key names the whole prefix up to it, and a longer prefetch of the same prefix
reaches it too (the next turn of a conversation does). The loop is healed when a later attempt
that reaches its endpoint succeeds; it counts as retried once any later attempt reached it (a
repeat discard at the endpoint, which lengthens it, a discard further on, or a success, which
heals it). heal_rate is healed / retried, so a single discard nobody came back for counts neither
way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Loop:
    endpoint_key: int
    first_discard_s: float
    length: int = 1
    reached_again: bool = False
    """A later discard further on reached this endpoint."""
    healed_s: float | None = None
    stale_by_other: bool = False
    """One of its discards missed an object another server's write had pushed out of storage."""

    @property
    def retried(self) -> bool:
        return self.length > 1 or self.reached_again or self.healed_s is not None

    @property
    def time_to_heal_s(self) -> float | None:
        return None if self.healed_s is None else self.healed_s - self.first_discard_s


class LoopTracker:
    def __init__(self) -> None:
        self.open: dict[int, Loop] = {}
        self.closed: list[Loop] = []

    def _reached(self, span: Sequence[int]) -> list[Loop]:
        """The open loops whose endpoint this span holds."""
        if not self.open:
            return []
        return [self.open[key] for key in self.open.keys() & set(span)]

    def on_discard(
        self, span: Sequence[int], now_s: float, *, stale_by_other: bool = False
    ) -> None:
        """A discarded attempt whose hit span is `span` (its endpoint is the last key);
        `stale_by_other`: what it missed another server's write had pushed out."""
        endpoint = span[-1]
        for loop in self._reached(span):
            if loop.endpoint_key == endpoint:
                loop.length += 1
            else:
                loop.reached_again = True
        if endpoint not in self.open:
            self.open[endpoint] = Loop(endpoint, now_s)
        self.open[endpoint].stale_by_other |= stale_by_other

    def on_success(self, span: Sequence[int], loaded: int, now_s: float) -> None:
        """An accepted attempt with hit span `span` that loaded its first `loaded` pages: it
        heals every loop whose endpoint it loaded, and retries those further on in its span (a
        KV-only model keeps a partial read)."""
        for loop in self._reached(span[:loaded]):
            del self.open[loop.endpoint_key]
            loop.healed_s = now_s
            self.closed.append(loop)
        if loaded < len(span):
            for loop in self._reached(span[loaded:]):
                loop.reached_again = True

    def all_loops(self) -> list[Loop]:
        """Healed loops and the ones still open at the end of the run, by first discard."""
        return sorted([*self.closed, *self.open.values()], key=lambda lp: lp.first_discard_s)
