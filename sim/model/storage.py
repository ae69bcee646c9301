"""L3 storage: one object store per pool, and the three hit-query behaviours.

Each pool is an LRU object store with a capacity in objects (derived from GB and object size),
independent get and put failure draws, and a random-eviction source. `Storage.hit_query` answers
"how many leading pages of this span can be restored" the way each backend family does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sim.model.chain import tail_length

STORAGE_BATCH_PAGES = 128
"""Pages per `exists` / `get` call (SGLang's STORAGE_BATCH_SIZE)."""

HitQuery = Literal["kv_only", "intersect", "min_of_pools"]


@dataclass
class StoragePool:
    """An LRU object store for one pool. `capacity_objects=None` means unbounded."""

    name: str
    object_bytes: int
    capacity_objects: int | None
    get_fail_prob: float
    put_fail_prob: float
    rng: np.random.Generator
    put_outage_s: tuple[float, float] | None = None
    get_hits: int = 0
    get_misses: int = 0
    put_hits: int = 0
    put_inserts: int = 0
    evictions: int = 0
    access_log: list[tuple[float, str, int, bool]] | None = None
    """When a list: every access that touches the LRU, as (time_s, op, key, hit)."""
    _lru: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: object) -> bool:
        return key in self._lru

    @property
    def stored_bytes(self) -> int:
        return len(self._lru) * self.object_bytes

    def leading_run(self, keys: Sequence[int]) -> int:
        """`exists`: how many leading keys are stored (no recency change, as a metadata query)."""
        lru = self._lru
        for i, key in enumerate(keys):
            if key not in lru:
                return i
        return len(keys)

    def get(self, keys: Sequence[int], now_s: float = 0.0) -> int:
        """Read keys in order; returns the leading run that was served (missing or failed stops).

        A read of a stored object refreshes it even when the get then fails; a read of a missing
        object changes nothing (a storage backend does not insert on a missed read).
        """
        lru = self._lru
        fails = self._draws(len(keys), self.get_fail_prob)
        log = self.access_log
        for i, key in enumerate(keys):
            if key not in lru:
                self.get_misses += 1
                return i
            lru.move_to_end(key)
            self.get_hits += 1
            if log is not None:
                log.append((now_s, "get", key, True))
            if fails is not None and fails[i]:
                return i
        return len(keys)

    def put(self, keys: Sequence[int], now_s: float) -> list[bool]:
        """Write keys; each may fail independently (then nothing is stored for it)."""
        window = self.put_outage_s
        if window is not None and window[0] <= now_s < window[1]:
            return [False] * len(keys)
        fails = self._draws(len(keys), self.put_fail_prob)
        if fails is None:
            ok, stored = [True] * len(keys), keys
        else:
            ok = (~fails).tolist()
            stored = [key for key, good in zip(keys, ok, strict=True) if good]
        if self.capacity_objects is None and self.access_log is None:
            # Unbounded: recency never decides an eviction, so a bulk insert is equivalent.
            before = len(self._lru)
            self._lru.update(dict.fromkeys(stored))
            inserted = len(self._lru) - before
            self.put_inserts += inserted
            self.put_hits += len(stored) - inserted
            return ok
        for key in stored:
            hit = self._insert(key)
            if self.access_log is not None:
                self.access_log.append((now_s, "put", key, hit))
        return ok

    def evict_random(self, rng: np.random.Generator) -> int | None:
        """Drop one uniformly chosen object (backend-side eviction, e.g. TTL or rebalancing)."""
        if not self._lru:
            return None
        index = int(rng.integers(len(self._lru)))
        for i, key in enumerate(self._lru):
            if i == index:
                del self._lru[key]
                self.evictions += 1
                return key
        return None

    def _insert(self, key: int) -> bool:
        """Store or refresh a key; True when it was already stored (an LRU hit)."""
        lru = self._lru
        if key in lru:
            lru.move_to_end(key)
            self.put_hits += 1
            return True
        self.put_inserts += 1
        cap = self.capacity_objects
        if cap is not None:
            if cap == 0:
                return False
            while len(lru) >= cap:
                lru.popitem(last=False)
                self.evictions += 1
        lru[key] = None
        return False

    def _draws(self, n: int, prob: float) -> np.ndarray | None:
        if prob <= 0.0 or n == 0:
            return None
        return self.rng.random(n) < prob


@dataclass
class Storage:
    """The L3 tier: the KV pool plus the aux pools the model has."""

    pools: dict[str, StoragePool]
    window_pages: int

    @property
    def aux_pools(self) -> list[str]:
        return [p for p in self.pools if p != "kv"]

    def tail_len(self, pool: str, end: int) -> int:
        return tail_length(self.window_pages if pool == "swa" else 1, end)

    def tail_present(self, pool: str, span: Sequence[int], end: int) -> bool:
        """Does `pool` hold the tail keys needed to resume at `end` (span-relative)?"""
        store = self.pools[pool]
        n = self.tail_len(pool, end)
        return all(key in store for key in span[end - n : end])

    def legal_endpoint_at_or_below(self, span: Sequence[int], end: int) -> int:
        """Greatest E <= end at which every aux pool has its tail keys (0 if none)."""
        for e in range(end, 0, -1):
            if all(self.tail_present(p, span, e) for p in self.aux_pools):
                return e
        return 0

    def hit_query(self, kind: HitQuery, span: Sequence[int]) -> int:
        """Pages of `span` the backend reports as restorable, by backend behaviour."""
        kv_hit = self.pools["kv"].leading_run(span)
        if kind == "kv_only" or not self.aux_pools:
            return kv_hit
        if kind == "intersect":
            return self.legal_endpoint_at_or_below(span, kv_hit)
        own_best = [
            next(
                (e for e in range(len(span), 0, -1) if self.tail_present(p, span, e)),
                0,
            )
            for p in self.aux_pools
        ]
        return min([kv_hit, *own_best])

    @staticmethod
    def batches(pages: int) -> int:
        """Round trips for `pages` pages at STORAGE_BATCH_PAGES per call."""
        return -(-pages // STORAGE_BATCH_PAGES)
