"""The hit-query heal: the beliefs each pool keeps after a hit query in `buffer_only` mode, the
model's `Prefetcher.query` (its `_heal_from_query`) against each release's
`UnifiedRadixCache._invalidate_absent_from_hit_query` (0.5.19 on).

Both sides read the same random storage contents. SGLang's verdicts come from the release's own
file backend (`HiCacheFile.batch_exists_v2`, run on a stand-in `self` whose existing files are
those contents): the folded hit is `storage_hit_count`, and each pool the backend reported gets
its own verdict in `query_pool_hit_pages` (KV always: the backend's KV count, else the folded
hit), as the hybrid cache controller's `_storage_hit_query` records them for one rank. The
model's query is the one the release's file backend folds by (a minimum through 0.5.22, the
intersection in 0.5.23). Cases: kv+swa, kv+mamba, kv+swa+mamba; 1 to 6 pages; an SWA window of
1 to 3 pages; random stored keys and prior beliefs per pool; the op stopped at its deadline or
not.
"""

from __future__ import annotations

import random
import types
from typing import Any

import pytest

from sim.model.pools import KV
from sim.model.prefetch import PrefetchOp
from tests.conformance import releases
from tests.conformance.heal_sides import PAGE, ModelSide, ReleaseSide
from tests.conformance.profiles import heal_after_deadline, profile
from tests.conformance.tally import agree
from tests.model_helpers import make_storage

CASES = 600
WITH_BELIEFS = releases.shipping("buffer_mode", since="0.5.19")
LAYOUTS = (("kv", "swa"), ("kv", "mamba"), ("kv", "swa", "mamba"))


def model_settings(release: str) -> tuple[str, str, bool]:
    """The release profile's existence_cache.beliefs, the file backend's storage.hit_query in
    that release, and prefetch.heal_after_deadline."""
    values = profile(release, "file")
    return (
        values["existence_cache.beliefs"],
        values["storage.hit_query"],
        heal_after_deadline(release),
    )


def _case(rng: random.Random) -> dict[str, Any]:
    pools = rng.choice(LAYOUTS)
    pages = rng.randint(1, 6)
    span = tuple(range(100, 100 + pages))
    stored = {pool: sorted(k for k in span if rng.random() < 0.75) for pool in pools}
    prior = {pool: sorted(k for k in (*span, 200) if rng.random() < 0.6) for pool in pools}
    return {
        "pools": pools,
        "span": span,
        "window_pages": rng.randint(1, 3),
        "stored": stored,
        "prior": prior,
        "stopped": rng.random() < 0.25,
    }


def _ours(release: str, case: dict[str, Any]) -> dict[str, list[int]]:
    beliefs, hit_query, after_deadline = model_settings(release)
    model = ModelSide(
        case,
        make_storage(case["stored"], case["window_pages"]),
        per_pool=beliefs == "per_pool",
        heal="per_pool",
        hit_query=hit_query,
        heal_after_deadline=after_deadline,
    )
    op = PrefetchOp(1, 0, case["span"], 0.0)
    op.terminated = case["stopped"]
    model.prefetcher.query(op, 0.0)
    return model.beliefs()


class _Backend:
    """The attributes `HiCacheFile.batch_exists_v2` reads: the files that exist."""

    def __init__(self, store: types.ModuleType, stored: dict[Any, list[str]]) -> None:
        cls = store.HiCacheFile
        self._get_component_key = types.MethodType(cls._get_component_key, self)
        if hasattr(cls, "_log_key"):
            self._log_key = types.MethodType(cls._log_key, self)
        self.files = {
            f"{self._get_component_key(h, None if name == store.PoolName.KV else name)}.bin"
            for name, hashes in stored.items()
            for h in hashes
        }

    def _get_suffixed_key(self, key: str) -> str:
        return key

    def _collect_existing_component_keys(self, keys: Any, transfers: Any) -> set[str]:
        return self.files


def _theirs(release: str, case: dict[str, Any]) -> dict[str, list[int]]:
    urc = releases.module(release, "unified_radix_cache")
    store = releases.module(release, "hicache_storage")
    sec = releases.module(release, "buffer_mode.storage_existence_cache")
    assert urc is not None and store is not None and sec is not None
    side = ReleaseSide(store, sec, case)
    names = side.names
    span, window = case["span"], case["window_pages"]
    tails = {"swa": min(window, len(span)), "mamba": 1}
    transfers = [
        types.SimpleNamespace(
            name=names[p],
            keys=["__placeholder__"] * tails[p],
            hit_policy=store.PoolHitPolicy.TRAILING_PAGES,
            indices_from_pool=None,
        )
        for p in case["pools"]
        if p != KV
    ]
    chain = [str(k) for k in span]
    backend = _Backend(store, {names[p]: [str(k) for k in ks] for p, ks in case["stored"].items()})
    with releases.active(release):
        result = store.HiCacheFile.batch_exists_v2(backend, chain, transfers, None)
    folded = result.kv_hit_pages
    reported = result.extra_pool_hit_pages
    verdicts = {names[KV]: reported.get(names[KV], folded)}
    verdicts.update({t.name: reported[t.name] for t in transfers if t.name in reported})
    me = types.SimpleNamespace(
        page_size=PAGE, storage_existence_cache=side.cache, host_memory_mode="buffer_only"
    )
    me.components = {}
    if hasattr(urc.UnifiedRadixCache, "_belief_policy"):
        me._belief_policy = types.MethodType(urc.UnifiedRadixCache._belief_policy, me)
    operation = types.SimpleNamespace(
        all_hash_values=chain,
        storage_hit_count=folded * PAGE,
        query_pool_hit_pages=verdicts,
        pool_transfers=transfers,
        deadline_expired=case["stopped"],
    )
    with releases.active(release):
        urc.UnifiedRadixCache._invalidate_absent_from_hit_query(me, operation)
    return side.beliefs()


@pytest.mark.parametrize("release", WITH_BELIEFS)
def test_query_heal_leaves_each_pool_s_beliefs(release: str) -> None:
    rng = random.Random(f"query-heal-{release}")
    for _ in range(CASES):
        case = _case(rng)
        agree(
            release,
            "hit-query heal",
            "UnifiedRadixCache._invalidate_absent_from_hit_query",
            case,
            _ours(release, case),
            _theirs(release, case),
        )


def test_pools_after_the_fold_ran_out_heal_from_the_folded_cut() -> None:
    """kv+swa+mamba, 1 page, KV and Mamba stored, no SWA, Mamba believed: the fold stops at
    SWA (boundary 0), Mamba gets no verdict and heals past the folded 0 in 0.5.22 and 0.5.23."""
    case = {
        "pools": ("kv", "swa", "mamba"),
        "span": (100,),
        "window_pages": 2,
        "stored": {"kv": [100], "swa": [], "mamba": [100]},
        "prior": {"kv": [], "swa": [], "mamba": [100]},
        "stopped": False,
    }
    for release in ("0.5.22", "0.5.23"):
        assert _theirs(release, case)["mamba"] == []
        assert _ours(release, case)["mamba"] == []
