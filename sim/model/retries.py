"""Re-issues of missed prefetches, paced in scheduler passes (SGLang's `StoragePrefetchRetries`
in `mem_cache/storage_prefetch.py`).

A miss marks its request; the first pass after the mark sets it due `interval_passes` passes
later, and the pass that finds it due re-issues it. SGLang counts a pass per scheduler loop
iteration, so the interval lasts as long as the passes it spans: eight chunks of a long
prefill take seconds, eight passes of an idle scheduler next to nothing. A paced retry gives way
to the queue head (whose admission does not wait for it); an immediate one (a re-fetch after a
staged span shrank) is due at the next pass whatever the interval and the queue position.
Both spend the same attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class RetryMark:
    due_pass: int | None = None
    """Set by the first pass after the mark (None until then)."""
    immediate: bool = False


class PrefetchRetries:
    """The marked requests of one server and its pass counter."""

    def __init__(self, max_attempts: int, interval_passes: int) -> None:
        self.max_attempts = max_attempts
        self.interval_passes = interval_passes
        self.step = 0
        """Passes polled so far."""
        self._marks: dict[int, RetryMark] = {}

    @property
    def pending(self) -> bool:
        return bool(self._marks)

    def marked(self, rid: int) -> bool:
        return rid in self._marks

    def mark(self, rid: int) -> None:
        """A paced re-issue after a miss (`poll_miss`); an earlier mark stands."""
        self._marks.setdefault(rid, RetryMark())

    def refetch(self, rid: int) -> None:
        """An immediate re-issue (`refetch`)."""
        self._marks[rid] = RetryMark(immediate=True)

    def cancel(self, rid: int) -> None:
        """The request was admitted or left: nothing to re-issue."""
        self._marks.pop(rid, None)

    def pop_ready(self, head: int | None, attempts: Callable[[int], int]) -> list[int]:
        """One pass: the marked requests whose re-issue is due now, in the order they were
        marked (every marked request is queued: a mark is cancelled at admission). The queue
        `head`'s paced mark is dropped, as is every mark past the attempt limit."""
        self.step += 1
        marks = self._marks
        if not marks:
            return []
        if head is not None and head in marks and not marks[head].immediate:
            del marks[head]
        step, ready = self.step, []
        for rid, mark in list(marks.items()):
            if attempts(rid) >= self.max_attempts:
                del marks[rid]
                continue
            if not mark.immediate:
                if self.interval_passes <= 0:
                    del marks[rid]
                    continue
                if mark.due_pass is None:
                    mark.due_pass = step + self.interval_passes
                if mark.due_pass > step:
                    continue
            del marks[rid]
            ready.append(rid)
        return ready
