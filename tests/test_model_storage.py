"""L3 storage pools, the three hit-query behaviours, tail keys, aux transfer planning and the
hybrid all-or-nothing check (docs/model.md)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.build import build_model
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.model.prefetch import AuxTransfer, PrefetchOp, hybrid_check, plan_aux_transfers
from sim.model.storage import STORAGE_BATCH_PAGES, Storage
from sim.scenario.loading import build_scenario
from tests.conftest import make_doc
from tests.model_helpers import layout, pool


def make_pool(
    name: str = "kv",
    capacity: int | None = None,
    *,
    get_fail: float = 0.0,
    put_fail: float = 0.0,
    outage: tuple[float, float] | None = None,
    log: bool = False,
) -> StoragePool:
    """A storage pool with explicit knobs and a fixed-seed fault stream."""
    return StoragePool(
        name=name,
        object_bytes=10,
        capacity_objects=capacity,
        get_fail_prob=get_fail,
        put_fail_prob=put_fail,
        faults=FaultStreams.seeded(0),
        put_outage_s=outage,
        access_log=[] if log else None,
    )


def make_storage(contents: Mapping[str, Iterable[int]], window_pages: int = 2) -> Storage:
    """A storage whose (unbounded, fault-free) pools hold exactly `contents`."""
    stores = {}
    for name, keys in contents.items():
        store = make_pool(name)
        assert all(store.put(list(keys), 0.0))
        stores[name] = store
    return Storage(stores, layout(contents, window_pages), 1e9, 1e9, 0.5)


def stored(pool: StoragePool, universe: Iterable[int]) -> set[int]:
    return {k for k in universe if k in pool}


# ---------------------------------------------------------------- StoragePool: LRU capacity


def test_capacity_evicts_least_recently_used() -> None:
    """Five puts into three slots keep the last three and count two evictions."""
    pool = make_pool(capacity=3)
    assert pool.put([1, 2, 3, 4, 5], 0.0) == [True] * 5
    assert len(pool) == 3
    assert stored(pool, range(10)) == {3, 4, 5}
    assert pool.evictions == 2
    assert pool.stored_bytes == 30


def test_get_refreshes_recency() -> None:
    """A get moves the object to most-recent, so the next eviction takes the next oldest."""
    pool = make_pool(capacity=3)
    pool.put([1, 2, 3], 0.0)
    assert pool.get([1]) == 1
    pool.put([4], 0.0)
    assert stored(pool, range(10)) == {1, 3, 4}


def test_put_of_stored_key_refreshes_without_growing() -> None:
    """Re-putting a stored key refreshes it and evicts nothing."""
    pool = make_pool(capacity=3)
    pool.put([1, 2, 3], 0.0)
    pool.put([1], 0.0)
    assert pool.evictions == 0 and len(pool) == 3
    pool.put([4], 0.0)
    assert stored(pool, range(10)) == {1, 3, 4}


def test_exists_query_does_not_refresh_recency() -> None:
    """`leading_run` is a metadata query: it leaves the LRU order alone."""
    pool = make_pool(capacity=3)
    pool.put([1, 2, 3], 0.0)
    assert pool.leading_run([1, 2, 9, 3]) == 2
    pool.put([4], 0.0)
    assert stored(pool, range(10)) == {2, 3, 4}


def test_zero_capacity_stores_nothing() -> None:
    pool = make_pool(capacity=0)
    pool.put([1, 2], 0.0)
    assert len(pool) == 0 and 1 not in pool


def reference_lru(
    cap: int | None, ops: Sequence[tuple[str, list[int]]]
) -> list[OrderedDict[int, None]]:
    """An independent LRU: the store's contents (oldest first) after each operation."""
    lru: OrderedDict[int, None] = OrderedDict()
    states: list[OrderedDict[int, None]] = []
    for kind, keys in ops:
        for key in keys:
            if kind == "get":
                if key not in lru:
                    break
                lru.move_to_end(key)
            else:
                if key in lru:
                    lru.move_to_end(key)
                elif cap != 0:
                    if cap is not None and len(lru) >= cap:
                        lru.popitem(last=False)
                    lru[key] = None
        states.append(OrderedDict(lru))
    return states


@settings(max_examples=150, deadline=None)
@given(
    cap=st.one_of(st.none(), st.integers(0, 6)),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["get", "put"]), st.lists(st.integers(0, 9), min_size=1, max_size=5)
        ),
        max_size=30,
    ),
)
def test_lru_matches_reference(cap: int | None, ops: list[tuple[str, list[int]]]) -> None:
    """Any put/get sequence: never above capacity, same contents and order as a reference LRU."""
    pool = make_pool(capacity=cap)
    before: OrderedDict[int, None] = OrderedDict()
    for (kind, keys), expected in zip(ops, reference_lru(cap, ops), strict=True):
        if kind == "get":
            lead = 0
            while lead < len(keys) and keys[lead] in before:
                lead += 1
            assert pool.get(keys) == lead
        else:
            assert pool.put(keys, 0.0) == [True] * len(keys)
        if cap is not None:
            assert len(pool) <= cap
        assert stored(pool, range(10)) == set(expected)
        before = expected
    if cap:
        # Drain with fresh keys: the old keys must leave in the reference's LRU order.
        order: list[int] = []
        for fresh in range(100, 100 + 2 * cap):
            present = stored(pool, range(10))
            pool.put([fresh], 0.0)
            order.extend(present - stored(pool, range(10)))
        assert order == list(before)


# ---------------------------------------------------------------- StoragePool: get and put


def test_get_stops_at_first_miss() -> None:
    """A get returns the leading run served and does not touch keys after the miss."""
    pool = make_pool(log=True)
    pool.put([1, 2, 4], 0.0)
    assert pool.access_log is not None
    pool.access_log.clear()
    assert pool.get([1, 2, 3, 4]) == 2
    assert (pool.get_hits, pool.get_misses) == (2, 1)
    assert pool.access_log == [(0.0, "get", 1, True, 0), (0.0, "get", 2, True, 0)]


def test_get_of_all_present_serves_all() -> None:
    pool = make_pool()
    pool.put([1, 2, 3], 0.0)
    assert pool.get([1, 2, 3]) == 3
    assert pool.get([]) == 0


def test_failed_get_stops_but_keeps_and_refreshes_the_object() -> None:
    """get_fail_prob=1: nothing is served, the object stays stored and becomes most recent."""
    pool = make_pool(capacity=3, get_fail=1.0)
    pool.put([1, 2, 3], 0.0)
    assert pool.get([1, 2, 3]) == 0
    assert 1 in pool
    pool.put([4], 0.0)
    assert stored(pool, range(10)) == {1, 3, 4}


def test_failed_put_stores_nothing() -> None:
    """put_fail_prob=1: every put fails and the pool stays empty."""
    pool = make_pool(put_fail=1.0)
    assert pool.put([1, 2, 3], 0.0) == [False, False, False]
    assert len(pool) == 0
    assert pool.leading_run([1, 2, 3]) == 0


def test_put_outage_window_is_half_open() -> None:
    """Puts fail for now in [start, end) of the outage and succeed outside it."""
    pool = make_pool(outage=(10.0, 20.0))
    assert pool.put([1], 9.999) == [True]
    assert pool.put([2], 10.0) == [False]
    assert pool.put([3], 19.999) == [False]
    assert pool.put([4], 20.0) == [True]
    assert stored(pool, range(10)) == {1, 4}


def test_evict_random_removes_one_object() -> None:
    pool = make_pool()
    pool.put([1, 2, 3], 0.0)
    key = pool.evict_random(np.random.default_rng(3))
    assert key in {1, 2, 3} and key not in pool
    assert len(pool) == 2 and pool.evictions == 1
    assert make_pool().evict_random(np.random.default_rng(0)) is None


def test_batches_round_up() -> None:
    assert STORAGE_BATCH_PAGES == 128
    assert [Storage.batches(n) for n in (0, 1, 128, 129, 256, 257)] == [0, 1, 1, 2, 2, 3]


# ---------------------------------------------------------------- tail keys


def test_tail_length() -> None:
    """min(tail pages, pages before the endpoint); KV (no bound) needs every page."""
    assert pool("swa", 2).tail_len(100) == 2
    assert pool("swa", 2).tail_len(1) == 1
    assert pool("mamba").tail_len(5) == 1
    assert pool("swa", 4).tail_len(0) == 0
    assert pool("kv").tail_len(7) == 7


def test_tail_keys() -> None:
    """Keys pages[end - n, end) for the endpoint `end`."""
    span = [10, 11, 12, 13, 14, 15]
    assert pool("swa", 2).tail_keys(span, 6) == (14, 15)
    assert pool("swa", 2).tail_keys(span, 4) == (12, 13)
    assert pool("mamba").tail_keys(span, 4) == (13,)
    assert pool("swa", 5).tail_keys(span, 2) == (10, 11)
    assert pool("swa", 3).tail_keys(span, 0) == ()
    assert pool("kv").tail_keys(span, 3) == (10, 11, 12)


def test_chain_interner_shares_prefixes_only() -> None:
    """Equal prefixes get equal keys; the same content after a different parent does not."""
    chains = ChainInterner()
    a = chains.extend(ROOT_KEY, ["x", "y", "z"])
    b = chains.extend(ROOT_KEY, ["x", "y", "w"])
    c = chains.extend(ROOT_KEY, ["y", "z"])
    assert a[:2] == b[:2] and a[2] != b[2]
    assert not set(c) & set(a)
    assert len(set(a + b + c)) == len(chains) == 6


# ---------------------------------------------------------------- hit query

SPAN = list(range(1, 11))
"""A ten-page span with keys 1..10 (span position i holds key i + 1)."""


def test_hit_query_without_aux_pools_is_kv_hit() -> None:
    storage = make_storage({"kv": SPAN[:7]})
    for kind in ("kv_only", "intersect", "min_of_pools"):
        assert storage.hit_query(kind, SPAN) == 7


def test_hit_query_kv_only_ignores_aux() -> None:
    """kv_only counts leading KV pages even when no aux object exists."""
    storage = make_storage({"kv": SPAN[:8], "swa": []})
    assert storage.hit_query("kv_only", SPAN) == 8
    assert storage.hit_query("intersect", SPAN) == 0
    assert storage.hit_query("min_of_pools", SPAN) == 0


def test_hit_query_swa_only() -> None:
    """SWA (window 2) holds the tails of E=4 (3, 4) and E=10 (9, 10); KV holds 8 pages. The
    endpoint at 10 lies beyond the KV hit, so both aux-aware queries answer 4."""
    storage = make_storage({"kv": SPAN[:8], "swa": [3, 4, 9, 10]})
    assert storage.hit_query("kv_only", SPAN) == 8
    assert storage.hit_query("intersect", SPAN) == 4
    assert storage.hit_query("min_of_pools", SPAN) == 4
    assert not storage.tail_present(storage.layout["swa"], SPAN, 8)


def test_min_of_pools_on_sglang_issue_39147() -> None:
    """SWA legal only at 3, Mamba only at 2: min_of_pools reports 2, where SWA has no window;
    intersect finds no endpoint legal for both."""
    span = SPAN[:5]
    storage = make_storage({"kv": span, "swa": [2, 3], "mamba": [2]})
    swa, mamba = storage.layout["swa"], storage.layout["mamba"]
    assert [e for e in range(1, 6) if storage.tail_present(swa, span, e)] == [3]
    assert [e for e in range(1, 6) if storage.tail_present(mamba, span, e)] == [2]
    assert storage.hit_query("min_of_pools", span) == 2
    assert storage.hit_query("intersect", span) == 0


def test_hit_query_short_endpoint_needs_buffer_only_transfers() -> None:
    """At E=1 the SWA tail is min(window, 1) = 1 key."""
    storage = make_storage({"kv": SPAN, "swa": [1]}, window_pages=3)
    assert storage.hit_query("intersect", SPAN) == 1


def test_min_of_pools_reports_an_endpoint_illegal_for_another_pool() -> None:
    """kv+swa+mamba: SWA's best is 8, Mamba's is 10, so min_of_pools says 8 although Mamba has
    no state at 8; intersect says 5, the greatest endpoint legal for both."""
    storage = make_storage({"kv": SPAN, "swa": [4, 5, 7, 8], "mamba": [5, 10]})
    assert storage.hit_query("kv_only", SPAN) == 10
    reported = storage.hit_query("min_of_pools", SPAN)
    assert reported == 8
    assert storage.tail_present(storage.layout["swa"], SPAN, reported)
    assert not storage.tail_present(storage.layout["mamba"], SPAN, reported)
    legal = storage.hit_query("intersect", SPAN)
    assert legal == 5
    assert storage.tail_present(storage.layout["swa"], SPAN, 5) and storage.tail_present(
        storage.layout["mamba"], SPAN, 5
    )
    assert storage.legal_endpoint_at_or_below(SPAN, 10) == 5
    assert storage.legal_endpoint_at_or_below(SPAN, 4) == 0


def test_intersect_is_capped_by_kv_hit() -> None:
    """Aux tails beyond the KV hit do not count."""
    storage = make_storage({"kv": SPAN[:6], "swa": SPAN, "mamba": SPAN})
    assert storage.hit_query("intersect", SPAN) == 6
    assert storage.hit_query("min_of_pools", SPAN) == 6


@st.composite
def storage_cases(draw: st.DrawFn) -> tuple[dict[str, list[int]], int]:
    window = draw(st.integers(1, 4))
    pools = draw(st.sampled_from([["swa"], ["mamba"], ["swa", "mamba"]]))
    kv_run = draw(st.integers(0, len(SPAN)))
    contents = {"kv": SPAN[:kv_run] + [k for k in SPAN[kv_run + 1 :] if draw(st.booleans())]}
    for name in pools:
        contents[name] = [k for k in SPAN if draw(st.integers(0, 3)) > 0]
    return contents, window


@settings(max_examples=200, deadline=None)
@given(storage_cases())
def test_hit_queries_against_brute_force(case: tuple[dict[str, list[int]], int]) -> None:
    """intersect is the greatest legal E <= KV hit; intersect <= min_of_pools <= kv_only."""
    contents, window = case
    storage = make_storage(contents, window_pages=window)
    kv_hit = 0
    while kv_hit < len(SPAN) and SPAN[kv_hit] in contents["kv"]:
        kv_hit += 1

    def legal(pool: str, end: int) -> bool:
        n = min(window if pool == "swa" else 1, end)
        return all(k in contents[pool] for k in SPAN[end - n : end])

    aux = [p for p in contents if p != "kv"]
    best = max((e for e in range(1, kv_hit + 1) if all(legal(p, e) for p in aux)), default=0)
    own = [max((e for e in range(1, kv_hit + 1) if legal(p, e)), default=0) for p in aux]

    assert storage.hit_query("kv_only", SPAN) == kv_hit
    assert storage.hit_query("intersect", SPAN) == best
    assert storage.hit_query("min_of_pools", SPAN) == min([kv_hit, *own])
    assert best <= storage.hit_query("min_of_pools", SPAN) <= kv_hit
    if len(aux) == 1:
        assert storage.hit_query("min_of_pools", SPAN) == best


# ---------------------------------------------------------------- aux transfer planning


def op_of(span: Sequence[int], hit: int, start: int = 0) -> PrefetchOp:
    return PrefetchOp(rid=1, start_page=start, span=tuple(span), issued_s=0.0, hit_pages=hit)


def test_plan_swa_takes_window_tail_of_the_hit() -> None:
    """SWA keys are the min(window, hit) trailing pages of the hit span, not of the span."""
    op = op_of(SPAN, 7)
    swa, mamba = plan_aux_transfers(list(layout(["swa", "mamba"], 3).values()), op)
    assert (swa.pool, swa.keys, swa.hit_pages) == ("swa", (5, 6, 7), 0)
    assert (mamba.pool, mamba.keys) == ("mamba", (7,))


def test_plan_swa_hit_shorter_than_window_from_root() -> None:
    """From the root a hit shorter than the window needs only its own pages."""
    (swa,) = plan_aux_transfers(list(layout(["swa"], 3).values()), op_of(SPAN, 2))
    assert swa.keys == (1, 2)


def test_plan_mid_tree_span_shorter_than_window_has_no_swa_keys() -> None:
    """A span starting mid-tree and shorter than the window gets keys None; Mamba still plans."""
    swa, mamba = plan_aux_transfers(
        list(layout(["swa", "mamba"], 3).values()), op_of([41, 42], 2, start=5)
    )
    assert swa.keys is None and not swa.served_all
    assert mamba.keys == (42,)


def test_plan_mid_tree_span_of_exactly_the_window() -> None:
    (swa,) = plan_aux_transfers(list(layout(["swa"], 3).values()), op_of([41, 42, 43], 3, start=5))
    assert swa.keys == (41, 42, 43)


def test_plan_mamba_only_is_last_hit_page() -> None:
    (mamba,) = plan_aux_transfers(list(layout(["mamba"], 2).values()), op_of(SPAN, 9, start=3))
    assert mamba.keys == (9,)


# ---------------------------------------------------------------- hybrid check


def test_hybrid_check_success() -> None:
    op = op_of(SPAN, 10)
    op.completed_pages = 10
    op.aux = [AuxTransfer("swa", (9, 10), 2), AuxTransfer("mamba", (10,), 1)]
    assert hybrid_check(op)


def test_hybrid_check_kv_short() -> None:
    op = op_of(SPAN, 10)
    op.completed_pages = 9
    op.aux = [AuxTransfer("swa", (9, 10), 2)]
    assert not hybrid_check(op)


def test_hybrid_check_aux_short() -> None:
    op = op_of(SPAN, 10)
    op.completed_pages = 10
    op.aux = [AuxTransfer("swa", (9, 10), 2), AuxTransfer("mamba", (10,), 0)]
    assert not hybrid_check(op)


def test_hybrid_check_aux_without_keys() -> None:
    op = op_of(SPAN, 10)
    op.completed_pages = 10
    op.aux = [AuxTransfer("swa", None, 0)]
    assert not hybrid_check(op)


def test_hybrid_check_kv_only_model() -> None:
    """No aux pools: success iff KV delivered the whole hit (completed beyond it cannot count)."""
    op = op_of(SPAN, 6)
    op.completed_pages = 6
    assert hybrid_check(op)
    op.completed_pages = 5
    assert not hybrid_check(op)


def test_hybrid_check_on_a_real_read() -> None:
    """Read a hit from storage with planned transfers; an SWA tail hole fails the check."""
    storage = make_storage({"kv": SPAN, "swa": [10], "mamba": SPAN})
    op = op_of(SPAN, storage.hit_query("kv_only", SPAN))
    op.completed_pages = storage.pools["kv"].get(op.hit_span)
    op.aux = plan_aux_transfers(storage.aux, op)
    for transfer in op.aux:
        assert transfer.keys is not None
        transfer.hit_pages = storage.pools[transfer.pool].get(transfer.keys)
    assert [t.hit_pages for t in op.aux] == [0, 1]
    assert not hybrid_check(op)


# ---------------------------------------------------------------- write dedup and stale exists


def ttl_pool(ttl_s: float, capacity: int | None = None) -> StoragePool:
    pool = make_pool(capacity=capacity)
    pool.exists_ttl_s = ttl_s
    return pool


def test_a_put_of_a_stored_key_is_skipped_and_succeeds_even_when_a_write_would_fail() -> None:
    pool = make_pool(put_fail=1.0)
    pool.put_fail_prob = 0.0
    pool.put([1, 2], 0.0)
    pool.put_fail_prob = 1.0
    assert pool.to_write([1, 2, 3], 1.0) == (1, 1)
    assert pool.put([1, 2, 3], 1.0) == [True, True, False]
    assert stored(pool, range(5)) == {1, 2} and pool.put_hits == 2 and pool.put_inserts == 2


def test_an_outage_fails_only_the_keys_that_would_be_written() -> None:
    pool = make_pool(outage=(5.0, 10.0))
    pool.put([1], 0.0)
    assert pool.put([1, 2], 6.0) == [True, False]
    assert stored(pool, range(5)) == {1}


def test_a_randomly_evicted_object_still_exists_for_the_ttl() -> None:
    pool = ttl_pool(5.0)
    pool.put([7], 0.0)
    assert pool.evict_random(np.random.default_rng(0), now_s=10.0) == 7
    assert 7 not in pool
    assert pool.exists(7, 12.0) and pool.leading_run([7, 8], 12.0) == 1
    assert not pool.exists(7, 15.0) and pool.leading_run([7], 15.0) == 0
    assert pool.put([7], 12.0) == [True] and 7 not in pool, "the backend skips the rewrite"
    assert pool.to_write([7], 12.0) == (0, 0) and pool.to_write([7], 15.0) == (1, 1)


def test_a_failed_read_clears_the_stale_positive() -> None:
    pool = ttl_pool(5.0)
    pool.put([7], 0.0)
    pool.evict_random(np.random.default_rng(0), now_s=10.0)
    assert pool.get([7], 11.0) == 0
    assert not pool.exists(7, 11.0)
    assert pool.put([7], 11.0) == [True] and 7 in pool


def test_a_failed_batch_read_clears_every_missing_key_of_the_batch() -> None:
    pool = ttl_pool(5.0)
    pool.put([1, 2, 3], 0.0)
    rng = np.random.default_rng(0)
    while len(pool) > 1:
        pool.evict_random(rng, now_s=1.0)
    (kept,) = pool.keys()
    gone = [k for k in (1, 2, 3) if k != kept]
    assert all(pool.exists(k, 2.0) for k in gone)
    pool.get([1, 2, 3], 2.0)
    assert not any(pool.exists(k, 2.0) for k in gone) and pool.exists(kept, 2.0)


def test_capacity_evictions_leave_no_stale_positive() -> None:
    """The backend's own evictor updates its metadata; only removals by others go stale."""
    pool = ttl_pool(5.0, capacity=1)
    pool.put([1], 0.0)
    pool.put([2], 1.0)
    assert 1 not in pool and not pool.exists(1, 1.5)


def test_without_a_ttl_exists_is_membership() -> None:
    pool = ttl_pool(0.0)
    pool.put([7], 0.0)
    pool.evict_random(np.random.default_rng(0), now_s=10.0)
    assert not pool.exists(7, 10.0)


def test_stale_positives_make_the_hit_query_report_what_cannot_be_read() -> None:
    storage = make_storage({"kv": SPAN, "swa": SPAN})
    swa = storage.pools["swa"]
    swa.exists_ttl_s = 5.0
    while 10 in swa:
        swa.evict_random(np.random.default_rng(len(swa)), now_s=1.0)
    assert storage.hit_query("min_of_pools", SPAN, 2.0) == 10
    assert storage.hit_query("min_of_pools", SPAN, 7.0) < 10


def test_a_buffer_mode_span_shorter_than_the_window_asks_for_its_own_pages() -> None:
    """SGLang's SWAComponent.prepare_prefetch: buffer_only mode asks for the span's P pages (the
    device prefix holds the rest of the window); cache mode asks for none."""
    aux = list(layout(["swa", "mamba"], 3).values())
    op = op_of([41, 42], 2, start=5)
    swa, mamba = plan_aux_transfers(aux, op, buffer_only=True)
    assert swa.keys == (41, 42) and mamba.keys == (42,)
    (swa,) = plan_aux_transfers(aux[:1], op)
    assert swa.keys is None


@pytest.mark.parametrize(("short_span_aux", "keys"), [("own_pages", (41,)), ("none", None)])
def test_the_short_span_key_picks_the_release_s_swa_transfer(
    short_span_aux: str, keys: tuple[int, ...] | None
) -> None:
    """0.5.19's buffer_only mode asks for a short mid-tree span's own SWA pages; 0.5.20 on ask
    for nothing, which fails the hybrid check (`prefetch.short_span_aux`)."""
    doc = make_doc(**{"prefetch.short_span_aux": short_span_aux})
    prefetcher = build_model(build_scenario(doc)).prefetcher
    op = op_of([41], 0, start=5)
    op.reported_pages = 1
    assert prefetcher.stage(op)
    by_pool = {t.pool: t.keys for t in op.aux}
    assert by_pool["swa"] == keys
