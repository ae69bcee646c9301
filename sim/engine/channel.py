"""A server's storage read channel: one read at a time, the others in arrival order.

`simpy.Resource` schedules an event for every request and one more for every release, whose
processing only retries grants the release already made. Prefetches take the channel and give
it back in turn, so this channel grants a free channel at once (no event: the reader goes on)
and hands a released channel to the oldest waiter through the one event that wakes it.
"""

from __future__ import annotations

from collections import deque

import simpy


class ReadChannel:
    """One read at a time; `acquire` returns None when the caller holds the channel now, else
    the event that grants it (in arrival order)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.busy = False
        self._waiting: deque[simpy.Event] = deque()

    def acquire(self) -> simpy.Event | None:
        if not self.busy:
            self.busy = True
            return None
        event = simpy.Event(self.env)
        self._waiting.append(event)
        return event

    def release(self) -> None:
        """Give the channel to the oldest waiter, or free it."""
        if self._waiting:
            self._waiting.popleft().succeed()
        else:
            self.busy = False
