"""Oracle: a finite storage pool's LRU hits and misses equal libCacheSim's LRU, exactly.

The simulator exports every access that touches a pool's LRU (reads of stored objects, and
successful writes; a read of a missing object does not insert in a storage backend, so it is not
an access of the cache). libCacheSim replays that CSV with an LRU of the same capacity in bytes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import libcachesim as lcs
import pytest
import yaml

from tests.conftest import make_doc

POOLS = ("kv", "swa")


def replay_lru(csv_path: Path, cache_bytes: int) -> tuple[int, int]:
    """(hits, misses) of libCacheSim's LRU replaying our CSV."""
    params = lcs.ReaderInitParam()
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    params.delimiter = ","
    params.has_header = params.has_header_set = True
    params.obj_id_is_num = params.obj_id_is_num_set = True
    reader = lcs.TraceReader(str(csv_path), lcs.TraceType.CSV_TRACE, params)
    requests = len(csv_path.read_text().splitlines()) - 1
    miss_ratio, _ = lcs.LRU(cache_size=cache_bytes).process_trace(reader)
    misses = round(miss_ratio * requests)
    return requests - misses, misses


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run with finite KV and SWA pools, faults on, and the storage trace recorded."""
    base = tmp_path_factory.mktemp("lcs")
    doc = make_doc(
        **{
            "duration_s": 300,
            "device.kv_pages": 600,
            "device.swa_pages": 600,
            "storage.pools.kv": {"capacity_gb": 0.8, "get_fail_prob": 0.01, "put_fail_prob": 0.02},
            "storage.pools.swa": {"capacity_gb": 0.08, "put_fail_prob": 0.05},
            "workload.prefixes": 60,
            "workload.requests": 900,
        }
    )
    scenario = base / "lru.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    out = base / "run"
    cmd = [sys.executable, "-m", "sim", "run", str(scenario), "--out", str(out), "--storage-trace"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


@pytest.mark.parametrize("pool", POOLS)
def test_pool_hits_and_misses_equal_libcachesim_lru(run_dir: Path, pool: str) -> None:
    csv_path = run_dir / f"storage_trace_{pool}.csv"
    subprocess.run(
        [sys.executable, "-m", "sim", "export-trace", str(run_dir), "--pool", pool],
        check=True,
        capture_output=True,
    )
    summary = yaml.safe_load((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    page = config["model"]["page_size"]
    object_bytes = page * config["model"][pool]["bytes_per_token"]
    capacity_objects = int(config["storage"]["pools"][pool]["capacity_gb"] * 1e9 // object_bytes)
    sim_hits = summary[f"storage_{pool}_get_hits"] + summary[f"storage_{pool}_put_hits"]
    sim_misses = summary[f"storage_{pool}_put_inserts"]
    assert summary[f"storage_{pool}_evictions"] > 100, "the pool must actually evict"
    assert sim_hits > 100 and sim_misses > 100
    assert replay_lru(csv_path, capacity_objects * object_bytes) == (sim_hits, sim_misses)


def test_export_trace_refuses_an_unknown_pool(run_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sim", "export-trace", str(run_dir), "--pool", "mamba"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--pool" in result.stderr and "mamba" in result.stderr
