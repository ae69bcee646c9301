"""Tensor-parallel ranks: each rank stores its own shard of a page under its own key, and the
hit query, the reads and the completions are MIN-reduced across ranks (SGLang's file, nixl,
Mooncake and HF3FS backends keep per-rank keys; `cache_controller` all-reduces hits and
completions with MIN). A page is stored only when every rank's shard is."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ttest_ind

from sim.engine.runner import run
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.scenario.loading import load_scenario
from tests.conftest import REPO, make_scenario


def sharded(ranks: int, put_fail: float = 0.0, get_fail: float = 0.0, seed: int = 0) -> StoragePool:
    return StoragePool("kv", 10, None, get_fail, put_fail, FaultStreams.seeded(seed), ranks=ranks)


def test_a_page_is_stored_once_every_rank_holds_its_shard() -> None:
    pool = sharded(4, put_fail=0.5, seed=3)
    keys = list(range(1, 201))
    ok = pool.put(keys, 0.0)
    stored = [k for k in keys if k in pool]
    assert [k for k, good in zip(keys, ok, strict=True) if good] == stored
    assert 0 < len(stored) < len(keys)
    partial = pool._shards
    assert partial and all(0 < mask < 0b1111 for mask in partial.values())
    shards = len(stored) * 4 + sum(mask.bit_count() for mask in partial.values())
    assert pool.stored_bytes == shards * 10
    absent = [k for k in keys if k not in pool]
    assert pool.to_write(absent, 0.0) == (len(absent), 4 * len(absent) - (shards - 4 * len(stored)))
    assert pool.leading_run(keys) == next(i for i, k in enumerate(keys) if k not in pool)


def test_a_rewrite_writes_only_the_missing_shards_and_completes_the_page() -> None:
    pool = sharded(4, put_fail=0.5, seed=3)
    keys = list(range(1, 201))
    pool.put(keys, 0.0)
    pool.put_fail_prob = 0.0
    assert all(pool.put(keys, 1.0))
    assert all(k in pool for k in keys) and not pool._shards
    assert pool.stored_bytes == 200 * 4 * 10
    assert pool.page_bytes == 40


def test_a_read_fails_when_any_rank_s_read_fails() -> None:
    pool = sharded(8, get_fail=0.01, seed=1)
    keys = list(range(1, 20001))
    pool.put(keys, 0.0)
    failed = sum(pool.get([k], 0.0) == 0 for k in keys)
    assert failed / len(keys) == pytest.approx(1 - 0.99**8, abs=0.006)


def test_a_first_write_fails_with_one_minus_the_product_of_the_ranks_successes() -> None:
    pool = sharded(8, put_fail=0.01, seed=2)
    ok = pool.put(list(range(1, 20001)), 0.0)
    assert ok.count(False) / len(ok) == pytest.approx(1 - 0.99**8, abs=0.006)


def test_tensor_parallel_ranks_multiply_the_storage_traffic_not_the_device() -> None:
    """Eight ranks write eight shards of each page: the written bytes are eight times one
    rank's; what the device and the host hold is one rank's, as before."""
    one = run(make_scenario(**{"workload.requests": 80}))
    eight = run(make_scenario(**{"workload.requests": 80, "server.tp_size": 8}))
    for key in ("written_kv_pages", "prefetch_issued", "device_hit_tokens"):
        assert eight.summary[key] == one.summary[key], key
    assert eight.summary["written_bytes"] == 8 * one.summary["written_bytes"]
    assert eight.summary["storage_kv_stored_bytes"] == 8 * one.summary["storage_kv_stored_bytes"]


# ---------------------------------------------------------------------- per rank or aggregate

SWEEP = REPO / "scenarios" / "sweeps" / "tensor_parallel.yaml"
SEEDS = range(1, 9)


def discard_rates(tp_size: int, failure: str, p: float) -> list[float]:
    """The discard rate per seed of a smaller run of the sweep's scenario with `failure` (put
    or get) at `p` on both pools."""
    settings = [
        "workload.requests=1200",
        "duration_s=400",
        f"server.tp_size={tp_size}",
        *(f"storage.pools.{pool}.{failure}_fail_prob={p}" for pool in ("kv", "swa")),
    ]
    runs = [run(load_scenario(SWEEP, [f"seed={seed}", *settings])) for seed in SEEDS]
    return [r.summary["discard_rate"] for r in runs]


def test_a_read_failing_with_p_per_rank_is_one_failing_with_the_product_at_one_rank() -> None:
    """Reads are MIN-reduced: tp 8 at 0.1 % per rank discards as tp 1 at 1 - 0.999^8. Each
    page fails with the same chance either way, so the test's false alarms are its level:
    1 % (at 5 %, seeds 1 to 8 of the fault streams as they are gave p = 0.03, seeds 1 to 24
    p = 0.19)."""
    eight = discard_rates(8, "get", 0.001)
    one = discard_rates(1, "get", 1 - 0.999**8)
    assert np.mean(eight) > 0.2
    assert ttest_ind(eight, one, equal_var=False).pvalue > 0.01, "the difference's 99 % CI holds 0"


def test_writes_failing_with_p_per_rank_heal_faster_than_the_product_at_one_rank() -> None:
    """A rewrite redoes only the missing shards (each rank's backend skips the key it holds), so
    a failed page is rewritten with one rank's p, not the product: under an aux-blind `exists`
    tp 8 at 1 % per rank discards clearly less than tp 1 at 1 - 0.99^8."""
    eight = discard_rates(8, "put", 0.01)
    one = discard_rates(1, "put", 1 - 0.99**8)
    assert np.mean(eight) > 0.02
    assert np.mean(eight) < np.mean(one)
    assert ttest_ind(eight, one, equal_var=False).pvalue < 0.001
