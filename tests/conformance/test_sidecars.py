"""Sidecar pools (SGLang's KV-derived `PoolHitPolicy.ALL_PAGES` pools, the DSA indexer) against
each release's code: the ALL_PAGES boundary of the hit query, the clamp of a KV batch, and the
heal of a discarded mixed stack.

- **Boundary**: the file and hf3fs backends' `batch_exists_v2` with an ALL_PAGES transfer for
  the indexer beside the trailing-pages ones, on seeded random stored sets, against the model's
  fold and `Storage.boundaries` (the indexer is a pool whose tail is every page).
- **Clamp**: `HiCacheController._page_transfer_kv_batch` (0.5.19 on) with a stand-in KV reader
  and backend serving seeded leading runs, against the model's `Prefetcher.read_kv` on stores
  holding the same runs: the batch's hit is the shorter run.
- **Mixed-stack heal** (0.5.22 on): `UnifiedRadixCache._check_hybrid_prefetch_result` on an op
  with an indexer (KV-derived) and an SWA transfer that fell short: which keys each pool's
  beliefs are healed past (`heal_from_transfer`), against the model's `served_drops`; and a
  sidecar-only stack is never discarded whatever it completed.

Mutations tried (each made a test fail): an ALL_PAGES boundary counted as a trailing window
(boundary), `max` instead of `min` in the clamp and a sidecar read only when KV served the
whole batch (clamp), the indexer healed past its own transfer count instead of KV's completed
pages, a sidecar-only stack discarded when it completed less than its hit, and a mixed stack
kept whenever a sidecar was read with its KV (mixed heal).
"""

from __future__ import annotations

import random
import tempfile
import types
from typing import Any

import pytest

from sim.model.faults import FaultStreams
from sim.model.heals import served_drops
from sim.model.object_store import StoragePool
from sim.model.operation import AuxTransfer, PrefetchOp
from sim.model.storage import HIT_QUERIES
from tests.conformance import releases
from tests.conformance.tally import agree
from tests.conformance.test_folds import _Backend, _key, fold
from tests.model_helpers import make_storage

CASES = 300
BACKENDS = ("file", "hf3fs")
POOL_SETS = (("kv", "indexer"), ("kv", "indexer", "swa"))
WITH_KV_BATCH = [r for r in releases.RELEASES if r >= "0.5.19"]
PER_POOL_HEAL = [r for r in releases.RELEASES if r >= "0.5.22"]


class _SidecarBackend(_Backend):
    """The folds' backend stand-in, with the indexer's namespace registered too."""

    def _hf3fs(self) -> Any:
        store = super()._hf3fs()
        name = self.hs.PoolName.INDEXER
        store._pool_storage_ctx[name] = types.SimpleNamespace(namespace=name)
        return store

    def query_with_sidecar(self, pages: int, window: int, pools: tuple[str, ...]) -> Any:
        hs = self.hs
        transfers = [
            hs.PoolTransfer(
                name=hs.PoolName(pool),
                keys=["__placeholder__"] * (min(window, pages) if pool == "swa" else pages),
                hit_policy=(
                    hs.PoolHitPolicy.TRAILING_PAGES if pool == "swa" else hs.PoolHitPolicy.ALL_PAGES
                ),
            )
            for pool in pools
            if pool != "kv"
        ]
        info = hs.HiCacheStorageExtraInfo(prefix_keys=None)
        with self._unset_environment():
            result = self.store.batch_exists_v2([_key(i) for i in range(pages)], transfers, info)
        return result.kv_hit_pages, {str(k): v for k, v in result.extra_pool_hit_pages.items()}


def _case(rng: random.Random) -> dict[str, Any]:
    pools = rng.choice(POOL_SETS)
    pages = rng.randint(1, 8)
    stored = {
        pool: [p for p in range(pages) if rng.random() < rng.choice((0.6, 0.85, 1.0))]
        for pool in pools
    }
    return {"pages": pages, "window_pages": rng.randint(1, 3), "stored": stored}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", releases.RELEASES)
def test_all_pages_boundary_and_fold(release: str, backend: str) -> None:
    kind = fold(release, backend)
    rng = random.Random(f"sidecar-fold-{release}-{backend}")
    short = 0
    with tempfile.TemporaryDirectory() as folder, releases.active(release):
        theirs = _SidecarBackend(release, backend, folder)
        for _ in range(CASES):
            case = _case(rng)
            theirs.hold(case["stored"])
            hit, reported = theirs.query_with_sidecar(
                case["pages"], case["window_pages"], tuple(case["stored"])
            )
            storage = make_storage(case["stored"], window_pages=case["window_pages"])
            span = list(range(case["pages"]))
            bounds = storage.boundaries(span, 0.0)
            short += bounds["indexer"] < bounds["kv"]
            shown = {**case, "backend": backend, "fold": kind}
            where = f"{backend}.batch_exists_v2"
            agree(release, "sidecar fold", where, shown, HIT_QUERIES[kind](storage, span, 0.0), hit)
            ours = {pool: bounds[pool] for pool in reported}
            agree(release, "sidecar boundary", where, shown, ours, reported)
    assert short > CASES // 10, "too few cases where the indexer fell short of KV"


def _store(name: str, keys: list[int]) -> StoragePool:
    store = StoragePool(name, 1, None, 0.0, 0.0, FaultStreams.seeded(0))
    assert all(store.put(keys, 0.0))
    return store


@pytest.mark.parametrize("release", WITH_KV_BATCH)
def test_a_kv_batch_is_clamped_to_its_sidecars(release: str) -> None:
    """The batch's hit is min(KV's run, each sidecar's run), and the sidecar is read however
    much KV served."""
    from sim.model.prefetch import Prefetcher
    from sim.model.storage import Storage
    from tests.model_helpers import layout

    rng = random.Random(f"clamp-{release}")
    with releases.active(release):
        controller: Any = releases.real_module(release, "sglang.srt.managers.cache_controller")
        hs: Any = releases.module(release, "hicache_storage")
        for _ in range(CASES):
            batch = rng.randint(1, 8)
            kv_run = rng.randint(0, batch)
            side_run = rng.randint(0, batch)
            keys = [_key(i) for i in range(batch)]
            fake = types.SimpleNamespace(
                page_get_func=lambda op, hashes, host, info, n=kv_run: n,
                storage_backend=types.SimpleNamespace(
                    batch_get_v2=lambda transfers, extra_info=None, n=side_run: {
                        str(t.name): [i < n for i in range(len(t.keys))] for t in transfers
                    }
                ),
            )
            sidecar = hs.PoolTransfer(name=hs.PoolName.INDEXER, indices_from_pool=hs.PoolName.KV)
            theirs = controller.HiCacheController._page_transfer_kv_batch(
                fake, None, keys, None, None, [sidecar]
            )
            span = tuple(range(batch))
            stores = {
                "kv": _store("kv", list(span[:kv_run])),
                "indexer": _store("indexer", list(span[:side_run])),
            }
            storage = Storage(stores, layout(stores), 1e9, 1e9, 0.5)
            ours = _completed(Prefetcher, storage, span)
            shown = {"batch": batch, "kv_run": kv_run, "indexer_run": side_run}
            where = "HiCacheController._page_transfer_kv_batch"
            agree(release, "sidecar clamp", where, shown, ours, theirs)


def _completed(prefetcher_class: Any, storage: Any, span: tuple[int, ...]) -> int:
    """The model's `read_kv` of one batch, on a prefetcher holding only what it reads."""
    prefetcher = prefetcher_class.__new__(prefetcher_class)
    prefetcher.storage, prefetcher.client = storage, 0
    prefetcher.batch_sidecars = storage.sidecars
    op = PrefetchOp(1, 0, span, 0.0, hit_pages=len(span))
    prefetcher.read_kv(op, span, 0.0)
    return op.completed_pages


def _model_keeps(op: PrefetchOp) -> bool:
    """The model's check of an op whose indexer was read with KV (0.5.19 on)."""
    from sim.model.prefetch import Prefetcher

    prefetcher = Prefetcher.__new__(Prefetcher)
    prefetcher.sidecar_names = frozenset({"indexer"})
    return prefetcher.kept(op, prefetcher._usable_pages(op))


class _Beliefs:
    """One pool's `PoolExistenceBeliefs`, recording where it is healed."""

    def __init__(self, pool: str, log: dict[str, list[str]]) -> None:
        self.pool, self.log = pool, log

    def invalidate_beyond(self, keys: list[str], keep: int) -> None:
        self.log.setdefault(self.pool, []).extend(keys[keep:])


@pytest.mark.parametrize("release", PER_POOL_HEAL)
def test_a_discarded_mixed_stack_heals_each_pool_past_what_it_served(release: str) -> None:
    """indexer (KV-derived, clamping) + SWA: a shortfall discards; KV and the indexer heal
    past the completed pages, SWA past its own count; a sidecar-only stack never discards."""
    rng = random.Random(f"mixed-heal-{release}")
    with releases.active(release):
        tree: Any = releases.module(release, "unified_radix_cache")
        hs: Any = releases.module(release, "hicache_storage")
        cache_class = tree.UnifiedRadixCache
        discards = 0
        for _ in range(CASES):
            pages = rng.randint(1, 6)
            completed = rng.choice((pages, rng.randint(0, pages)))
            window = min(rng.randint(1, 3), pages)
            swa_hit = rng.choice((window, rng.randint(0, window)))
            mixed = rng.random() < 0.7
            chain = [_key(i) for i in range(pages)]
            swa_keys = chain[pages - window :]
            transfers = [
                hs.PoolTransfer(
                    name=hs.PoolName.INDEXER,
                    keys=chain,
                    hit_policy=hs.PoolHitPolicy.ALL_PAGES,
                    indices_from_pool=hs.PoolName.KV,
                )
            ]
            if mixed:
                transfers.append(
                    hs.PoolTransfer(
                        name=hs.PoolName.SWA,
                        keys=swa_keys,
                        hit_policy=hs.PoolHitPolicy.TRAILING_PAGES,
                    )
                )
            log: dict[str, list[str]] = {}
            theirs_kept = _check(cache_class, hs, transfers, chain, completed, swa_hit, log)
            op = PrefetchOp(1, 0, tuple(range(pages)), 0.0, hit_pages=pages)
            op.completed_pages, op.riders = completed, ("indexer",)
            if mixed:
                op.aux = [AuxTransfer("swa", tuple(range(pages - window, pages)), swa_hit, True)]
            ours_kept = _model_keeps(op)
            shown = {"pages": pages, "completed": completed, "swa": (window, swa_hit)}
            where = "UnifiedRadixCache._check_hybrid_prefetch_result"
            agree(release, "sidecar discard", where, shown, ours_kept, theirs_kept)
            if not theirs_kept:
                discards += 1
                ours = {p: [_key(k) for k in keys] for p, keys in served_drops(op).items()}
                theirs = {p: keys for p, keys in log.items() if keys}
                agree(release, "sidecar heal", where, shown, ours, theirs)
        assert discards > CASES // 10


class _Request(str):
    """A request handle: hashable, with its id."""

    @property
    def rid(self) -> str:
        return str(self)


def _check(
    cache_class: Any,
    hs: Any,
    transfers: list[Any],
    chain: list[str],
    completed_pages: int,
    swa_hit: int,
    log: dict[str, list[str]],
) -> bool:
    """The release's check on a stand-in cache: True when the prefetch is kept."""
    policy = types.SimpleNamespace(
        heal_from_transfer=lambda beliefs, keys, keep: beliefs.invalidate_beyond(keys, keep)
    )
    cache = types.SimpleNamespace(
        page_size=1,
        storage_existence_cache=types.SimpleNamespace(pool=lambda name: _Beliefs(str(name), log)),
        _belief_policy=lambda pool, hit_policy: policy,
        _finish_storage_prefetch=lambda *a, **k: None,
        _retire_ongoing_prefetch=lambda *a, **k: None,
        prefetch_loaded_tokens_by_reqid={},
        prefetch_loaded_storage_start_by_reqid={},
    )
    operation = types.SimpleNamespace(
        pool_transfers=transfers,
        pool_storage_result=types.SimpleNamespace(extra_pool_hit_pages={hs.PoolName.SWA: swa_hit}),
        completed_tokens=completed_pages,
        sidecar_hash_values=None,
        deadline_expired=False,
        pool_transfers_done=True,
    )
    request = _Request("r")
    return bool(cache_class._check_hybrid_prefetch_result(cache, request, operation, chain, []))
