"""L3 storage: one object store per pool, its cost model, and the hit-query behaviours.

Each pool is an LRU object store with a capacity in objects (derived from GB and object size),
independent get and put failure draws, and a random-eviction source. A hit query answers "how
many leading pages of this span can be restored" the way a backend family does; the queries are
registered in `HIT_QUERIES`, which is also the list the scenario key `storage.hit_query` accepts.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, KeysView, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.model.pools import KV, Pool
from sim.registry import Registry

STORAGE_BATCH_PAGES = 128
"""Pages per `exists` / `get` call (SGLang's STORAGE_BATCH_SIZE)."""

GB = 1e9
"""Bandwidths and capacities are in gigabytes (1e9 bytes), as storage vendors quote them."""

STORAGE_COUNTERS = ("get_hits", "get_misses", "put_hits", "put_inserts", "evictions")
"""Per-pool counters every run reports as `storage_<pool>_<counter>`."""


@dataclass
class StoragePool:
    """An object store for one pool: LRU when bounded; `capacity_objects=None` means unbounded.

    An unbounded pool never evicts by recency, so it keeps none: its objects sit in insertion
    order, which is all a random eviction needs, and a write or read costs one dict operation.
    """

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

    def __post_init__(self) -> None:
        self._lru: OrderedDict[int, None] | None = (
            None if self.capacity_objects is None else OrderedDict()
        )
        self._objects: dict[int, None] = {} if self._lru is None else self._lru

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def keys(self) -> KeysView[int]:
        """The stored keys, as a live set view."""
        return self._objects.keys()

    @property
    def stored_bytes(self) -> int:
        return len(self._objects) * self.object_bytes

    def leading_run(self, keys: Sequence[int]) -> int:
        """`exists`: how many leading keys are stored (no recency change, as a metadata query)."""
        objects = self._objects
        for i, key in enumerate(keys):
            if key not in objects:
                return i
        return len(keys)

    def get(self, keys: Sequence[int], now_s: float = 0.0) -> int:
        """Read keys in order; returns the leading run that was served (missing or failed stops).

        A read of a stored object refreshes it even when the get then fails; a read of a missing
        object changes nothing (a storage backend does not insert on a missed read).
        """
        objects, lru = self._objects, self._lru
        fails = self._draws(len(keys), self.get_fail_prob)
        log = self.access_log
        for i, key in enumerate(keys):
            if key not in objects:
                self.get_misses += 1
                return i
            if lru is not None:
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
        log = self.access_log
        if self._lru is None and log is None:
            objects = self._objects
            before = len(objects)
            for key in stored:
                if key not in objects:
                    objects[key] = None
            inserted = len(objects) - before
            self.put_inserts += inserted
            self.put_hits += len(stored) - inserted
            return ok
        for key in stored:
            hit = self._insert(key)
            if log is not None:
                log.append((now_s, "put", key, hit))
        return ok

    def evict_random(self, rng: np.random.Generator) -> int | None:
        """Drop one uniformly chosen object (backend-side eviction, e.g. TTL or rebalancing).

        It takes exactly one draw whatever the pool holds, so the times of later evictions,
        drawn from the same stream, never depend on the pool's contents.
        """
        u = float(rng.random())
        objects = self._objects
        if not objects:
            return None
        index = int(u * len(objects))
        key = next(itertools.islice(objects, index, None))
        del objects[key]
        self.evictions += 1
        return key

    def _insert(self, key: int) -> bool:
        """Store or refresh a key; True when it was already stored (an LRU hit)."""
        objects, lru = self._objects, self._lru
        if key in objects:
            if lru is not None:
                lru.move_to_end(key)
            self.put_hits += 1
            return True
        self.put_inserts += 1
        cap = self.capacity_objects
        if lru is not None and cap is not None:
            if cap == 0:
                return False
            while len(lru) >= cap:
                lru.popitem(last=False)
                self.evictions += 1
        objects[key] = None
        return False

    def _draws(self, n: int, prob: float) -> np.ndarray | None:
        if prob <= 0.0 or n == 0:
            return None
        return self.rng.random(n) < prob


@dataclass
class Storage:
    """The L3 tier: one store per pool of the model (KV first), and what its calls cost."""

    pools: dict[str, StoragePool]
    layout: Mapping[str, Pool]
    """The model's pools by name: how many tail keys each needs at an endpoint."""
    read_bps: float
    write_bps: float
    exists_latency_ms: float
    aux: tuple[Pool, ...] = field(init=False)

    def __post_init__(self) -> None:
        if list(self.pools) != list(self.layout) or KV not in self.pools:
            raise ValueError(f"stores {list(self.pools)} do not match pools {list(self.layout)}")
        self.aux = tuple(pool for name, pool in self.layout.items() if name != KV)

    @property
    def kv(self) -> StoragePool:
        return self.pools[KV]

    def tail_present(self, pool: Pool, span: Sequence[int], end: int) -> bool:
        """Does `pool` hold the tail keys needed to resume at `end` (span-relative)?"""
        store = self.pools[pool.name]
        return all(key in store for key in pool.tail_keys(span, end))

    def legal_endpoint_at_or_below(self, span: Sequence[int], end: int) -> int:
        """Greatest E <= end at which every aux pool has its tail keys (0 if none)."""
        for e in range(end, 0, -1):
            if all(self.tail_present(p, span, e) for p in self.aux):
                return e
        return 0

    def pool_boundary(self, pool: Pool, span: Sequence[int], end: int) -> int:
        """Greatest E <= end at which this one pool has its tail keys (0 if none)."""
        for e in range(end, 0, -1):
            if self.tail_present(pool, span, e):
                return e
        return 0

    def hit_query(self, kind: str, span: Sequence[int]) -> int:
        """Pages of `span` the backend reports as restorable, by backend behaviour."""
        return HIT_QUERIES[kind](self, span)

    # ------------------------------------------------------------------ cost model

    def exists_s(self, pages: int) -> float:
        """`exists` round trips for `pages` pages: one per STORAGE_BATCH_PAGES."""
        return self.batches(pages) * self.exists_latency_ms / 1000.0

    def read_s(self, nbytes: float) -> float:
        return nbytes / self.read_bps

    def write_s(self, nbytes: float) -> float:
        return nbytes / self.write_bps

    @staticmethod
    def batches(pages: int) -> int:
        """Round trips for `pages` pages at STORAGE_BATCH_PAGES per call."""
        return -(-pages // STORAGE_BATCH_PAGES)

    def counters(self) -> dict[str, int]:
        """`storage_<pool>_<counter>` for every pool, for the run summary."""
        return {
            f"storage_{name}_{counter}": getattr(pool, counter)
            for name, pool in self.pools.items()
            for counter in STORAGE_COUNTERS
        }


HitQuery = Callable[[Storage, Sequence[int]], int]

HIT_QUERIES: Registry[HitQuery] = Registry("hit query")


@HIT_QUERIES.register("kv_only")
def kv_only(storage: Storage, span: Sequence[int]) -> int:
    """Counts KV pages only: a backend whose `exists` is blind to aux objects (a what-if)."""
    return storage.kv.leading_run(span)


@HIT_QUERIES.register("intersect")
def intersect(storage: Storage, span: Sequence[int]) -> int:
    """The largest endpoint at or below the KV hit that is legal for every aux pool at once."""
    return storage.legal_endpoint_at_or_below(span, storage.kv.leading_run(span))


@HIT_QUERIES.register("min_of_pools")
def min_of_pools(storage: Storage, span: Sequence[int]) -> int:
    """What SGLang's hybrid backends answer (`batch_exists_v2` of the file, hf3fs and nixl
    backends): per aux pool the largest legal endpoint at or below the KV hit, then the minimum.

    With one aux pool this is `intersect`. With two tail-keyed pools it can report an endpoint
    that is legal for neither (SWA legal only at 3, Mamba only at 2 -> 2, where SWA has no
    window): SGLang issue #39147, and a persistent cause of discards.
    """
    kv_hit = storage.kv.leading_run(span)
    return min([kv_hit, *(storage.pool_boundary(p, span, kv_hit) for p in storage.aux)])
