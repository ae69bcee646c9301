"""How backends differ where it matters for loops and capacity: the eviction order of a full
pool (LRU, FIFO, Mooncake's leases, its high watermark and batch evictions), whether a write of
a stored key is skipped, and what SGLang's `direct` host io costs per copy."""

from __future__ import annotations

import pytest

from sim.engine.runner import run
from sim.model.build import Timing
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.model.storage import Storage
from sim.scenario.loading import build_scenario
from tests.conftest import TINY_SWEEP, make_doc
from tests.model_helpers import layout


def pool(eviction: str = "lru", capacity: int | None = 3, **knobs: object) -> StoragePool:
    return StoragePool(
        "kv", 10, capacity, 0.0, 0.0, FaultStreams.seeded(0), eviction=eviction, **knobs
    )  # type: ignore[arg-type]


def kept(store: StoragePool) -> list[int]:
    return sorted(store.keys())


@pytest.mark.parametrize(
    ("eviction", "survivors"),
    [("lru", [1, 3, 4]), ("fifo", [2, 3, 4]), ("lease", [1, 3, 4])],
)
def test_a_read_refreshes_under_lru_and_lease_but_not_fifo(
    eviction: str, survivors: list[int]
) -> None:
    store = pool(eviction)
    store.put([1, 2, 3], 0.0)
    assert store.get([1]) == 1
    store.put([4], 1.0)
    assert kept(store) == survivors


@pytest.mark.parametrize(
    ("eviction", "survivors"),
    [("lru", [2, 3, 4]), ("fifo", [2, 3, 4]), ("lease", [1, 3, 4])],
)
def test_only_a_lease_is_renewed_by_an_exists_query(eviction: str, survivors: list[int]) -> None:
    """Mooncake's `ExistKey` grants a lease; the file backend's `exists` touches nothing."""
    store = pool(eviction)
    store.put([1, 2, 3], 0.0)
    storage = Storage({"kv": store}, layout({"kv": []}), 1e9, 1e9, 0.5)
    storage.touch_queried([1, 9], 0.5)
    store.put([4], 1.0)
    assert kept(store) == survivors


@pytest.mark.parametrize("eviction", ["lru", "lease"])
def test_a_skipped_rewrite_refreshes_except_under_fifo(eviction: str) -> None:
    store = pool(eviction)
    store.put([1, 2, 3], 0.0)
    store.put([1], 1.0)
    store.put([4], 2.0)
    assert kept(store) == [1, 3, 4]
    fifo = pool("fifo")
    fifo.put([1, 2, 3], 0.0)
    fifo.put([1], 1.0)
    fifo.put([4], 2.0)
    assert kept(fifo) == [2, 3, 4]


def test_a_high_watermark_evicts_a_share_of_the_objects_at_once() -> None:
    """Mooncake's master: past 90 % of capacity, evict 5 % of the objects, oldest lease first."""
    store = pool("lease", capacity=100, high_watermark=0.9, evict_ratio=0.05)
    store.put(list(range(90)), 0.0)
    assert len(store) == 90 and store.evictions == 0
    store.put([1000], 1.0)
    assert store.evictions == 5 and len(store) == 86
    assert kept(store)[:3] == [5, 6, 7]
    one_at_a_time = pool("lru", capacity=100, high_watermark=0.9)
    one_at_a_time.put(list(range(91)), 0.0)
    assert len(one_at_a_time) == 90 and one_at_a_time.evictions == 1


def test_without_dedup_a_stored_key_is_written_again_and_may_fail() -> None:
    dedup = pool(capacity=None)
    dedup.put([1, 2], 0.0)
    assert dedup.to_write([1, 2, 3], 0.0) == (1, 1)
    rewrite = StoragePool("kv", 10, None, 0.0, 0.0, FaultStreams.seeded(0), write_dedup=False)
    assert rewrite.put([1, 2], 0.0) == [True, True]
    assert rewrite.to_write([1, 2, 3], 0.0) == (3, 3)
    rewrite.put_fail_prob = 1.0
    assert rewrite.put([1, 3], 1.0) == [False, False]
    assert kept(rewrite) == [1, 2]
    dedup.put_fail_prob = 1.0
    assert dedup.put([1], 1.0) == [True]


def test_direct_io_pays_one_copy_per_layer_per_page() -> None:
    kernel = Timing(20000.0, 20.0, 50e9, 100_000)
    direct = Timing(
        20000.0,
        20.0,
        50e9,
        100_000,
        copy_overhead_s=4e-6,
        copies={"kv": 36, "swa": 36},
        load_copies_per_page=72,
    )
    assert kernel.prefill_s(0, 10) == pytest.approx(10 * 100_000 / 50e9)
    assert direct.prefill_s(0, 10) == pytest.approx(10 * 100_000 / 50e9 + 10 * 72 * 4e-6)


def test_the_nixl_backend_writes_the_rewrites_that_the_file_backend_skips() -> None:
    """A heal drops beliefs of objects still stored; the rewrite costs bandwidth only where
    the backend does not check before writing."""
    doc = make_doc(
        heal="drop_chain",
        **{**TINY_SWEEP, "storage.pools.swa.put_fail_prob": 0.2, "workload.requests": 400},
    )
    by_backend = {}
    for backend in ("file", "nixl"):
        doc["storage"]["backend"] = backend
        doc["storage"]["hit_query"] = "kv_only"
        by_backend[backend] = run(build_scenario(doc)).summary
    file, nixl = by_backend["file"], by_backend["nixl"]
    assert file["rewrite_pages"] > 0
    assert nixl["written_bytes"] > file["written_bytes"]
    assert nixl["staged_write_bytes"] == nixl["written_bytes"]


def test_a_caught_failed_read_counts_the_whole_call_as_missed_and_keeps_the_object() -> None:
    """`miss_batch` (the file backend from 0.5.22, whose cache controller catches the read
    error): a batch whose third page fails serves none of it to the reader, the object stays
    and `exists` still reports it; the pages read before the failure were still read."""
    store = pool(capacity=None, failed_read="miss_batch", torn_put_prob=0.0)
    store.put([1, 2, 3, 4], 0.0)
    store._torn.add(3)
    served = store.get([1, 2, 3, 4])
    assert served == 2 and store.last_read_failed
    assert store.credited(served) == 0
    assert store.exists(3, 0.0) and store.get_hits == 3
    assert store.get([1, 2]) == 2 and store.credited(2) == 2
    keep = pool(capacity=None, failed_read="keep")
    keep.put([1, 2, 3], 0.0)
    keep._torn.add(3)
    assert keep.credited(keep.get([1, 2, 3])) == 2


def test_a_caught_failed_read_never_halts_the_servers_storage_reads() -> None:
    """The torn-file scenario under `miss_batch`: no halt, later prefetches still load, and the
    torn object keeps being reported and read (it is never removed)."""
    from sim.scenario.loading import load_scenario
    from tests.test_failure_kinds import FAILURES

    changes = {"duration_s": 300.0, "warmup_s": 30.0, "storage.failed_read": "miss_batch"}
    summary = run(load_scenario(FAILURES / "torn_file.yaml", changes)).summary
    assert summary["storage_io_halts"] == 0
    assert summary["storage_swa_torn_reads"] > 1
    assert summary["l3_loaded_tokens"] > 0
