"""Re-issues of missed prefetches, paced in scheduler passes (SGLang's `StoragePrefetchRetries`
in `mem_cache/storage_prefetch.py` from 0.5.20; 0.5.19's scheduler loop
`_retry_missed_storage_prefetches` behaves the same way, less the queue-head exemption).

A miss marks its request; the first pass after the mark sets it due `interval_passes` passes
later, and the pass that finds it due re-issues it. A new miss of a request already marked
replaces its mark: the wait starts again, and an immediate mark becomes a paced one. SGLang
counts a pass per scheduler loop iteration, so the interval lasts as long as the passes it
spans: eight chunks of a long prefill take seconds, eight passes of an idle scheduler next to
nothing. Due requests are re-issued in waiting-queue order, whatever order they were marked in.
A paced retry gives way to the queue head (whose admission does not wait for it) where
`head_exempt`; an immediate one (a re-fetch after a staged span shrank) is due at the next pass
whatever the interval and the queue position. Both spend the same attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class RetryMark:
    due_pass: int | None = None
    """Set by the first pass after the mark (None until then)."""
    immediate: bool = False


class PrefetchRetries:
    """The marked requests of one server and its pass counter.

    `head_exempt`: the waiting-queue head's paced mark is dropped (0.5.20 on); 0.5.19 re-issues
    the head like any other request. `short_spans`: a request whose span was too short to
    prefetch is marked too (0.5.19, 0.5.20: the span grows if its device match is evicted while
    it waits). `deadline_cancels`: a prefetch stopped by its timeout deadline cancels the
    request's mark, and no later miss or re-fetch marks it again (0.5.23).
    """

    def __init__(
        self,
        max_attempts: int,
        interval_passes: int,
        *,
        head_exempt: bool = True,
        short_spans: bool = False,
        deadline_cancels: bool = False,
    ) -> None:
        self.max_attempts = max_attempts
        self.interval_passes = interval_passes
        self.head_exempt = head_exempt
        self.short_spans = short_spans
        self.deadline_cancels = deadline_cancels
        self.step = 0
        """Passes polled so far."""
        self._marks: dict[int, RetryMark] = {}
        self._expired: set[int] = set()
        """Requests whose deadline expired (`deadline_cancels`): never marked again."""

    @property
    def pending(self) -> bool:
        return bool(self._marks)

    def marked(self, rid: int) -> bool:
        return rid in self._marks

    def mark(self, rid: int) -> None:
        """A paced re-issue after a miss (`poll_miss`); it replaces an earlier mark."""
        if rid not in self._expired:
            self._marks[rid] = RetryMark()

    def mark_short(self, rid: int, attempts: int) -> bool:
        """A span too short to prefetch: marked where `short_spans` and attempts remain (a
        paced mark SGLang would drop at its first pass is not made); True if marked."""
        if not self.short_spans or attempts >= self.max_attempts or self.interval_passes <= 0:
            return False
        self.mark(rid)
        return self.marked(rid)

    def refetch(self, rid: int) -> None:
        """An immediate re-issue (`refetch`)."""
        if rid not in self._expired:
            self._marks[rid] = RetryMark(immediate=True)

    def expire(self, rid: int) -> None:
        """The request's prefetch was stopped by its timeout deadline: with `deadline_cancels`
        its mark goes and no later one is made (0.5.23's `_mark_prefetch_deadline_expired`;
        `prefetch_from_storage` then returns before any lookup)."""
        if self.deadline_cancels:
            self._marks.pop(rid, None)
            self._expired.add(rid)

    def cancel(self, rid: int) -> None:
        """The request was admitted or left: nothing to re-issue."""
        self._marks.pop(rid, None)
        self._expired.discard(rid)

    def pop_ready(self, waiting: Sequence[int], attempts: Callable[[int], int]) -> list[int]:
        """One pass: the marked requests of the `waiting` queue whose re-issue is due now, in
        queue order. The head's paced mark is dropped (`head_exempt`), as is every mark past
        the attempt limit and every paced one when the interval is 0; a mark of a request not
        in the queue waits."""
        self.step += 1
        marks = self._marks
        if not marks or not waiting:
            return []
        head = marks.get(waiting[0])
        if self.head_exempt and head is not None and not head.immediate:
            del marks[waiting[0]]
        step, ready = self.step, []
        for rid in waiting:
            mark = marks.get(rid)
            if mark is None:
                continue
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
