"""Failure kinds and which of them loop: torn objects and what a failed read does, failed writes
that leave a torn object, transient reads, evictions between exists and get, partial objects
across tensor-parallel ranks (docs/failures.md). Each case is small and built by hand, or a
shipped scenario of scenarios/failures/ cut to a few minutes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.engine.runner import run
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.scenario.loading import load_scenario

FAILURES = Path(__file__).resolve().parents[1] / "scenarios" / "failures"


def torn_pool(
    *,
    failed_read: str = "keep",
    dedup: bool = True,
    torn: float = 0.0,
    put_fail: float = 0.0,
    failed_put_torn: bool = False,
    ranks: int = 1,
) -> StoragePool:
    return StoragePool(
        name="swa",
        object_bytes=10,
        capacity_objects=None,
        get_fail_prob=0.0,
        put_fail_prob=put_fail,
        faults=FaultStreams.seeded(0),
        write_dedup=dedup,
        torn_put_prob=torn,
        failed_read=failed_read,
        failed_put_torn=failed_put_torn,
        ranks=ranks,
    )


def test_a_torn_object_exists_fails_every_read_and_a_skipping_set_keeps_it() -> None:
    """Behind a backend whose `set` skips stored keys, a torn object is reported, unreadable
    and never replaced: reading it again and writing it again change nothing."""
    pool = torn_pool(torn=1.0)
    assert pool.put([7], 0.0) == [True]
    pool.torn_put_prob = 0.0
    for _ in range(3):
        assert pool.exists(7, 0.0)
        assert pool.get([7]) == 0
        assert pool.put([7], 0.0) == [True]
    assert (pool.torn_puts, pool.torn_reads) == (1, 3)
    assert 7 in pool and pool.last_read_failed


def test_a_backend_that_writes_every_key_replaces_a_torn_object() -> None:
    pool = torn_pool(torn=1.0, dedup=False)
    pool.put([7], 0.0)
    assert pool.get([7]) == 0
    pool.torn_put_prob = 0.0
    assert pool.put([7], 0.0) == [True]
    assert pool.get([7]) == 1


def test_delete_on_failed_read_removes_the_object_so_exists_stops_reporting_it() -> None:
    pool = torn_pool(torn=1.0, failed_read="delete")
    pool.put([7, 8], 0.0)
    assert pool.get([7, 8]) == 0
    assert not pool.exists(7, 0.0) and pool.exists(8, 0.0)
    pool.torn_put_prob = 0.0
    assert pool.put([7], 0.0) == [True]
    assert pool.get([7]) == 1


def test_a_failed_put_leaves_a_torn_object_only_where_writes_go_to_the_keys_path() -> None:
    in_place = torn_pool(put_fail=1.0, failed_put_torn=True)
    assert in_place.put([7], 0.0) == [False]
    assert in_place.exists(7, 0.0) and in_place.get([7]) == 0
    assert in_place.put([7], 0.0) == [True]  # skipped: "already exists"
    assert in_place.get([7]) == 0
    via_temporary = torn_pool(put_fail=1.0)
    assert via_temporary.put([7], 0.0) == [False]
    assert not via_temporary.exists(7, 0.0)


def test_one_torn_shard_makes_the_whole_page_unreadable() -> None:
    """Every rank reads its own shard and the ranks take the minimum (tensor parallelism)."""
    pool = torn_pool(ranks=4, torn=0.3)
    pool.put(list(range(40)), 0.0)
    torn_keys = [k for k in range(40) if pool.get([k]) == 0]
    assert pool.torn_puts == len(torn_keys)
    assert 0 < len(torn_keys) < 40


def test_no_torn_draw_is_taken_when_nothing_can_tear() -> None:
    """A pool without torn objects draws exactly what it drew before they existed."""
    plain = StoragePool("swa", 10, None, 0.1, 0.1, FaultStreams.seeded(3))
    torn_free = torn_pool(put_fail=0.1)
    torn_free.get_fail_prob = 0.1
    torn_free.faults = FaultStreams.seeded(3)
    keys = list(range(50))
    assert plain.put(keys, 0.0) == torn_free.put(keys, 0.0)
    assert plain.get(keys) == torn_free.get(keys)


def shipped(name: str, **overrides: Any) -> dict[str, Any]:
    """Summary of a scenario of scenarios/failures/, five minutes long, with `--set` style
    overrides (profiles re-derived)."""
    changes = {"duration_s": 300.0, "warmup_s": 30.0, **overrides}
    return run(load_scenario(FAILURES / f"{name}.yaml", changes)).summary


@pytest.mark.parametrize(
    ("name", "release"), [("torn_file", "0.5.21"), ("torn_file_in_place", "0.5.19")]
)
def test_through_0_5_21_a_torn_file_ends_the_servers_storage_reads(name: str, release: str) -> None:
    """The file backend's short read raises and nothing catches it through 0.5.21: after it, no
    prefetch delivers anything, whether the file tore on its own or a failed write left it at
    the key's path. The tear comes within the first 100 s: from then on, most of the run,
    every prefetch is empty."""
    changes = {"duration_s": 300.0, "warmup_s": 30.0, "server.sglang": release}
    result = run(load_scenario(FAILURES / f"{name}.yaml", changes))
    assert result.summary["storage_io_halts"] == 1
    assert result.summary["storage_swa_torn_reads"] == 1
    prefetches = result.tables["prefetches"]
    last_delivery_s = prefetches.resolved_s[prefetches.completed_pages > 0].max()
    assert last_delivery_s < 100.0
    assert (prefetches.issued_s > last_delivery_s).mean() > 0.6


@pytest.mark.parametrize("name", ["torn_file", "torn_file_read_as_miss"])
def test_a_torn_file_read_as_a_miss_loops_and_no_rule_heals_it(name: str) -> None:
    """From 0.5.22 the controller catches the short read (the batch counts 0 pages), as PR
    #39269 would in `get` itself: the torn file stays reported, is never rewritten, and loops
    under every rule."""
    for heal in ("none", "keep_pages", "per_pool", "drop_chain", "exact"):
        summary = shipped(name, heal=heal)
        assert summary["storage_io_halts"] == 0
        assert summary["loops"] > 0 and summary["loop_length_max"] >= 3, heal
        assert summary["loops_healed"] == 0, heal


def test_behind_nixl_the_heal_closes_the_torn_object_loop() -> None:
    """nixl rewrites a key once its belief is dropped: in 0.5.19 the discard heal
    (`keep_pages`) drops it and `none` (a what-if) does not; 0.5.23's per-pool heal drops the
    short SWA transfer's beliefs. Until the node's next write replaces the torn file, a
    second request may meet it (a loop of two). Which files tear is chance: three seeds of the
    full scenario."""

    def full(seed: int, **overrides: Any) -> dict[str, Any]:
        changes = {"seed": seed, **overrides}
        return run(load_scenario(FAILURES / "torn_nixl.yaml", changes)).summary

    first = {"server.sglang": "0.5.19"}
    healed = [full(seed, heal="keep_pages", **first) for seed in (11, 12, 13)]
    unhealed = [full(seed, heal="none", **first) for seed in (11, 12, 13)]
    assert all(s["heal_rate"] == 1.0 and s["loop_length_max"] <= 2 for s in healed)
    assert min(s["heal_rate"] for s in unhealed) < 0.9
    assert max(s["loop_length_max"] for s in unhealed) >= 3
    discarded = [sum(s["prefetch_discarded"] for s in runs) for runs in (healed, unhealed)]
    assert discarded[1] > discarded[0]
    today = full(11)
    assert today["heal_rate"] == 1.0 and today["loop_length_max"] <= 2


def test_deleting_on_a_failed_read_closes_the_loop_without_a_heal_rule() -> None:
    summary = shipped("delete_on_failed_read", heal="none")
    assert summary["prefetch_discarded"] > 0
    assert summary["heal_rate"] == 1.0 and summary["loop_length_max"] == 1


def test_without_a_halt_the_same_torn_files_are_read_as_misses() -> None:
    summary = shipped("torn_file")
    assert summary["storage_io_halts"] == 0
    assert summary["storage_swa_torn_reads"] > 1
    assert summary["l3_loaded_tokens"] > 0


@pytest.mark.parametrize("name", ["write_failure", "partial_object", "lease_expiry"])
def test_what_exists_stops_reporting_never_loops(name: str) -> None:
    """A write that stored nothing, a page some ranks lack and an evicted object are not
    reported by the next hit query, so no prefetch is discarded."""
    summary = shipped(name)
    assert summary["prefetch_issued"] > 100
    assert summary["prefetch_discarded"] == 0
    evidence = {
        "write_failure": summary["write_aux_failed_objects"],
        "partial_object": summary["write_aux_failed_objects"],
        "lease_expiry": summary["storage_kv_evictions"],
    }[name]
    assert evidence > 0


def test_a_transient_read_failure_heals_on_its_own() -> None:
    summary = shipped("transient_read", heal="none")
    assert summary["prefetch_discarded"] > 0
    assert summary["heal_rate"] >= 0.9
