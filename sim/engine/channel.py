"""A server's storage read channel, and prefetches run as callbacks rather than processes.

The read channel: one read at a time, the others in arrival order.

`simpy.Resource` schedules an event for every request and one more for every release, whose
processing only retries grants the release already made. Prefetches take the channel and give
it back in turn, so this channel grants a free channel at once (no event: the reader goes on)
and hands a released channel to the oldest waiter through the one event that wakes it.

`run_callbacks` runs a generator of events the way a `simpy.Process` does, resuming it as each
event it waits for is processed, but starts it at once and ends without an event: a process
costs an event to start and one to end, which a prefetch nobody waits on does not need.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

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


def run_callbacks(steps: Generator[simpy.Event, Any, None]) -> None:
    """Run `steps` up to its first wait now, then on from each event it waits for when that
    event is processed (with the event's value); its end schedules nothing."""

    def resume(event: simpy.Event | None) -> None:
        value = None if event is None else event.value
        while True:
            try:
                waited = steps.send(value)
            except StopIteration:
                return
            if waited.callbacks is not None:
                waited.callbacks.append(resume)
                return
            value = waited.value

    resume(None)
