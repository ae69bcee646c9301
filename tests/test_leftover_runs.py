"""Leftover runs never mixed into an answer: a sweep, capacity search or plan resumes only the
runs its own scenario and arguments make, and refuses (exit 2, naming what differs) a directory
holding others (sim.studies.resume, docs/reliability.md, "Resuming a directory")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from click.testing import Result

from sim.results.reading import task_records
from tests.conftest import TINY_SWEEP, invoke, make_doc, ok, tiny_capacity

SMALL = {**TINY_SWEEP, "workload.requests": 40, "duration_s": 30}
SWA = "storage.pools.swa.capacity_gb"


def _scenario(tmp_path: Path, **overrides: Any) -> Path:
    doc = make_doc(**{**SMALL, **overrides})
    doc["sweep"] = {"seeds": 2, "grid": {"heal": ["none", "keep_pages"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def _stamps(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("*.json")}


def test_a_capacity_rerun_with_fewer_seeds_is_refused_naming_them(tmp_path: Path) -> None:
    path, out = _scenario(tmp_path), tmp_path / "cap"
    ok(tiny_capacity(path, out, seeds=3))
    before, stamps = _files(out), _stamps(out)
    result = tiny_capacity(path, out, seeds=2)
    assert result.exit_code == 2, result.output
    assert "--seeds: 2 here, 3 in the directory" in result.output
    assert "Traceback" not in result.output
    assert _files(out) == before and _stamps(out) == stamps, "nothing replaced"
    forced = ok(tiny_capacity(path, out, "--force", seeds=2))  # --force replaces, at the end
    assert "n=2" in forced.output and len(task_records(out)) == 2
    stamps = _stamps(out)
    more = ok(tiny_capacity(path, out, seeds=3))  # more seeds only add runs: resumed, as a sweep
    assert "n=3" in more.output and len(task_records(out)) == 3
    assert all(_stamps(out)[name] == stamp for name, stamp in stamps.items()), "reused"


def test_a_capacity_rerun_with_another_set_is_refused_naming_it(tmp_path: Path) -> None:
    path, out = _scenario(tmp_path), tmp_path / "cap"
    ok(tiny_capacity(path, out))
    before = _files(out)
    result = tiny_capacity(path, out, "--set", "workload.requests=30")
    assert result.exit_code == 2, result.output
    assert "--set: workload.requests=30 here, none in the directory" in result.output
    assert _files(out) == before and len(task_records(out)) == 2


def test_the_same_capacity_arguments_resume_reusing_every_run_and_only_them(
    tmp_path: Path,
) -> None:
    path, out = _scenario(tmp_path), tmp_path / "cap"
    ok(tiny_capacity(path, out))
    stamps = _stamps(out)
    assert len(stamps) == 2
    tiny_capacity(path, out, "--set", "workload.requests=30")  # refused: adds nothing
    ok(tiny_capacity(path, out))
    assert _stamps(out) == stamps, "every run reused, none rewritten, none added"
    evaluations = pd.read_csv(out / "evaluations.csv")
    assert list(evaluations["n"]) == [len(task_records(out))] == [2]


def test_an_edited_scenarios_leftover_partial_sweep_is_refused(tmp_path: Path) -> None:
    path = _scenario(tmp_path)
    ok(invoke("sweep", str(path), "--executor", "serial", "--out", str(tmp_path / "first")))
    staging = tmp_path / ".out.partial"
    staging.mkdir()
    shutil.copytree(tmp_path / "first" / "tasks", staging / "tasks")  # as a killed sweep left it
    edited = _scenario(tmp_path, **{"workload.requests": 30})
    result = invoke("sweep", str(edited), "--executor", "serial", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert "the scenario changed since the directory was written" in result.output
    assert ".out.partial" in result.output and "remove" in result.output
    assert not (tmp_path / "out").exists() and len(task_records(staging)) == 4
    # the scenario as it was finishes the partial sweep, reusing its runs
    _scenario(tmp_path)
    resumed = ok(invoke("sweep", str(path), "--executor", "serial", "--out", str(tmp_path / "out")))
    assert "4 reused" in resumed.output


def _plan(work: Path, *more: str, axis: str = f"{SWA}=0.05,0.1") -> Result:
    args = ["plan", "plan.yaml", "--axis", axis, "--target", "discard_rate<=0.9"]
    return invoke(*args, "--seeds", "2", "--executor", "serial", "--out", "out", *more)


def _plan_dir(tmp_path: Path, monkeypatch: Any) -> Path:
    doc = make_doc(**SMALL)
    doc["hardware"] = {"gpu": "h200"}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 0.1, "swa": 1}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_plan_rerun_with_other_axes_or_set_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    work = _plan_dir(tmp_path, monkeypatch)
    ok(_plan(work))
    out = work / "out"
    before, stamps = _files(out), _stamps(out)
    other = _plan(work, axis=f"{SWA}=0.05")
    assert other.exit_code == 2, other.output
    assert f"--axis: {SWA}=0.05 here, {SWA}=0.05,0.1 in the directory" in other.output
    changed = _plan(work, "--set", "workload.requests=30")
    assert changed.exit_code == 2, changed.output
    assert "--set: workload.requests=30 here, none in the directory" in changed.output
    assert _files(out) == before and _stamps(out) == stamps, "its tables are kept"
    assert json.loads((out / "plan.json").read_text())["axes"] == {SWA: [0.05, 0.1]}
    ok(_plan(work))  # the same plan again resumes
    assert _stamps(out) == stamps
