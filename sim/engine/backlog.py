"""The writer's backlog: a first-in first-out queue for one reader.

`simpy.Store` builds a put and a get request object per item, walks its request queues on every
event and schedules an event for every put, which wakes a waiting reader one event later. The
writer's backlog is unbounded and has one reader, so a put schedules nothing: it hands its item
to a waiting reader at once (one event, the reader's), and a get succeeds at once when an item
waits. The reader sees the same items in the same order; only the engine's event count falls.
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

    def put(self, item: Any) -> None:
        """Queue `item`; a waiting getter gets the oldest item at once."""
        self.items.append(item)
        if self._getters:
            self._getters.popleft().succeed(self.items.popleft())

    def get(self) -> simpy.Event:
        """An event that succeeds with the oldest item (at once when one waits)."""
        event = simpy.Event(self.env)
        if self.items:
            event.succeed(self.items.popleft())
        else:
            self._getters.append(event)
        return event
