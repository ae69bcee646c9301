"""The storage existence cache: a bounded LRU of keys believed to be in storage.

It is the only memory a `buffer_only` server has of what storage holds, so it gates every write:
`covers_all` true means the write is skipped. Beliefs are added at every write acknowledgement
(failed writes included, as SGLang does to stay deterministic across TP ranks) and for what an
accepted prefetch fetched. In the PR's design there is one cache, of KV page keys, and aux pools
have no beliefs of their own, which is why a missing aux object can hide behind a KV belief;
with per-pool beliefs every pool has a cache like this one.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Container, Iterable, KeysView, Sequence


class ExistenceCache:
    """Bounded LRU of believed-stored KV page keys (SGLang: StorageExistenceCache)."""

    def __init__(self, entries: int, enabled: bool = True) -> None:
        self.entries = entries
        self.enabled = enabled
        self.evictions = 0
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: object) -> bool:
        return key in self._lru

    def add(self, keys: Iterable[int]) -> None:
        """Believe `keys`, most recently used last (a repeated key takes its last position)."""
        if not self.enabled:
            return
        lru = self._lru
        refresh = lru.move_to_end
        for key in keys:
            if key in lru:
                refresh(key)
            else:
                lru[key] = None
        excess = len(lru) - self.entries
        if excess > 0:
            deque(map(lru.popitem, itertools.repeat(False, excess)), 0)
            self.evictions += excess

    def contains(self, key: int) -> bool:
        """Membership that refreshes recency, as a real lookup does."""
        if key in self._lru:
            self._lru.move_to_end(key)
            return True
        return False

    def covers_all(self, keys: Sequence[int], extra_cover: Container[int] = ()) -> bool:
        """The FULL check: is every key believed stored or already being written?

        The check walks the keys in order and refreshes the recency of each believed key it
        passes, stopping at the first key neither believed nor in flight: a "no" still refreshes
        the believed keys before that one, which decides what a full cache evicts next. A node
        never written has its first page uncovered: that answer needs no pass."""
        if not self.enabled:
            return False
        lru = self._lru
        if keys and keys[0] not in lru and keys[0] not in extra_cover:
            return False
        missing = [key for key in keys if key not in lru]
        if not missing:
            deque(map(lru.move_to_end, keys), 0)
            return True
        for key in missing:
            if key not in extra_cover:
                stop = keys.index(key)
                deque(map(lru.move_to_end, [k for k in keys[:stop] if k in lru]), 0)
                return False
        deque(map(lru.move_to_end, [key for key in keys if key in lru]), 0)
        return True

    def count_absent_recent(self, stored: KeysView[int], recent: int = 4096) -> int:
        """How many of the `recent` most recently used beliefs name keys `stored` lacks.

        Cheap enough for every time-series sample: it never walks the whole cache, and the
        membership test is one set intersection.
        """
        keys = list(itertools.islice(reversed(self._lru), recent))
        return len(keys) - len(stored & keys)

    def invalidate_beyond(self, span: Sequence[int], keep_pages: int) -> list[int]:
        """Drop the beliefs of span[keep_pages:]; returns the keys that were actually believed."""
        lru = self._lru
        tail = span[max(0, keep_pages) :]
        if lru.keys().isdisjoint(tail):
            return []
        dropped = [key for key in tail if key in lru]
        for key in dropped:
            lru.pop(key, None)
        return dropped

    def invalidate(self, keys: Iterable[int]) -> list[int]:
        """Drop the beliefs of exactly these keys (the `exact` oracle rule)."""
        dropped: list[int] = []
        for key in keys:
            if key in self._lru:
                del self._lru[key]
                dropped.append(key)
        return dropped
