"""The discard heal: the beliefs each pool keeps after a hybrid prefetch fails its
all-or-nothing check, the model's `Prefetcher.resolve` (its heal rule under the release's beliefs)
against each release's `UnifiedRadixCache._check_hybrid_prefetch_result` (0.5.19 on; 0.5.18 has
no beliefs).

SGLang's method runs on a stand-in `self` holding only what the discard branch reads, with the
release's real `StorageExistenceCache` and its real `_belief_policy` (no component claims a
pool, so each transfer's hit policy picks the built-in one), and a stand-in operation built from
the same random case as the model's `PrefetchOp`: kv+swa, kv+mamba or kv+swa+mamba, a hit of 1
to 6 pages, an SWA window of 1 to 3 pages, KV completed 0 to hit pages, aux counts served (only
when KV completed and the op was not stopped), a mid-tree span shorter than the window (SWA
keys None), random prior beliefs per pool, and a stop at the deadline or not.
"""

from __future__ import annotations

import random
import types
from typing import Any

import pytest

from sim.model.pools import KV
from sim.model.prefetch import (
    PrefetchOp,
    plan_aux_transfers,
)
from tests.conformance import releases
from tests.conformance.heal_sides import PAGE, ModelSide, ReleaseSide
from tests.conformance.profiles import heal_after_deadline, profile
from tests.conformance.tally import agree
from tests.model_helpers import make_storage

CASES = 600
WITH_BELIEFS = releases.shipping("buffer_mode", since="0.5.19")
LAYOUTS = (("kv", "swa"), ("kv", "mamba"), ("kv", "swa", "mamba"))


def model_settings(release: str) -> tuple[str, str, bool]:
    """The release profile's existence_cache.beliefs, heal and prefetch.heal_after_deadline."""
    values = profile(release)
    return values["existence_cache.beliefs"], values["heal"], heal_after_deadline(release)


def _case(rng: random.Random) -> dict[str, Any]:
    pools = rng.choice(LAYOUTS)
    hit = rng.randint(1, 6)
    start = 0
    window = rng.randint(1, 3)
    if "swa" in pools and hit < window and rng.random() < 0.3:
        start = rng.randint(1, 4)
    completed = rng.choice([hit, hit, rng.randint(0, hit)])
    stopped = rng.random() < 0.35
    span = tuple(range(100, 100 + hit))
    prior = {pool: sorted(k for k in (*span, 99, 200) if rng.random() < 0.6) for pool in pools}
    served = {pool: rng.randint(0, 3) for pool in pools if pool != KV}
    return {
        "pools": pools,
        "span": span,
        "start_page": start,
        "window_pages": window,
        "completed_pages": completed,
        "stopped": stopped,
        "served": served,
        "prior": prior,
    }


def _op(case: dict[str, Any]) -> PrefetchOp:
    """The model's op, read as the engine reads it: aux only after KV completed, not stopped."""
    span = case["span"]
    storage = make_storage({p: [] for p in case["pools"]}, case["window_pages"])
    op = PrefetchOp(1, case["start_page"], span, 0.0, hit_pages=len(span))
    op.aux = plan_aux_transfers(storage.aux, op)
    op.completed_pages = case["completed_pages"]
    op.terminated = case["stopped"]
    op.done = not op.terminated
    if op.completed_pages == op.hit_pages and not op.terminated:
        for t in op.aux:
            if t.keys is not None:
                t.hit_pages = min(case["served"][t.pool], len(t.keys))
                t.read = True
    return op


def _discarded(op: PrefetchOp) -> bool:
    return op.completed_pages < op.hit_pages or not all(t.served_all for t in op.aux)


def _ours(release: str, case: dict[str, Any], op: PrefetchOp) -> dict[str, list[int]]:
    beliefs, heal, after_deadline = model_settings(release)
    storage = make_storage({p: [] for p in case["pools"]}, case["window_pages"])
    model = ModelSide(
        case,
        storage,
        per_pool=beliefs == "per_pool",
        heal=heal,
        hit_query="min_of_pools",
        heal_after_deadline=after_deadline,
    )
    model.prefetcher.host.alloc_prefetch(op.hit_pages)
    model.prefetcher.resolve(op, 1.0)
    return model.beliefs()


class _Request:
    """A stand-in request handle: hashable, with the `rid` the warning prints."""

    def __init__(self, rid: str) -> None:
        self.rid = rid


class _Self:
    """The attributes the discard branch of `_check_hybrid_prefetch_result` reads."""

    def __init__(self, mod: types.ModuleType, cache: Any) -> None:
        self.page_size = PAGE
        self.storage_existence_cache = cache
        self.components: dict[str, Any] = {}
        self.cache_controller = types.SimpleNamespace(
            append_host_mem_release=lambda **kw: None, prefetch_tokens_occupied=0
        )
        self.buffer_pipeline = None
        self.ongoing_prefetch: dict[Any, Any] = {}
        self.prefetch_loaded_tokens_by_reqid: dict[Any, int] = {}
        self.prefetch_loaded_storage_start_by_reqid: dict[Any, int] = {}
        self.host_memory_mode = "buffer_only"
        cls = mod.UnifiedRadixCache
        if hasattr(cls, "_belief_policy"):
            self._belief_policy = types.MethodType(cls._belief_policy, self)

    def _prefetch_occupied_span(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def _finish_storage_prefetch(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _retire_ongoing_prefetch(self, *args: Any, **kwargs: Any) -> None:
        pass

    def dec_host_lock_ref(self, *args: Any, **kwargs: Any) -> None:
        pass


def _theirs(release: str, case: dict[str, Any], op: PrefetchOp) -> dict[str, list[int]]:
    """Run the release's discard branch on the same case; the beliefs left per pool."""
    urc = releases.module(release, "unified_radix_cache")
    store = releases.module(release, "hicache_storage")
    sec = releases.module(release, "buffer_mode.storage_existence_cache")
    assert urc is not None and store is not None and sec is not None
    side = ReleaseSide(store, sec, case)
    names = side.names
    transfers = [
        types.SimpleNamespace(
            name=names[t.pool],
            keys=None if t.keys is None else [str(k) for k in t.keys],
            hit_policy=store.PoolHitPolicy.TRAILING_PAGES,
            indices_from_pool=None,
        )
        for t in op.aux
    ]
    operation = types.SimpleNamespace(
        pool_transfers=transfers,
        pool_storage_result=types.SimpleNamespace(
            extra_pool_hit_pages={names[t.pool]: t.hit_pages for t in op.aux}
        ),
        completed_tokens=op.completed_pages * PAGE,
        sidecar_hash_values=None,
        deadline_expired=op.terminated,
        pool_transfers_done=True,
    )
    hash_value = [str(k) for k in op.hit_span]
    me = _Self(urc, side.cache)
    request = _Request("r1")
    me.ongoing_prefetch[request] = None
    me.ongoing_prefetch["r1"] = None
    method = urc.UnifiedRadixCache._check_hybrid_prefetch_result
    with releases.active(release):
        if "last_host_node_id" in method.__code__.co_varnames:
            first = "r1" if release == "0.5.19" else request
            ok = method(
                me, first, operation, operation.completed_tokens, hash_value,
                list(range(op.hit_pages * PAGE)), 0, None, hash_value,
            )  # fmt: skip
        else:
            ok = method(me, request, operation, hash_value, list(range(op.hit_pages * PAGE)))
    assert ok is False
    return side.beliefs()


@pytest.mark.parametrize("release", WITH_BELIEFS)
def test_discard_heal_leaves_each_pool_s_beliefs(release: str) -> None:
    rng = random.Random(f"discard-heal-{release}")
    done = 0
    while done < CASES:
        case = _case(rng)
        op = _op(case)
        if not _discarded(op):
            continue
        done += 1
        theirs = _theirs(release, case, _op(case))
        ours = _ours(release, case, op)
        agree(
            release,
            "discard heal",
            "UnifiedRadixCache._check_hybrid_prefetch_result",
            case,
            ours,
            theirs,
        )


def test_kv_page_the_swa_window_does_not_reach_is_kept_per_pool() -> None:
    """kv+swa, hit 2, window 2, KV completed 1, page 0 believed: 0.5.22 keeps page 0 (KV heals
    only past its completed page), as the `per_pool` rule does; `keep_pages` drops it."""
    case = {
        "pools": ("kv", "swa"),
        "span": (100, 101),
        "start_page": 0,
        "window_pages": 2,
        "completed_pages": 1,
        "stopped": False,
        "served": {"swa": 0},
        "prior": {KV: [100], "swa": []},
    }
    assert _theirs("0.5.22", case, _op(case))[KV] == [100]
    assert _ours("0.5.22", case, _op(case))[KV] == [100]
    assert _ours("0.5.21", case, _op(case))[KV] == []
