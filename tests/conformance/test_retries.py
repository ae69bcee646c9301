"""Prefetch retries: the model's `PrefetchRetries` against each release's retry scheduler, driven
by the same seeded random sequences of events (paced misses, immediate re-fetches, scheduler
passes, arrivals, admissions, aborts, waiting-queue reorders, deadline expiries), comparing at
every pass which requests are re-issued and in what order, the attempts each has spent and
(where the release keeps one) the set of pending retries.

0.5.19 keeps its retry state on the request and in the tree's `_storage_prefetch_missed_rids`,
re-issued by `Scheduler._retry_missed_storage_prefetches`; 0.5.20 on, `StoragePrefetchRetries`
(`mem_cache/storage_prefetch.py`) is polled by `Scheduler._process_storage_prefetch_retries`,
which spends an attempt in `_retry_storage_prefetch`. Both scheduler methods run for real, on a
stand-in scheduler holding only the waiting queue, the tree cache and `_prefetch_kvcache`. In
0.5.23 the re-issue reaches the real `UnifiedRadixCache.prefetch_from_storage`, which returns
before any lookup for a request whose deadline expired. 0.5.18 has no retries at all.
"""

from __future__ import annotations

import random
import types
from types import SimpleNamespace
from typing import Any

import pytest

from sim.model.retries import PrefetchRetries
from tests.conformance import releases
from tests.conformance.profiles import profile
from tests.conformance.tally import agree

CASES = 300
"""Sequences a release; each is up to 40 events on requests 0-7."""
SCHEDULER = "sglang.srt.managers.scheduler"
WITH_RETRIES = [r for r in releases.RELEASES if r != "0.5.18"]
WITH_CLASS = releases.shipping("storage_prefetch", since="0.5.20")


def scheduler(release: str) -> types.ModuleType:
    """The release's `managers/scheduler.py`, imported for real (`releases.real_module`)."""
    return releases.real_module(release, SCHEDULER)


class _Blocked(Exception):
    """`prefetch_from_storage` went past its expiry check (it would look the span up)."""


class _Controller:
    def __getattr__(self, name: str) -> Any:
        raise _Blocked(name)


class _Req:
    """A queued request: its id and the retry fields the scheduler keeps on `Req` (hashable,
    as the request handles keying the tree's maps)."""

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.storage_prefetch_retry_pending = False
        self.storage_prefetch_retry_wait_polls = 0
        self.storage_prefetch_retry_attempts = 0


class _Theirs:
    """One release's retry scheduler behind one interface, on requests named by number."""

    def __init__(self, release: str, max_attempts: int, interval: int) -> None:
        self.release = release
        self.mod = scheduler(release)
        self.mod.get_memory = lambda: SimpleNamespace(
            hicache_storage_prefetch_retry_poll_interval=interval,
            hicache_storage_prefetch_retry_max_attempts=max_attempts,
        )
        tree_mod = releases.module(release, "unified_radix_cache")
        assert tree_mod is not None
        self.tree_cls = tree_mod.UnifiedRadixCache
        self.reqs: dict[int, Any] = {}
        self.issued: list[int] = []
        self.class_based = release in WITH_CLASS
        self.deadlines = hasattr(self.tree_cls, "_mark_prefetch_deadline_expired")
        tree = SimpleNamespace(_storage_prefetch_missed_rids=set())
        if self.class_based:
            prefetch_mod = releases.module(release, "storage_prefetch")
            assert prefetch_mod is not None
            tree.storage_prefetch_retries = prefetch_mod.StoragePrefetchRetries()
            tree.enable_storage, tree.cache_controller = True, _Controller()
            tree._storage_prefetch_wait = {}
        else:
            tree.pop_storage_prefetch_miss = types.MethodType(
                self.tree_cls.pop_storage_prefetch_miss, tree
            )
        self.tree = tree
        self.sched = SimpleNamespace(waiting_queue=[], tree_cache=tree)
        self.sched._prefetch_kvcache = self._prefetch_kvcache
        if self.class_based:
            self.function = "Scheduler._process_storage_prefetch_retries"
            self.sched._retry_storage_prefetch = types.MethodType(
                self.mod.Scheduler._retry_storage_prefetch, self.sched
            )
        else:
            self.function = "Scheduler._retry_missed_storage_prefetches"

    def _prefetch_kvcache(self, req: Any, storage_hit_end: int | None = None) -> None:
        """The re-issue: from 0.5.23 through the real `prefetch_from_storage`'s early checks."""
        if self.deadlines:
            try:
                self.tree_cls.prefetch_from_storage(self.tree, req, 0, [])
            except _Blocked:
                pass
            else:
                return
        self.issued.append(int(req.rid))

    def arrive(self, rid: int) -> None:
        req = _Req(str(rid))
        self.reqs[rid] = req
        self.sched.waiting_queue.append(req)

    def leave(self, rid: int) -> None:
        """Admitted (the scheduler cancels `can_run_list`; 0.5.19's tree drops the marker in
        `pop_prefetch_loaded_tokens`) or aborted (`release_aborted_request`): the same."""
        self.sched.waiting_queue.remove(self.reqs[rid])
        if self.class_based:
            self.tree.storage_prefetch_retries.cancel(str(rid))
        else:
            self.tree._storage_prefetch_missed_rids.discard(str(rid))

    def reorder(self, order: list[int]) -> None:
        self.sched.waiting_queue = [self.reqs[rid] for rid in order]

    def mark(self, rid: int, immediate: bool) -> None:
        if not self.class_based:
            self.tree._storage_prefetch_missed_rids.add(str(rid))
        elif immediate:
            self.tree.storage_prefetch_retries.refetch(str(rid))
        elif not self._expired(rid):
            # Every `poll_miss` of 0.5.23 sits behind a deadline check: an expired request's
            # prefetch is never issued again, and the expired op itself is not marked.
            self.tree.storage_prefetch_retries.poll_miss(str(rid))

    def _expired(self, rid: int) -> bool:
        wait = self.tree._storage_prefetch_wait.get(self.reqs[rid]) if self.deadlines else None
        return wait is not None and wait.expired is True

    def expire(self, rid: int) -> None:
        if self.deadlines:
            operation = SimpleNamespace(handle=self.reqs[rid], deadline_expired=False)
            self.tree_cls._mark_prefetch_deadline_expired(self.tree, operation)

    def poll(self) -> list[int]:
        self.issued = []
        if self.class_based:
            self.mod.Scheduler._process_storage_prefetch_retries(self.sched)
        else:
            self.mod.Scheduler._retry_missed_storage_prefetches(self.sched)
        return self.issued

    def attempts(self) -> dict[int, int]:
        return {
            rid: req.storage_prefetch_retry_attempts
            for rid, req in self.reqs.items()
            if not self._expired(rid)
        }

    def pending(self) -> set[int] | None:
        if not self.class_based:
            return None
        return {int(rid) for rid in self.tree.storage_prefetch_retries._pending}


class _Ours:
    """The model's retries and the attempts the engine counts (one a re-issue, as
    `Server._reissue`)."""

    def __init__(self, release: str, max_attempts: int, interval: int) -> None:
        values = profile(release)
        self.retries = PrefetchRetries(
            max_attempts,
            interval,
            head_exempt=values["prefetch.retry.head_exempt"],
            deadline_cancels=values["prefetch.retry.deadline_cancels"],
        )
        self.waiting: list[int] = []
        self.spent: dict[int, int] = {}
        self.expired: set[int] = set()

    def arrive(self, rid: int) -> None:
        self.waiting.append(rid)
        self.spent[rid] = 0

    def leave(self, rid: int) -> None:
        self.waiting.remove(rid)
        self.retries.cancel(rid)

    def mark(self, rid: int, immediate: bool) -> None:
        if immediate:
            self.retries.refetch(rid)
        else:
            self.retries.mark(rid)

    def expire(self, rid: int) -> None:
        self.retries.expire(rid)
        if self.retries.deadline_cancels:
            self.expired.add(rid)

    def poll(self) -> list[int]:
        ready = self.retries.pop_ready(self.waiting, lambda rid: self.spent[rid])
        for rid in ready:
            self.spent[rid] += 1
        return ready

    def attempts(self) -> dict[int, int]:
        return {rid: n for rid, n in self.spent.items() if rid not in self.expired}

    def pending(self) -> set[int]:
        return set(self.retries._marks)


def _events(rng: random.Random, immediate: bool, deadlines: bool) -> list[tuple[str, Any]]:
    kinds = ["mark", "mark", "poll", "poll", "poll", "poll", "arrive", "admit", "reorder"]
    if immediate:
        kinds.append("refetch")
    if deadlines:
        kinds.append("expire")
    count = rng.randint(1, 40)
    return [(rng.choice(kinds), rng.random()) for _ in range(count)]


@pytest.mark.parametrize("release", WITH_RETRIES)
def test_retries_reissue_the_same_requests_in_the_same_order(release: str) -> None:
    rng = random.Random(f"retries-{release}")
    class_based = release in WITH_CLASS
    for _ in range(CASES):
        max_attempts = rng.randint(0, 4)
        interval = rng.choice([0, 1, 8])
        theirs = _Theirs(release, max_attempts, interval)
        ours = _Ours(release, max_attempts, interval)
        queued: list[int] = []
        fresh = iter(range(8))
        done: list[tuple[str, Any]] = []
        for kind, draw in _events(rng, class_based, theirs.deadlines):
            event: tuple[str, Any] = (kind, None)
            if kind == "arrive" or (not queued and kind not in ("poll", "reorder")):
                rid = next(fresh, None)
                if rid is None:
                    continue
                event = ("arrive", rid)
                queued.append(rid)
                theirs.arrive(rid)
                ours.arrive(rid)
            elif kind in ("mark", "refetch", "expire", "admit"):
                rid = queued[int(draw * len(queued))]
                event = (kind, rid)
                if kind == "admit":
                    queued.remove(rid)
                    theirs.leave(rid)
                    ours.leave(rid)
                elif kind == "expire":
                    theirs.expire(rid)
                    ours.expire(rid)
                else:
                    theirs.mark(rid, kind == "refetch")
                    ours.mark(rid, kind == "refetch")
            elif kind == "reorder":
                random.Random(draw).shuffle(queued)
                event = ("reorder", list(queued))
                theirs.reorder(queued)
                ours.waiting = list(queued)
            done.append(event)
            if kind != "poll":
                continue
            answer_theirs: Any = (theirs.poll(), theirs.attempts())
            answer_ours: Any = (ours.poll(), ours.attempts())
            if class_based:
                answer_theirs += (theirs.pending(),)
                answer_ours += (ours.pending(),)
            case = {"max_attempts": max_attempts, "interval": interval, "events": done}
            agree(release, "retries", theirs.function, case, answer_ours, answer_theirs)


def test_0_5_18_has_no_prefetch_retries() -> None:
    """0.5.18: no retry class, no scheduler retry pass, no retry state on the request."""
    mod = scheduler("0.5.18")
    assert releases.module("0.5.18", "storage_prefetch") is None
    names = [name for name in vars(mod.Scheduler) if "retr" in name and "prefetch" in name]
    agree("0.5.18", "retries", "Scheduler", "retry methods", names, [])
