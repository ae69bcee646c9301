"""The write path and prefetch resolution as plain model objects, driven without SimPy."""

from __future__ import annotations

import heapq
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.heal import RULES, DiscardView
from sim.model.backup import BackupIntent, WritePath
from sim.model.device import Resource
from sim.model.existence import ExistenceCache
from sim.model.host import HostPool
from sim.model.loops import LoopTracker
from sim.model.node import Node
from sim.model.prefetch import (
    PREFETCH_POLICIES,
    Outcome,
    Prefetcher,
    PrefetchOp,
    PrefetchTimeout,
    RetryBudget,
)
from sim.model.radix import RadixTree
from sim.model.storage import Storage
from tests.model_helpers import make_storage, make_tree

# ---------------------------------------------------------------- the write path


def test_offer_stage_acknowledge_stores_the_node_and_believes_its_pages() -> None:
    storage = make_storage({"kv": [], "swa": []}, window_pages=2)
    tree = make_tree(kv=100, swa=100)
    path = WritePath(ExistenceCache(1000), storage, tree.root, buffer_only=True)
    node, _ = tree.insert([1, 2, 3], 0.0)
    intent = path.offer(node, 0.0)
    assert isinstance(intent, BackupIntent) and intent.pages == (1, 2, 3)
    assert path.offer(node, 0.1) is None, "already queued"
    assert 2 in path.inflight
    staged = path.stage(intent)
    assert staged is not None and staged.aux_keys == {"swa": (2, 3)}
    assert staged.nbytes == 3 * 1 + 2 * 1
    ack = path.acknowledge(staged, 1.0)
    assert ack.kv_ok == [True] * 3 and ack.aux_ok == {"swa": [True, True]}
    assert all(key in storage.kv for key in (1, 2, 3)) and 1 not in storage.pools["swa"]
    assert path.existence.covers_all([1, 2, 3]) and len(path.inflight) == 0
    assert path.offer(node, 2.0) == "skip_covered"


def test_a_heal_dropped_page_counts_as_rewritten_when_written_again() -> None:
    storage = make_storage({"kv": [], "swa": []})
    tree = make_tree(kv=100, swa=100)
    path = WritePath(ExistenceCache(1000), storage, tree.root, buffer_only=True)
    node, _ = tree.insert([1, 2, 3], 0.0)
    first = path.offer(node, 0.0)
    assert isinstance(first, BackupIntent)
    path.acknowledge(path.stage(first), 0.5)  # type: ignore[arg-type]
    assert path.forget([3, 9]) == [3], "only believed keys are dropped"
    assert path.heal_dropped == {3}
    again = path.offer(node, 1.0)
    assert isinstance(again, BackupIntent)
    ack = path.acknowledge(path.stage(again), 1.5)  # type: ignore[arg-type]
    assert ack.rewrite_pages == 1 and path.heal_dropped == set()


def test_a_gated_write_of_a_node_that_left_the_device_is_stale() -> None:
    storage = make_storage({"kv": []})
    tree = make_tree(kv=3)
    path = WritePath(ExistenceCache(1000), storage, tree.root, buffer_only=True)
    node, _ = tree.insert([1, 2, 3], 0.0)
    intent = path.offer(node, 0.0)
    assert isinstance(intent, BackupIntent)
    assert tree.reserve(3, 0), "evicts the unlocked leaf"
    assert not node.alive
    assert path.stage(intent) is None
    assert len(path.inflight) == 0 and node.nid not in path.inflight_nodes


def test_candidates_are_new_unbacked_nodes_or_the_whole_path() -> None:
    storage = make_storage({"kv": []})
    tree = make_tree()
    path = WritePath(ExistenceCache(10), storage, tree.root, buffer_only=True)
    tree.insert([1, 2], 0.0)
    leaf, new = tree.insert([1, 2, 3, 4], 1.0, backed_up=True)
    assert path.candidates(new, None) == []
    assert [n.pages for n in path.candidates(new, tree.path(leaf))] == [[1, 2], [3, 4]]


# ---------------------------------------------------------------- prefetch resolution


def prefetcher(
    storage: Storage,
    *,
    policy: str = "timeout",
    host_pages: int = 1000,
    heal: str = "keep_pages",
    per_pool: bool = False,
    hit_query: str = "kv_only",
) -> Prefetcher:
    """A prefetcher over `storage` (a kv_only query unless said); `per_pool` keeps SWA beliefs
    too."""
    aux_beliefs = {"swa": ExistenceCache(1000)} if per_pool else None
    path = WritePath(
        ExistenceCache(1000), storage, make_tree().root, buffer_only=True, aux_beliefs=aux_beliefs
    )
    rule = RULES[heal]
    return Prefetcher(
        storage=storage,
        host=HostPool(host_pages),
        write_path=path,
        loops=LoopTracker(),
        heal=lambda op: rule(DiscardView(op, 64, storage)),
        hit_query=hit_query,
        policy=policy,
        timeout=PrefetchTimeout(1.0, 0.25, 64),
        threshold_pages=4,
        retry=RetryBudget(max_attempts=2, interval_passes=8),
    )


SPAN = tuple(range(1, 11))


def read_everything(p: Prefetcher, op: PrefetchOp) -> None:
    for batch in p.kv_batches(op):
        if not p.read_kv(op, batch, 0.0):
            break
    for transfer in p.aux_reads(op):
        p.read_aux(op, transfer, 0.0)
    op.done = True


def test_a_short_span_gets_no_prefetch_and_a_low_hit_is_revoked() -> None:
    p = prefetcher(make_storage({"kv": SPAN[:3], "swa": SPAN}))
    assert p.plan(1, 0, SPAN[:3], 0.0) is None
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None
    assert p.query(op, 0.0) == Outcome.REVOKED and not op.issued


def test_staging_is_declined_when_the_load_share_is_full() -> None:
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN}), host_pages=10)
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) == Outcome.DECLINED


def test_a_complete_read_succeeds_and_believes_what_it_fetched() -> None:
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN}))
    op = p.plan(1, 2, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    assert p.host.prefetch_pages == 10
    read_everything(p, op)
    resolution = p.resolve(op, 1.0)
    assert (resolution.outcome, resolution.loaded_end) == ("success", 12)
    assert p.write_path.existence.covers_all(SPAN) and p.host.prefetch_pages == 0
    assert p.read_bytes(op) == 10 + 2


def test_a_missing_swa_tail_discards_the_whole_prefetch_and_heals() -> None:
    """kv_only reports all 10 pages; SWA lacks the tail at 10: discard, keep_pages keeps 8."""
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN[:8]}))
    p.write_path.believe(SPAN)  # the write acknowledgements of the chain, earlier
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    read_everything(p, op)
    resolution = p.resolve(op, 1.0)
    assert resolution.outcome == "discarded" and resolution.loaded_end == 0
    assert list(resolution.dropped) == [9, 10]
    assert p.write_path.heal_dropped == {9, 10}
    assert [loop.endpoint_key for loop in p.loops.all_loops()] == [10]


def test_a_discarded_prefetch_adds_no_belief() -> None:
    """Fetched pages become beliefs only when the prefetch is accepted."""
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN[:8]}))
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    read_everything(p, op)
    assert p.resolve(op, 1.0).outcome == "discarded"
    assert len(p.write_path.existence) == 0


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("best_effort", -math.inf), ("wait_complete", math.inf), ("timeout", 5.0 + 1.0 + 2.5)],
)
def test_policies_say_when_a_prefetch_may_stop(policy: str, expected: float) -> None:
    """timeout: issued + base + 0.25 s per 1024 tokens of the hit (160 pages of 64 tokens are
    10 Ki tokens -> 2.5 s)."""
    op = PrefetchOp(1, 0, tuple(range(1, 161)), 5.0, hit_pages=160)
    assert PREFETCH_POLICIES[policy](op, PrefetchTimeout(1.0, 0.25, 64)) == expected


def test_the_timeout_before_the_hit_query_answers_is_the_base() -> None:
    op = PrefetchOp(1, 0, SPAN, 5.0)
    assert PREFETCH_POLICIES["timeout"](op, PrefetchTimeout(1.0, 0.25, 64)) == 6.0


# ---------------------------------------------------------------- per-pool beliefs


def per_pool_path(
    kv_believed: set[int], swa_believed: set[int]
) -> tuple[WritePath, RadixTree, Node]:
    storage = make_storage({"kv": [], "swa": []}, window_pages=2)
    tree = make_tree(kv=100, swa=100)
    path = WritePath(
        ExistenceCache(1000),
        storage,
        tree.root,
        buffer_only=True,
        aux_beliefs={"swa": ExistenceCache(1000)},
    )
    path.existence.add(sorted(kv_believed))
    path.aux_beliefs["swa"].add(sorted(swa_believed))
    node, _ = tree.insert([1, 2, 3, 4], 0.0)
    return path, tree, node


def test_per_pool_writes_only_the_pool_whose_keys_are_not_believed() -> None:
    path, _, node = per_pool_path({1, 2, 3, 4}, set())
    intent = path.offer(node, 0.0)
    assert isinstance(intent, BackupIntent)
    assert not intent.write_kv and intent.aux_keys == {"swa": (3, 4)}
    staged = path.stage(intent)
    assert staged is not None and staged.kv_pages == 0 and staged.aux_keys == {"swa": (3, 4)}
    path.acknowledge(staged, 1.0)
    assert path.storage.pools["swa"].leading_run([3, 4]) == 2 and 1 not in path.storage.kv
    assert path.offer(node, 2.0) == "skip_covered"


@settings(max_examples=150, deadline=None)
@given(kv=st.sets(st.integers(1, 4)), swa=st.sets(st.integers(1, 4)))
def test_per_pool_never_skips_a_pool_whose_objects_are_not_believed(
    kv: set[int], swa: set[int]
) -> None:
    path, _, node = per_pool_path(kv, swa)
    intent = path.offer(node, 0.0)
    kv_covered, swa_covered = kv >= {1, 2, 3, 4}, swa >= {3, 4}
    if kv_covered and swa_covered:
        assert intent == "skip_covered"
        return
    assert isinstance(intent, BackupIntent)
    assert intent.write_kv == (not kv_covered)
    assert intent.aux_keys == ({} if swa_covered else {"swa": (3, 4)})


@pytest.mark.parametrize(("heal", "dropped"), [("per_pool", [9, 10]), ("none", [])])
def test_per_pool_transfer_heal_drops_only_the_short_pool_s_beliefs(
    heal: str, dropped: list[int]
) -> None:
    """`per_pool`: a short SWA transfer drops the SWA beliefs beyond what it delivered and KV
    stays believed; `none` drops nothing in any pool."""
    storage = make_storage({"kv": SPAN, "swa": SPAN[:8]})
    p = prefetcher(storage, heal=heal, per_pool=True)
    path, existence = p.write_path, p.write_path.existence
    path.believe(SPAN, {"swa": SPAN})
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    read_everything(p, op)
    resolution = p.resolve(op, 1.0)
    assert resolution.outcome == "discarded" and sorted(resolution.dropped) == dropped
    assert existence.covers_all(SPAN)
    assert [key for key in (9, 10) if key not in path.aux_beliefs["swa"]] == dropped
    assert path.aux_heal_dropped["swa"] == set(dropped)
    assert path.pending_rewrites() == len(dropped)


def test_per_pool_a_stopped_prefetch_is_no_evidence_of_a_missing_object() -> None:
    """Terminated after one batch: KV short and no aux read, but nothing is missing, so the
    transfer heals drop nothing (the heal rule here drops nothing either)."""
    p = prefetcher(
        make_storage({"kv": SPAN, "swa": SPAN}), policy="best_effort", heal="none", per_pool=True
    )
    path = p.write_path
    path.believe(SPAN, {"swa": SPAN})
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    op.terminated = True
    resolution = p.resolve(op, 0.5)
    assert resolution.outcome == "discarded" and list(resolution.dropped) == []
    assert path.pending_rewrites() == 0


def test_a_query_answered_after_its_op_was_stopped_still_heals() -> None:
    """The policy stopped the op while `exists` was in flight: the attempt is cancelled, stages
    nothing, and its answer still drops the beliefs past the hit (SGLang's drain flushes the
    absent-hash feedback of a gone or terminated operation)."""
    p = prefetcher(make_storage({"kv": SPAN[:6]}), policy="best_effort")
    p.write_path.believe(SPAN)
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None
    op.terminated = True
    assert p.query(op, 0.0) == Outcome.CANCELLED
    assert not op.issued and p.host.prefetch_pages == 0
    assert p.hit_query_dropped_beliefs == 4
    assert p.write_path.existence.covers_all(SPAN[:6])
    assert not any(key in p.write_path.existence for key in SPAN[6:])


@pytest.mark.parametrize("outcome", [Outcome.CANCELLED, Outcome.DECLINED, Outcome.REVOKED])
def test_an_attempt_its_policy_stopped_before_staging_is_marked_for_a_retry(
    outcome: Outcome,
) -> None:
    """`check_prefetch_progress` marks the rid of a stopped operation with no host indices;
    a discard, which had staging, arms none."""
    p = prefetcher(make_storage({"kv": SPAN}), policy="best_effort")
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None
    op.terminated = True
    assert p.retries_miss(op, outcome, attempts=0)
    assert not p.retries_miss(op, outcome, attempts=2), "max_attempts 2"
    assert not p.retries_miss(op, Outcome.DISCARDED, attempts=0)


def test_per_pool_the_query_drops_aux_beliefs_past_the_pool_boundary_over_the_whole_chain() -> None:
    """KV is stored to page 8, SWA's tail only at endpoint 4: SWA beliefs go from 5 on, the
    ones past the KV hit too (`TrailingWindowPolicy.heal_from_query` on the whole chain)."""
    storage = make_storage({"kv": SPAN[:8], "swa": SPAN[:4]})
    p = prefetcher(storage, heal="none", per_pool=True, hit_query="min_of_pools")
    path = p.write_path
    path.believe(SPAN, {"swa": SPAN})
    op = p.plan(1, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) is None
    assert op.reported_pages == 4
    assert sorted(k for k in SPAN if k in path.aux_beliefs["swa"]) == [1, 2, 3, 4]
    assert sorted(k for k in SPAN if k in path.existence) == list(SPAN[:8])


def test_a_fill_settles_a_heal_s_drop() -> None:
    """A heal dropped page 3; a later accepted prefetch fetched it: no rewrite is pending."""
    storage = make_storage({"kv": SPAN})
    path = WritePath(ExistenceCache(100), storage, make_tree().root, buffer_only=True)
    path.believe(SPAN)
    assert path.forget([3]) == [3] and path.pending_rewrites() == 1
    path.believe([1, 2, 3])
    assert path.pending_rewrites() == 0 and 3 in path.existence


def test_an_aux_only_write_stages_its_tail_not_the_node() -> None:
    path, _, node = per_pool_path({1, 2, 3, 4}, set())
    intent = path.offer(node, 0.0)
    assert isinstance(intent, BackupIntent)
    staged = path.stage(intent)
    assert staged is not None and staged.staging_pages == 2 and staged.nbytes == 2


def test_only_an_attempt_without_staging_is_retried_and_only_within_the_budget() -> None:
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN}))
    op = PrefetchOp(0, 0, SPAN, 0.0, reported_pages=10)
    assert [p.retries_miss(op, Outcome.REVOKED, n) for n in range(3)] == [True, True, False]
    assert [p.retries_miss(op, Outcome.DECLINED, n) for n in range(3)] == [True, True, False]
    for outcome in (Outcome.SUCCESS, Outcome.DISCARDED):
        assert not p.retries_miss(op, outcome, 0)
    too_big = PrefetchOp(0, 0, SPAN, 0.0, reported_pages=1000)
    assert not p.retries_miss(too_big, Outcome.DECLINED, 0)
    for off in (
        RetryBudget(max_attempts=2, interval_passes=0),
        RetryBudget(max_attempts=2, interval_passes=8, interval_s=0.0),
        RetryBudget(max_attempts=0, interval_passes=8),
    ):
        p.retry = off
        assert not p.retries_miss(op, Outcome.REVOKED, 0)


def test_a_rate_limited_hit_parks_in_buffer_mode_unless_it_could_never_fit() -> None:
    p = prefetcher(make_storage({"kv": SPAN, "swa": SPAN}), host_pages=10)
    op = p.plan(0, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0) == Outcome.DECLINED
    assert op.reported_pages == 10 and not op.issued and not p.may_park(op)
    p = prefetcher(make_storage({"kv": SPAN[:8], "swa": SPAN}), host_pages=10)
    op = p.plan(0, 0, SPAN, 0.0)
    assert op is not None and p.query(op, 0.0, queue_empty=False) == "declined"
    assert p.may_park(op) and p.stage(op) and op.hit_pages == 8


class _CachedCopy:
    """A host copy in the tree, as `Resource` sees it."""

    def __init__(self, nid: int, last_access_s: float) -> None:
        self.nid, self.last_access_s = nid, last_access_s


def test_cache_mode_prefetch_evicts_host_copies_to_fit() -> None:
    """In cache mode a prefetch that does not fit evicts host-only copies, least recently used
    first (SGLang's evict_host), instead of being declined while the host is full of copies."""
    evicted: list[int] = []

    def evict(node: Any) -> None:
        evicted.append(node.nid)
        copies.used -= 4

    copies = Resource("host", 10, evictable=lambda node: True, evict=evict)
    copies.used = 8
    for nid, seen_s in ((1, 5.0), (0, 2.0)):
        heapq.heappush(copies.heap, (seen_s, nid, _CachedCopy(nid, seen_s)))
    host = HostPool(10, cached_pages=lambda: copies.used, cache=copies)
    assert host.alloc_prefetch(6)
    assert evicted == [0] and host.free_pages == 0
    assert not host.alloc_prefetch(4), "beyond the load share nothing is evicted"
    assert evicted == [0]
    buffer_only = HostPool(10, cached_pages=lambda: 8)
    assert not buffer_only.alloc_prefetch(6)
