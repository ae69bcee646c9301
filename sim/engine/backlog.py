"""The writer's backlog: a first-in first-out queue with SimPy's `Store` event semantics.

`simpy.Store` builds a put and a get request object per item and walks its request queues on
every event; the writer's backlog is unbounded and has one reader, so this queue keeps only
what that needs. It schedules exactly the events a `Store` would, in the same order (a put's
event at once; a get's at once when an item waits, else when the next put's event is
processed), so runs are unchanged, event count included.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import simpy


class Backlog:
    """An unbounded FIFO of items for processes that `yield backlog.get()`."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: deque[Any] = deque()
        self._getters: deque[simpy.Event] = deque()

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: Any) -> simpy.Event:
        """Queue `item`; a waiting getter gets the oldest item when the put's event is processed."""
        self.items.append(item)
        event = simpy.Event(self.env)
        event.callbacks.append(self._serve)
        return event.succeed()

    def get(self) -> simpy.Event:
        """An event that succeeds with the oldest item (at once when one waits)."""
        event = simpy.Event(self.env)
        self._getters.append(event)
        self._serve(None)
        return event

    def _serve(self, _event: simpy.Event | None) -> None:
        """Hand the oldest item to the oldest getter (one per call, as `Store` does)."""
        if self._getters and self.items:
            self._getters.popleft().succeed(self.items.popleft())
