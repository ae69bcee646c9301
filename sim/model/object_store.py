"""One pool's object store in the L3 tier: what it holds, how it evicts, and what its reads and
writes do, failure draws included (drawn by `sim.model.faults`).

Each pool is an LRU object store with a capacity in objects (derived from GB and object size),
independent read, write and tear draws, and a random-eviction source.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, KeysView, Sequence
from dataclasses import dataclass

import numpy as np

from sim.model.faults import FAILED_READS, FaultStreams, draws, shards_stored

EVICTION_ORDERS = ("lru", "fifo", "lease")
"""Which object a full pool evicts: `lru` refreshes an object on a read and on a skipped rewrite
(the file backend's evictor), `fifo` never refreshes, `lease` also refreshes on an `exists`
(Mooncake: `ExistKey` extends the lease, and the master evicts the earliest lease deadline)."""


@dataclass
class StoragePool:
    """An object store for one pool, evicting in `eviction` order when bounded;
    `capacity_objects=None` means unbounded.

    An unbounded pool never evicts by recency, so it keeps none: its objects sit in insertion
    order, which is all a random eviction needs, and a write or read costs one dict operation.
    A bounded pool evicts once it would hold more than `high_watermark` of its capacity, then
    `evict_ratio` of its objects at once (Mooncake's master: 0.9 and 0.05), or one at a time.
    """

    name: str
    object_bytes: int
    capacity_objects: int | None
    get_fail_prob: float
    put_fail_prob: float
    faults: FaultStreams
    """Its read-failure, write-failure and tear draws, each from its own stream."""
    put_outage_s: tuple[float, float] | None = None
    get_hits: int = 0
    get_misses: int = 0
    put_hits: int = 0
    put_inserts: int = 0
    evictions: int = 0
    access_log: list[tuple[float, str, int, bool, int]] | None = None
    """When a list: every access that touches the LRU, as (time_s, op, key, hit, server)."""
    exists_ttl_s: float = 0.0
    """How long an object removed by a backend-side eviction still answers `exists`."""
    cross_get_hits: int = 0
    """Objects read by a server other than the one that stored them (clusters)."""
    cross_put_hits: int = 0
    """Puts of an object another server had already stored (skipped by the backend)."""
    displaced_by: dict[int, int] | None = None
    """When a dict: object -> the server whose write pushed it out of the LRU (clusters)."""
    eviction: str = "lru"
    high_watermark: float = 1.0
    evict_ratio: float = 0.0
    write_dedup: bool = True
    """A put of a key `exists` reports is skipped (the file, hf3fs and Mooncake backends);
    without it the key is written again and may fail like any put (nixl)."""
    torn_put_prob: float = 0.0
    """Share of the shards a put stores that are torn: `exists` reports them and every read of
    them fails (a write cut short at the key's own path, or lost before it reached the disk)."""
    failed_read: str = "keep"
    """One of FAILED_READS."""
    failed_put_torn: bool = False
    """A put that fails leaves a torn object at its key (a write straight to the key's path
    that stops part way) instead of nothing."""
    torn_puts: int = 0
    torn_reads: int = 0
    last_read_failed: bool = False
    """Whether the latest `get` stopped at a failed read (not at a missing object)."""
    ranks: int = 1
    """Tensor-parallel ranks that each store their own shard of every page, under their own
    key (SGLang's file and nixl backends suffix keys with the rank, Mooncake with
    `_{tp_rank}_k`, HF3FS keeps a file per rank). A key is stored when every rank's shard is:
    the hit query, the reads and the completions are MIN-reduced across ranks, so one rank's
    missing shard hides the page from all. `object_bytes` is one shard."""

    def __post_init__(self) -> None:
        if self.eviction not in EVICTION_ORDERS:
            raise ValueError(f"eviction {self.eviction!r} is not one of {EVICTION_ORDERS}")
        if self.failed_read not in FAILED_READS:
            raise ValueError(f"failed_read {self.failed_read!r} is not one of {FAILED_READS}")
        self._refresh = self.eviction != "fifo"
        self._lease = self.eviction == "lease"
        self._stale: dict[int, float] = {}
        """Keys removed by backend-side evictions -> until when `exists` still says yes."""
        self._prune_at = 1024
        self._lru: OrderedDict[int, int] | None = (
            None if self.capacity_objects is None else OrderedDict()
        )
        self._objects: dict[int, int] = {} if self._lru is None else self._lru
        """Stored object -> the server (instance) that stored it."""
        self._shards: dict[int, int] = {}
        """Keys some ranks stored and others failed to -> the bit mask of the ranks that hold
        a shard (tensor parallelism). Such shards take no room in the LRU and are never
        evicted: the simplification costs at most the failed puts' shards."""
        self._torn: set[int] = set()
        """Stored keys with a torn shard: `exists` reports them, reads of them fail."""

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def keys(self) -> KeysView[int]:
        """The stored keys, as a live set view."""
        return self._objects.keys()

    @property
    def stored_bytes(self) -> int:
        shards = len(self._objects) * self.ranks
        shards += sum(mask.bit_count() for mask in self._shards.values())
        return shards * self.object_bytes

    @property
    def page_bytes(self) -> int:
        """Bytes of one page over all ranks: what a read or a write of it moves."""
        return self.object_bytes * self.ranks

    def exists(self, key: int, now_s: float) -> bool:
        """What the backend's `exists` answers: stored, or removed by a backend-side eviction
        less than `exists_ttl_s` ago and not read since (a stale metadata-cache positive)."""
        if key in self._objects:
            return True
        stale = self._stale
        return bool(stale) and stale.get(key, -math.inf) > now_s

    def leading_run(self, keys: Sequence[int], now_s: float = 0.0) -> int:
        """`exists` over a chain: how many leading keys the backend reports (no recency change,
        as a metadata query). The stored run is one C-level scan; stale positives, if any,
        extend it key by key."""
        objects = self._objects
        run = len(list(itertools.takewhile(objects.__contains__, keys)))
        if run == len(keys) or not self._stale:
            return run
        for i in range(run, len(keys)):
            if not self.exists(keys[i], now_s):
                return i
        return len(keys)

    def tail_boundary(
        self, span: Sequence[int], end: int, tail_pages: int | None, now_s: float = 0.0
    ) -> int:
        """Greatest E <= end at which `exists` reports span[E - n, E), n = min(tail_pages, E)
        (every page before E when tail_pages is None); 0 if none.

        Scans down from `end` asking each page once: a missing page at j rules out every
        endpoint whose tail holds it, so the next candidate is j itself."""
        present: Callable[[int], bool]
        if self._stale:
            present = functools.partial(self.exists, now_s=now_s)
        else:
            present = self._objects.__contains__
        e = end
        while e > 0:
            lo = e - tail_pages if tail_pages is not None and e > tail_pages else 0
            j = e - 1
            while j >= lo and present(span[j]):
                j -= 1
            if j < lo:
                return e
            e = j
        return 0

    def to_write(self, keys: Sequence[int], now_s: float) -> tuple[int, int]:
        """How many of these keys a put would really write (the others the backend skips), and
        how many shards that is over the ranks (each rank skips the shard it already holds).
        The check is an `exists` call: under lease eviction it refreshes what it finds."""
        if not self.write_dedup:
            return len(keys), len(keys) * self.ranks
        objects = self._objects
        if self._lease:
            self.touch(keys)
        absent = [key for key in keys if key not in objects]
        if self._stale:
            absent = [key for key in absent if not self.exists(key, now_s)]
        shards = len(absent) * self.ranks
        if self._shards:
            shards -= sum(self._shards.get(key, 0).bit_count() for key in absent)
        return len(absent), shards

    def touch(self, keys: Iterable[int]) -> None:
        """Refresh the stored keys among these (an `exists` call under lease eviction)."""
        lru = self._lru
        if lru is None:
            return
        for key in keys:
            if key in lru:
                lru.move_to_end(key)

    def get(self, keys: Sequence[int], now_s: float = 0.0, client: int = 0) -> int:
        """Read keys in order; returns the leading run that was served (missing or failed stops).

        A read of a stored object refreshes it even when the get then fails; a read of a missing
        object changes nothing (a storage backend does not insert on a missed read) but clears
        the stale positives of the batch's missing keys (a batch read tries every key, and a
        failed one drops the backend's metadata entry). A failure draw or a torn object fails
        the read of a stored object; what that does to it is `failed_read`'s.
        """
        objects, lru, torn = self._objects, self._lru, self._torn
        fails = draws(self.faults.get, len(keys), self.get_fail_prob, self.ranks)
        if fails is not None and self.ranks > 1:
            fails = np.asarray(fails.any(axis=1))
        log = self.access_log
        self.last_read_failed = False
        if fails is None and not torn and log is None and not self._stale:
            return self._get_run(keys, client)
        for i, key in enumerate(keys):
            if key not in objects:
                self.get_misses += 1
                if self._stale:
                    for missing in keys[i:]:
                        if missing not in objects:
                            self._stale.pop(missing, None)
                return i
            if lru is not None and self._refresh:
                lru.move_to_end(key)
            self.get_hits += 1
            if objects[key] != client:
                self.cross_get_hits += 1
            if log is not None:
                log.append((now_s, "get", key, True, client))
            is_torn = bool(torn) and key in torn
            if is_torn or (fails is not None and fails[i]):
                self._read_failed(key, keys[i + 1 :], is_torn)
                return i
        return len(keys)

    def credited(self, served: int) -> int:
        """Pages the reader counts of a `get` that served `served`: none when the read failed
        and the backend raised to a reader that catches it (`miss_batch`), else all."""
        return 0 if self.last_read_failed and self.failed_read == "miss_batch" else served

    def _get_run(self, keys: Sequence[int], client: int) -> int:
        """`get` when no read can fail and nothing is logged: the leading run of stored keys is
        served (refreshed in order), counted as a whole."""
        objects, lru = self._objects, self._lru
        run = len(list(itertools.takewhile(objects.__contains__, keys)))
        if run < len(keys):
            self.get_misses += 1
        served = keys[:run] if run < len(keys) else keys
        if lru is not None and self._refresh:
            deque(map(lru.move_to_end, served), 0)
        owners = list(map(objects.__getitem__, served))
        self.get_hits += run
        self.cross_get_hits += run - owners.count(client)
        return run

    def _read_failed(self, key: int, rest: Sequence[int], torn: bool) -> None:
        """The read of a stored object failed: the batch's later missing keys lose their stale
        positives, and the object stays or goes as `failed_read` says."""
        objects = self._objects
        if self._stale:
            for missing in rest:
                if missing not in objects:
                    self._stale.pop(missing, None)
        self.last_read_failed = True
        self.torn_reads += torn
        if self.failed_read == "delete":
            self._torn.discard(key)
            del objects[key]
            self.evictions += 1

    def _tear(self, key: int, torn: np.ndarray | None, i: int) -> None:
        """Mark a key just stored torn when any rank's shard of it tore."""
        if torn is not None and np.atleast_1d(torn[i]).any():
            self._torn.add(key)
            self.torn_puts += 1
        elif self._torn:
            self._torn.discard(key)

    def put(self, keys: Sequence[int], now_s: float, client: int = 0) -> list[bool]:
        """Write keys; returns whether each put succeeded.

        A key the backend reports as existing is skipped and succeeds (SGLang's backends check
        before they write: HiCacheFile.set logs "already exists. Skipped.", Mooncake asks
        `batch_is_exist`); a stored one is refreshed, a stale positive stays missing. Every other
        key may fail independently, and then nothing is stored for it. One failure draw is taken
        per key (and rank) offered, used or not, so which keys exist never moves later draws.
        With several ranks each writes its own shard and the key is stored once all are; a put
        that leaves some missing fails, and the next one writes only those.
        """
        n = len(keys)
        window = self.put_outage_s
        outage = window is not None and window[0] <= now_s < window[1]
        faults, ranks = self.faults, self.ranks
        fails = None if outage else draws(faults.put, n, self.put_fail_prob, ranks)
        torn = None if outage else draws(faults.torn, n, self.torn_put_prob, ranks)
        objects, stale, log = self._objects, self._stale, self.access_log
        if not self.write_dedup:
            return self._overwrite(keys, now_s, client, outage, fails, torn)
        fast = self._lru is None and log is None and not self._shards and not self._torn
        if fast and not stale and not outage and fails is None and torn is None:
            before, cross = len(objects), 0
            for key in keys:
                owner = objects.setdefault(key, client)
                if owner != client:
                    cross += 1
            inserted = len(objects) - before
            self.put_inserts += inserted
            self.put_hits += n - inserted
            self.cross_put_hits += cross
            return [True] * n
        if (
            fast
            and not (stale or outage or self.failed_put_torn)
            and torn is None
            and self.ranks == 1
        ):
            return self._put_drawn(keys, client, fails)
        ok = [True] * n
        for i, key in enumerate(keys):
            if key in objects:
                if objects[key] != client:
                    self.cross_put_hits += 1
                if fast:
                    self.put_hits += 1
                else:
                    self._insert(key, client)
                    if log is not None:
                        log.append((now_s, "put", key, True, client))
                continue
            if stale and stale.get(key, -math.inf) > now_s:
                continue
            if outage or not shards_stored(self._shards, key, fails, i, self.ranks):
                ok[i] = False
                if not outage and self.failed_put_torn:
                    self._store_torn(key, client)
                continue
            if fast:
                objects[key] = client
                self.put_inserts += 1
            else:
                self._insert(key, client)
                if log is not None:
                    log.append((now_s, "put", key, False, client))
            if key in objects:
                self._tear(key, torn, i)
        return ok

    def _put_drawn(self, keys: Sequence[int], client: int, fails: np.ndarray | None) -> list[bool]:
        """`put` into an unbounded single-rank pool with nothing logged, torn or stale, where
        only the failure draws decide (a failed put leaves nothing): a stored key is a hit
        whatever its draw, an absent one is stored unless its draw failed. One pass, the draws
        read as a list."""
        objects = self._objects
        failed = [False] * len(keys) if fails is None else fails.tolist()
        ok = [True] * len(keys)
        hits = inserts = cross = 0
        for i, key in enumerate(keys):
            owner = objects.get(key)
            if owner is not None:
                hits += 1
                if owner != client:
                    cross += 1
            elif failed[i]:
                ok[i] = False
            else:
                objects[key] = client
                inserts += 1
        self.put_hits += hits
        self.put_inserts += inserts
        self.cross_put_hits += cross
        return ok

    def _store_torn(self, key: int, client: int) -> None:
        """A failed write that leaves what it wrote at the key's path: an object `exists`
        reports and no read can use."""
        self._shards.pop(key, None)
        self._insert(key, client)
        if key in self._objects:
            self._torn.add(key)
            self.torn_puts += 1

    def _overwrite(
        self,
        keys: Sequence[int],
        now_s: float,
        client: int,
        outage: bool,
        fails: np.ndarray | None,
        torn: np.ndarray | None,
    ) -> list[bool]:
        """Puts of a backend that writes every key: each may fail; a failed rewrite leaves the
        stored object in place (the write goes to a temporary file first), unless failed writes
        leave torn objects; a rewrite that succeeds replaces a torn object."""
        ok = [True] * len(keys)
        log = self.access_log
        for i, key in enumerate(keys):
            if outage:
                ok[i] = False
                continue
            if key in self._objects:
                if fails is not None:
                    failed = np.atleast_1d(fails[i])
                    ok[i] = not failed.any()
                    if not ok[i] and self.failed_put_torn:
                        self._store_torn(key, client)
                        continue
                    if failed.all():
                        continue
            elif not shards_stored(self._shards, key, fails, i, self.ranks):
                ok[i] = False
                if self.failed_put_torn:
                    self._store_torn(key, client)
                continue
            self._stale.pop(key, None)
            if key in self._objects and self._objects[key] != client:
                self.cross_put_hits += 1
            hit = self._insert(key, client)
            if log is not None:
                log.append((now_s, "put", key, hit, client))
            if key in self._objects:
                self._tear(key, torn, i)
        return ok

    def evict_random(self, rng: np.random.Generator, now_s: float = 0.0) -> int | None:
        """Drop one uniformly chosen object (backend-side eviction, e.g. TTL or rebalancing).

        It takes exactly one draw whatever the pool holds, so the times of later evictions,
        drawn from the same stream, never depend on the pool's contents. With `exists_ttl_s`
        the object still answers `exists` for that long (the file backend's metadata cache does
        not see removals by others).
        """
        u = float(rng.random())
        objects = self._objects
        if not objects:
            return None
        index = int(u * len(objects))
        key = next(itertools.islice(objects, index, None))
        del objects[key]
        self._torn.discard(key)
        self.evictions += 1
        if self.exists_ttl_s > 0:
            self._remember_removed(key, now_s)
        return key

    def _remember_removed(self, key: int, now_s: float) -> None:
        stale = self._stale
        stale[key] = now_s + self.exists_ttl_s
        if len(stale) >= self._prune_at:
            for old in [k for k, until in stale.items() if until <= now_s]:
                del stale[old]
            self._prune_at = 2 * len(stale) + 1024

    def _insert(self, key: int, client: int) -> bool:
        """Store or refresh a key; True when it was already stored (an LRU hit)."""
        objects, lru = self._objects, self._lru
        if key in objects:
            if lru is not None and self._refresh:
                lru.move_to_end(key)
            self.put_hits += 1
            return True
        self.put_inserts += 1
        cap = self.capacity_objects
        if lru is not None and cap is not None:
            if cap == 0:
                return False
            self._make_room(lru, cap, client)
        objects[key] = client
        if self.displaced_by:
            self.displaced_by.pop(key, None)
        return False

    def _make_room(self, lru: OrderedDict[int, int], cap: int, client: int) -> None:
        """Evict, oldest first, until one more object stays within the high watermark (or,
        with an eviction ratio, that share of the objects at once)."""
        limit = cap if self.high_watermark >= 1.0 else max(1, int(self.high_watermark * cap))
        if len(lru) < limit:
            return
        excess = len(lru) - limit + 1
        count = max(excess, math.ceil(self.evict_ratio * len(lru))) if self.evict_ratio else excess
        displaced = self.displaced_by
        for _ in range(min(count, len(lru))):
            old, _ = lru.popitem(last=False)
            self._torn.discard(old)
            self.evictions += 1
            if displaced is not None:
                displaced[old] = client
