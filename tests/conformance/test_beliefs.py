"""Existence beliefs: the model's `ExistenceCache` and `InflightPages` against each release's
`StorageExistenceCache` (0.5.19-0.5.21: one LRU of (pool, hash) keys) or `PoolExistenceBeliefs`
(0.5.22 on: one LRU and an in-flight refcount per pool), on seeded random operation sequences at
small sizes, where eviction order matters: every answer, the membership and the LRU order after
every step."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from sim.model.backup import InflightPages
from sim.model.existence import ExistenceCache
from tests.conformance import releases
from tests.conformance.tally import agree

CASES = 400
"""Sequences a release; each is up to 12 operations on keys 0-9 with 2 to 6 entries."""
WITH_BELIEFS = releases.shipping("buffer_mode", since="0.5.19")


class _Theirs:
    """One release's beliefs of the KV pool behind one interface: `add`, `covered`, `contains`,
    `invalidate_beyond`, in-flight tracking, and the LRU order of the KV pool's keys."""

    def __init__(self, release: str, entries: int) -> None:
        mod = releases.module(release, "buffer_mode.storage_existence_cache")
        assert mod is not None
        self.per_pool = hasattr(mod, "PoolExistenceBeliefs")
        if self.per_pool:
            self.beliefs: Any = mod.StorageExistenceCache(entries).pool("kv")
            self.function = "PoolExistenceBeliefs"
        else:
            self.cache: Any = mod.StorageExistenceCache(entries)
            self.function = "StorageExistenceCache"
        self.inflight: Counter[str] = Counter()
        """The caller's in-flight pages for releases whose cache takes them as `extra_cover`."""

    def add(self, keys: list[int]) -> None:
        hashes = [str(k) for k in keys]
        if self.per_pool:
            self.beliefs.add(hashes)
        else:
            self.cache.add("kv", hashes)

    def covered(self, keys: list[int]) -> bool:
        hashes = [str(k) for k in keys]
        if self.per_pool:
            return bool(self.beliefs.covered(hashes))
        return bool(self.cache.covers_all("kv", hashes, extra_cover=+self.inflight))

    def contains(self, key: int) -> bool:
        if self.per_pool:
            return bool(self.beliefs.contains(str(key)))
        return bool(self.cache.contains("kv", str(key)))

    def invalidate_beyond(self, keys: list[int], keep: int) -> None:
        hashes = [str(k) for k in keys]
        if self.per_pool:
            self.beliefs.invalidate_beyond(hashes, keep)
        else:
            self.cache.invalidate_beyond("kv", hashes, keep_pages=keep)

    def track(self, keys: list[int]) -> None:
        hashes = [str(k) for k in keys]
        self.inflight.update(hashes)
        if self.per_pool:
            self.beliefs.track_inflight(hashes)

    def untrack(self, keys: list[int]) -> None:
        hashes = [str(k) for k in keys]
        self.inflight.subtract(hashes)
        if self.per_pool:
            self.beliefs.untrack_inflight(hashes)

    def order(self) -> list[int]:
        if self.per_pool:
            return [int(h) for h in self.beliefs._entries]
        return [int(h) for pool, h in self.cache._entries if pool == "kv"]


def _operations(rng: random.Random) -> list[tuple[str, Any]]:
    def keys() -> list[int]:
        return rng.sample(range(10), rng.randint(1, 5))

    ops: list[tuple[str, Any]] = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.choice(["add", "add", "covered", "covered", "contains", "heal", "track"])
        if kind == "heal":
            span = keys()
            ops.append((kind, (span, rng.randint(0, len(span)))))
        elif kind == "contains":
            ops.append((kind, rng.randrange(10)))
        else:
            ops.append((kind, keys()))
    return ops


@pytest.mark.parametrize("release", WITH_BELIEFS)
def test_beliefs_answers_membership_and_lru_order(release: str) -> None:
    rng = random.Random(f"beliefs-{release}")
    for _ in range(CASES):
        entries = rng.randint(2, 6)
        ops = _operations(rng)
        theirs = _Theirs(release, entries)
        ours = ExistenceCache(entries)
        inflight = InflightPages()
        tracked: list[list[int]] = []
        done: list[tuple[str, Any]] = []
        for kind, arg in ops:
            done.append((kind, arg))
            answer_ours: Any = None
            answer_theirs: Any = None
            if kind == "add":
                ours.add(arg)
                theirs.add(arg)
            elif kind == "covered":
                answer_ours = ours.covers_all(arg, extra_cover=inflight)
                answer_theirs = theirs.covered(arg)
            elif kind == "contains":
                answer_ours = ours.contains(arg)
                answer_theirs = theirs.contains(arg)
            elif kind == "heal":
                span, keep = arg
                ours.invalidate_beyond(span, keep)
                theirs.invalidate_beyond(span, keep)
            elif tracked and rng.random() < 0.5:
                done[-1] = ("untrack", tracked[-1])
                inflight.remove(tracked[-1])
                theirs.untrack(tracked.pop())
            else:
                inflight.add(arg)
                theirs.track(arg)
                tracked.append(arg)
            case = {"entries": entries, "operations": done}
            agree(
                release,
                "beliefs",
                theirs.function,
                case,
                (answer_ours, list(ours._lru)),
                (answer_theirs, theirs.order()),
            )
