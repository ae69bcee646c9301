"""Determinism: the same scenario and seed give the same results, whoever runs them.

A run directory's summary.json (all but the timing `wall_s`), every Parquet table and the
resolved config must be identical for two runs in one process, for runs in fresh interpreters
with different PYTHONHASHSEED values (set and dict iteration orders of strings change with it),
and a sweep's runs.parquet must not depend on the executor (serial, a process pool, a dask
cluster). The scenarios have randomness on every stream: fault draws on two storage pools,
backend evictions, Poisson arrivals, Zipf prefixes, multi-turn think times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from sim.engine.metrics import WALL_CLOCK_KEYS
from sim.engine.runner import run
from sim.scenario.loading import build_scenario
from tests.conftest import invoke, make_doc, ok

SMALL: dict[str, Any] = {
    "workload.requests": 200,
    "duration_s": 60,
    "device.kv_pages": 400,
    "device.swa_pages": 400,
    "host.pages": 800,
}
FAULTS: dict[str, Any] = {
    "storage.pools.swa.put_fail_prob": 0.1,
    "storage.pools.kv.get_fail_prob": 0.02,
    "storage.pools.kv.evict_rate_per_s": 0.5,
}
MULTITURN: dict[str, Any] = {
    "duration_s": 120,
    "device.kv_pages": 300,
    "device.swa_pages": 300,
    "host.pages": 600,
    "host.mode": "cache",
    "storage.pools.kv.get_fail_prob": 0.05,
    "workload": {
        "kind": "multiturn",
        "sessions": 16,
        "turns": 4,
        "first_turn_tokens": 1024,
        "turn_tokens": 256,
        "output_tokens": 32,
        "think_time_s": 2,
        "arrival_rate_per_s": 1,
    },
}
SCENARIOS: dict[str, dict[str, Any]] = {
    "faults": make_doc(**SMALL, **FAULTS),
    "multiturn": make_doc(**MULTITURN),
}
TABLES = {"requests", "prefetches", "writes", "timeseries", "instances", "storage_trace"}
HASH_SEEDS = ("0", "12345")


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def summary_without_wall(run_dir: Path) -> str:
    """summary.json minus wall_s, as canonical JSON text (so NaN equals NaN)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert isinstance(summary.pop("wall_s"), float)
    return json.dumps(summary, sort_keys=True)


def tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    return {path.stem: pd.read_parquet(path) for path in sorted(run_dir.glob("*.parquet"))}


def assert_same_run(a: Path, b: Path) -> None:
    assert summary_without_wall(a) == summary_without_wall(b)
    assert (a / "config.resolved.yaml").read_text() == (b / "config.resolved.yaml").read_text()
    ta, tb = tables(a), tables(b)
    assert set(ta) == set(tb) == TABLES
    for name in sorted(ta):
        assert len(ta[name]) > 0, f"{name} is empty: nothing to compare"
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True, obj=name)


def sim_process(*args: str, cwd: Path, hash_seed: str) -> subprocess.Popen[str]:
    """`python -m sim ...` in a fresh interpreter with this PYTHONHASHSEED."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        [sys.executable, "-m", "sim", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> None:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (proc.args, stdout[-2000:], stderr[-2000:])


# --- single runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_two_runs_in_one_process_are_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
):
    monkeypatch.chdir(tmp_path)
    scenario = write_yaml(tmp_path / f"{name}.yaml", SCENARIOS[name])
    for out in ("a", "b"):
        ok(invoke("run", str(scenario), "--out", out, "--storage-trace"))
    assert_same_run(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("name", SCENARIOS)
def test_recording_the_storage_trace_changes_nothing_else(name: str) -> None:
    """The access log is an observer: with backend evictions on an unbounded KV pool (the
    faults scenario), a run with and without it must pick the same victims."""
    scenario = build_scenario(SCENARIOS[name], f"{name}.yaml")
    plain, traced = run(scenario), run(scenario, storage_trace=True)
    assert plain.summary.keys() == traced.summary.keys()
    for key in plain.summary.keys() - WALL_CLOCK_KEYS:
        assert plain.summary[key] == traced.summary[key], key
    for table, frame in plain.tables.items():
        pd.testing.assert_frame_equal(frame, traced.tables[table], obj=table)


@pytest.mark.parametrize("name", SCENARIOS)
def test_runs_under_different_hash_seeds_are_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
):
    scenario = write_yaml(tmp_path / f"{name}.yaml", SCENARIOS[name])
    procs = [
        sim_process(
            "run",
            str(scenario),
            "--out",
            f"hash-{seed}",
            "--storage-trace",
            cwd=tmp_path,
            hash_seed=seed,
        )
        for seed in HASH_SEEDS
    ]
    for proc in procs:
        finish(proc)
    first, second = (tmp_path / f"hash-{seed}" for seed in HASH_SEEDS)
    assert_same_run(first, second)
    # and the same as this process (whatever its own hash seed is)
    monkeypatch.chdir(tmp_path)
    ok(invoke("run", str(scenario), "--out", "here", "--storage-trace"))
    assert_same_run(first, tmp_path / "here")


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_different_seed_gives_a_different_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
):
    """The comparisons above would pass vacuously if the seed did not reach the random streams."""
    monkeypatch.chdir(tmp_path)
    scenario = write_yaml(tmp_path / f"{name}.yaml", SCENARIOS[name])
    ok(invoke("run", str(scenario), "--out", "a"))
    ok(invoke("run", str(scenario), "--out", "b", "--seed", "2"))
    assert summary_without_wall(tmp_path / "a") != summary_without_wall(tmp_path / "b")


def test_the_faults_fire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fault scenario draws from its fault streams: it differs from the fault-free one."""
    monkeypatch.chdir(tmp_path)
    faulty = write_yaml(tmp_path / "faults.yaml", SCENARIOS["faults"])
    clean = write_yaml(tmp_path / "clean.yaml", make_doc(**SMALL))
    ok(invoke("run", str(faulty), "--out", "faulty"))
    ok(invoke("run", str(clean), "--out", "clean"))
    with_faults = json.loads((tmp_path / "faulty" / "summary.json").read_text())
    without = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert with_faults["write_aux_failed_objects"] > 0 == without["write_aux_failed_objects"]
    assert with_faults["storage_kv_evictions"] > 0 == without["storage_kv_evictions"]
    assert with_faults["loops"] > without["loops"]


# --- sweeps across executors ---------------------------------------------------------------------

SWEEP_GRID = {"storage.pools.swa.capacity_gb": [0.05, 0.2]}


def runs_without_wall(sweep_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(sweep_dir / "runs.parquet").drop(columns=["wall_s"])


def task_records(sweep_dir: Path) -> dict[str, Any]:
    """tasks/*.json by name without wall_s: summaries and loop lengths."""
    records = {}
    for path in sorted((sweep_dir / "tasks").glob("*.json")):
        record = json.loads(path.read_text())
        assert record["error"] is None, record["error"]
        record["summary"].pop("wall_s")
        records[path.name] = json.dumps(record, sort_keys=True)
    return records


def test_sweep_executors_give_identical_runs(tmp_path: Path):
    doc = make_doc(**{**SMALL, **FAULTS, "workload.requests": 120, "workload.prefixes": 60})
    doc["sweep"] = {"seeds": 2, "grid": SWEEP_GRID}
    scenario = write_yaml(tmp_path / "sweep.yaml", doc)
    serial = tmp_path / "serial"
    ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(serial)))
    for executor, hash_seed in (("process", "1"), ("dask", "2")):
        proc = sim_process(
            "sweep",
            str(scenario),
            "--executor",
            executor,
            "--workers",
            "2",
            "--out",
            executor,
            cwd=tmp_path,
            hash_seed=hash_seed,
        )
        finish(proc)
    expected = runs_without_wall(serial)
    assert len(expected) == 4 and expected["error"].isna().all()
    assert list(expected["point"]) == [0, 0, 1, 1] and list(expected["seed_index"]) == [0, 1] * 2
    assert expected["loops"].nunique() > 1, "grid points and seeds should differ"
    for executor in ("process", "dask"):
        out = tmp_path / executor
        meta = json.loads((out / "sweep.json").read_text())
        assert (meta["executor"], meta["workers"], meta["computed"], meta["failed"]) == (
            executor,
            2,
            4,
            [],
        )
        pd.testing.assert_frame_equal(runs_without_wall(out), expected, check_exact=True)
        assert task_records(out) == task_records(serial)
