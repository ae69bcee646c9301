"""L3 storage: the tier of one object store per pool (`sim.model.object_store`), its cost model,
and the hit-query behaviours.

A hit query answers "how many leading pages of this span can be restored" the way a backend
family does; the queries are registered in `HIT_QUERIES`, which is also the list the scenario
key `storage.hit_query` accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sim.core.registry import Registry
from sim.model.object_store import StoragePool
from sim.model.pools import KV, Pool

STORAGE_BATCH_PAGES = 128
"""Pages per `exists` / `get` call (SGLang's STORAGE_BATCH_SIZE)."""

STORAGE_COUNTERS = (
    "get_hits",
    "get_misses",
    "put_hits",
    "put_inserts",
    "evictions",
    "stored_bytes",
    "torn_puts",
    "torn_reads",
)
"""Per-pool counters every run reports as `storage_<pool>_<counter>` (`stored_bytes`: what the
pool holds at the horizon; `torn_puts`: puts that left an unreadable object, `torn_reads`: reads
that met one)."""


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
    """Every pool but KV: each folds into the hit query and is written by a backup."""
    sidecars: tuple[Pool, ...] = field(init=False)
    """The aux pools riding on KV pages (read with KV, clamping it)."""
    tail_keyed: tuple[Pool, ...] = field(init=False)
    """The aux pools with slots of their own (SWA, Mamba): their transfers are all-or-nothing."""
    leased: tuple[StoragePool, ...] = field(init=False)
    """Pools evicting by lease, which `exists` calls refresh."""

    def __post_init__(self) -> None:
        if list(self.pools) != list(self.layout) or KV not in self.pools:
            raise ValueError(f"stores {list(self.pools)} do not match pools {list(self.layout)}")
        self.aux = tuple(pool for name, pool in self.layout.items() if name != KV)
        self.sidecars = tuple(pool for pool in self.aux if pool.rides_on_kv)
        self.tail_keyed = tuple(pool for pool in self.aux if not pool.rides_on_kv)
        self.leased = tuple(store for store in self.pools.values() if store.eviction == "lease")

    def touch_queried(self, span: Sequence[int], now_s: float) -> None:
        """A hit query's `exists` calls, under lease eviction, refresh what they find: the KV
        pages of the leading run and every pool's objects of those pages (Mooncake's
        `batch_exists_v2` asks each pool about every page up to the KV hit)."""
        if self.leased:
            run = span[: self.kv.leading_run(span, now_s)]
            for store in self.leased:
                store.touch(run)

    @property
    def kv(self) -> StoragePool:
        return self.pools[KV]

    def tail_present(self, pool: Pool, span: Sequence[int], end: int, now_s: float = 0.0) -> bool:
        """Does `pool` report the tail keys needed to resume at `end` (span-relative)?"""
        store = self.pools[pool.name]
        return all(store.exists(key, now_s) for key in pool.tail_keys(span, end))

    def legal_endpoint_at_or_below(self, span: Sequence[int], end: int, now_s: float = 0.0) -> int:
        """Greatest E <= end at which every aux pool reports its tail keys (0 if none).

        No endpoint above the lowest pool boundary at or below `end` is legal for that pool,
        so the search drops to it until every pool agrees."""
        if not self.aux:
            return end
        e = end
        while e > 0:
            lowest = min(self.pool_boundary(p, span, e, now_s) for p in self.aux)
            if lowest == e:
                return e
            e = lowest
        return 0

    def boundaries(self, span: Sequence[int], now_s: float) -> dict[str, int]:
        """Each pool's own boundary in the span: the KV hit, and per aux pool its largest legal
        endpoint at or below it (what batch_exists_v2 reports per pool)."""
        kv_hit = self.kv.leading_run(span, now_s)
        return {
            KV: kv_hit,
            **{p.name: self.pool_boundary(p, span, kv_hit, now_s) for p in self.aux},
        }

    def pool_boundary(self, pool: Pool, span: Sequence[int], end: int, now_s: float = 0.0) -> int:
        """Greatest E <= end at which this one pool reports its tail keys (0 if none)."""
        return self.pools[pool.name].tail_boundary(span, end, pool.tail_pages, now_s)

    def hit_query(self, kind: str, span: Sequence[int], now_s: float = 0.0) -> int:
        """Pages of `span` the backend reports as restorable, by backend behaviour."""
        return HIT_QUERIES[kind](self, span, now_s)

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


HitQuery = Callable[[Storage, Sequence[int], float], int]
"""(storage, span, now_s) -> pages of the span the backend reports as restorable."""

HIT_QUERIES: Registry[HitQuery] = Registry("hit query")

AUX_BLIND_QUERIES = frozenset({"kv_only"})
"""Hit queries whose `exists` does not look at aux objects, so they tell per-pool beliefs
nothing about them."""


@HIT_QUERIES.register("kv_only")
def kv_only(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """Counts KV pages only: a backend whose `exists` is blind to aux objects (a what-if)."""
    return storage.kv.leading_run(span, now_s)


@HIT_QUERIES.register("intersect")
def intersect(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """The largest endpoint at or below the KV hit that is legal for every aux pool at once."""
    kv_hit = storage.kv.leading_run(span, now_s)
    return storage.legal_endpoint_at_or_below(span, kv_hit, now_s)


@HIT_QUERIES.register("min_of_pools")
def min_of_pools(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """What SGLang's hybrid backends answer (`batch_exists_v2` of the file, hf3fs and nixl
    backends): per aux pool the largest legal endpoint at or below the KV hit, then the minimum.

    With one aux pool this is `intersect`. With two tail-keyed pools it can report an endpoint
    that is legal for neither (SWA legal only at 3, Mamba only at 2 -> 2, where SWA has no
    window): SGLang issue #39147, and a persistent cause of discards.
    """
    kv_hit = storage.kv.leading_run(span, now_s)
    return min([kv_hit, *(storage.pool_boundary(p, span, kv_hit, now_s) for p in storage.aux)])


class HitQueryRaised(Exception):
    """The backend's `batch_exists_v2` raised (it has none of its own, or refuses pool
    transfers): through SGLang 0.5.21 nothing catches it, and the controller's prefetch thread,
    the one thread that answers hit queries, ends."""


@HIT_QUERIES.register("cascading_min")
def cascading_min(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """The mori (UMBP) backend's fold: each aux pool, in order, is asked only about the pages
    up to the running minimum so far, and its boundary there becomes the new minimum.

    Unlike `min_of_pools`, which asks every pool at the KV hit, a pool after one that cut the
    prefix is asked at the cut: where its own boundary at the KV hit lies above the cut and it
    is not legal at the cut, it reports lower (never higher), so the answer depends on the
    order of the pools (SWA legal only at 3, Mamba only at 2, KV hit 3: SWA first gives 2,
    Mamba first gives 0). It is not `intersect` either: it never goes back to an earlier pool.
    """
    running = storage.kv.leading_run(span, now_s)
    for pool in storage.aux:
        if running == 0:
            break
        running = storage.pool_boundary(pool, span, running, now_s)
    return running


@HIT_QUERIES.register("none")
def none(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """Nothing is ever restorable: the shm backend, a stand-in for the shared-memory host
    allocator, stores nothing (`exists` is False, `batch_exists_v2` reports 0 pages)."""
    return 0


@HIT_QUERIES.register("raises")
def raises(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """A backend without a hybrid hit query of its own: a model with no aux pool is asked
    through `batch_exists` (the KV run); a hybrid one makes the query raise (`HitQueryRaised`),
    which the release's controller handles (`prefetch.hit_query_error`)."""
    if storage.aux:
        raise HitQueryRaised("batch_exists_v2 raised")
    return storage.kv.leading_run(span, now_s)


@HIT_QUERIES.register("min_of_pools_no_swa")
def min_of_pools_no_swa(storage: Storage, span: Sequence[int], now_s: float) -> int:
    """`min_of_pools` of a backend that names objects for some pool kinds only (npu_memcache:
    indexer, Mamba and draft pools): the fold goes pool by pool while pages are left, and an
    SWA pool reached with pages left raises ("Unsupported hybrid pool")."""
    kv_hit = running = storage.kv.leading_run(span, now_s)
    for pool in storage.aux:
        if running == 0:
            break
        if pool.name == "swa":
            raise HitQueryRaised("no object names for an SWA pool")
        running = min(running, storage.pool_boundary(pool, span, kv_hit, now_s))
    return running


ZERO_VERDICT_QUERIES = frozenset({"none"})
"""Hit queries that report no pool's boundary: every pool's beliefs heal past the folded 0."""

RAISING_QUERIES = {"raises": None, "min_of_pools_no_swa": "swa"}
"""Hit queries that raise for a hybrid model (None) or for a model with this pool."""


def no_hit_reason(kind: str, pools: Sequence[str], hit_query_error: str) -> str | None:
    """Why a hit query cannot serve a model with these pools from storage, if it cannot (what
    `validate` warns)."""
    if kind == "none":
        return "its hit query reports 0 pages for every model, so no prefetch ever reads storage"
    if kind not in RAISING_QUERIES:
        return None
    needs = RAISING_QUERIES[kind]
    if not any(name != "kv" for name in pools) or (needs is not None and needs not in pools):
        return None
    which = "a hybrid model" if needs is None else f"a model with an {needs} pool"
    if hit_query_error == "stop":
        return (
            f"batch_exists_v2 raises for {which} and nothing catches it: the first prefetch "
            "ends the controller's prefetch thread, and no later prefetch gets an answer"
        )
    return (
        f"batch_exists_v2 raises for {which}; each query counts 0 pages, so no prefetch reads "
        "storage"
    )
