"""Result directories written only where `--out` says, resumed only from task files that are
what their names say, and sizes converted exactly (docs/reliability.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from sim.scenario.loading import build_scenario
from tests.conftest import TINY_SWEEP, invoke, make_doc, tiny_capacity

SMALL = {**TINY_SWEEP, "workload.requests": 40, "duration_s": 30}


def _sweep_file(
    tmp_path: Path, grid: dict[str, list[object]] | None = None, **extra: object
) -> Path:
    doc = make_doc(**SMALL)
    doc["sweep"] = {"seeds": 2, "grid": grid or {"heal": ["none", "keep_pages"]}, **extra}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _sweep(path: Path, out: Path, *more: str) -> object:
    return invoke("sweep", str(path), "--executor", "serial", "--out", str(out), *more)


def test_capacity_replaces_planted_symlinks_instead_of_writing_through(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    out = tmp_path / "cap"
    assert tiny_capacity(path, out).exit_code == 0  # type: ignore[attr-defined]
    victims = {}
    for name in ("evaluations.csv", "capacity.json"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("mine")
        (out / name).unlink()
        (out / name).symlink_to(victim)
        victims[name] = victim
        result = tiny_capacity(path, out)
        if name == "evaluations.csv":
            assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
            assert not (out / name).is_symlink()
        else:
            assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
            assert "symbolic link" in result.output  # type: ignore[attr-defined]
    for victim in victims.values():
        assert victim.read_text() == "mine"


def test_capacity_into_an_existing_folder_needs_force(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    result = tiny_capacity(path, mine)
    assert result.exit_code == 2 and "--force" in result.output  # type: ignore[attr-defined]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    forced = tiny_capacity(path, mine, "--force")
    assert forced.exit_code == 2, forced.output  # type: ignore[attr-defined]
    assert (mine / "notes.txt").read_text() == "mine", "a user's folder is never replaced"
    run_dir = tmp_path / "run"
    assert invoke("run", str(path), "--out", str(run_dir)).exit_code == 0
    assert tiny_capacity(path, run_dir).exit_code == 2  # type: ignore[attr-defined]
    assert tiny_capacity(path, run_dir, "--force").exit_code == 0  # type: ignore[attr-defined]
    assert (run_dir / "capacity.json").is_file() and not (run_dir / "summary.json").exists()


def test_capacity_resumes_its_own_directory_without_force(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    out = tmp_path / "cap"
    assert tiny_capacity(path, out).exit_code == 0  # type: ignore[attr-defined]
    (out / "capacity.json").unlink()
    assert tiny_capacity(path, out).exit_code == 0  # type: ignore[attr-defined]


def test_a_planted_partial_symlink_is_refused(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / ".out.partial").symlink_to(elsewhere)
    result = _sweep(path, tmp_path / "out")
    assert result.exit_code == 2 and ".out.partial" in result.output  # type: ignore[attr-defined]
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["sweep", "capacity"])
def test_a_planted_tasks_symlink_is_refused(tmp_path: Path, kind: str) -> None:
    path = _sweep_file(tmp_path)
    out = tmp_path / "out"
    run = _sweep if kind == "sweep" else tiny_capacity
    assert run(path, out).exit_code == 0  # type: ignore[attr-defined]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    import shutil

    shutil.rmtree(out / "tasks")
    (out / "tasks").symlink_to(elsewhere)
    result = run(path, out)
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "symbolic link" in result.output  # type: ignore[attr-defined]
    assert list(elsewhere.iterdir()) == []


def test_resweeping_a_finished_sweep_with_another_plan_is_refused(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    out = tmp_path / "out"
    assert _sweep(path, out).exit_code == 0  # type: ignore[attr-defined]
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    other = _sweep(path, out, "--set", "workload.requests=30")
    assert other.exit_code == 2 and "does not plan" in other.output  # type: ignore[attr-defined]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    fewer = _sweep(path, out, "--seeds", "1")
    assert fewer.exit_code == 2  # type: ignore[attr-defined]
    more = _sweep(path, out, "--seeds", "3")
    assert more.exit_code == 0, more.output  # type: ignore[attr-defined]
    assert "4 reused" in more.output  # type: ignore[attr-defined]


def _damaged_resume(tmp_path: Path, damage: str) -> tuple[object, dict[str, object]]:
    """A finished sweep, its tasks damaged one way, resumed from the hidden staging folder."""
    path = _sweep_file(tmp_path)
    out = tmp_path / "out"
    assert _sweep(path, out).exit_code == 0  # type: ignore[attr-defined]
    import pandas as pd

    truth_runs = pd.read_parquet(out / "runs.parquet")
    staging = tmp_path / ".again.partial"
    (staging).mkdir()
    import shutil

    shutil.copytree(out / "tasks", staging / "tasks")
    files = sorted((staging / "tasks").glob("*.json"))
    first, second = files[0], files[1]
    record = json.loads(first.read_text())
    if damage == "copied":
        first.write_text(second.read_text())
    elif damage == "summary":
        record["summary"] = {"requests": 1}
        first.write_text(json.dumps(record))
    elif damage == "strings":
        record["summary"]["loops"] = "many"
        first.write_text(json.dumps(record))
    elif damage == "folder":
        first.unlink()
        first.mkdir()
    result = _sweep(path, tmp_path / "again")
    return result, {"truth": truth_runs, "out": tmp_path / "again"}


@pytest.mark.parametrize("damage", ["copied", "summary", "strings"])
def test_resume_reruns_task_files_that_do_not_match_their_task(tmp_path: Path, damage: str) -> None:
    import pandas as pd

    result, found = _damaged_resume(tmp_path, damage)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "1 computed" in result.output  # type: ignore[attr-defined]
    runs = pd.read_parquet(found["out"] / "runs.parquet")  # type: ignore[operator]
    truth = found["truth"]
    pd.testing.assert_frame_equal(
        runs.drop(columns="wall_s"),
        truth.drop(columns="wall_s"),  # type: ignore[union-attr]
    )


def test_a_folder_where_a_task_file_goes_is_bad_input(tmp_path: Path) -> None:
    result, _ = _damaged_resume(tmp_path, "folder")
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "is a folder" in result.output  # type: ignore[attr-defined]


def test_an_unknown_metric_in_sweep_target_is_refused(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path, target="nope>=1")
    for args in (("validate", str(path)), ("sweep", str(path), "--out", str(tmp_path / "o"))):
        result = invoke(*args)
        assert result.exit_code == 2 and "sweep.target" in result.output and "nope" in result.output
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.partial").exists()


def test_run_force_waits_its_turn_behind_a_sweeps_lock(tmp_path: Path) -> None:
    import fcntl

    path = _sweep_file(tmp_path)
    out = tmp_path / "busy"
    with (tmp_path / ".busy.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = invoke("run", str(path), "--out", str(out), "--force")
    assert result.exit_code == 2 and "is writing" in result.output
    assert not out.exists()


def test_a_sweep_whose_out_appears_meanwhile_keeps_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sim.studies.sweep

    path = _sweep_file(tmp_path)
    out = tmp_path / "out"
    real = sim.studies.sweep.compute

    def planted(*args: object, **kwargs: object) -> object:
        done = real(*args, **kwargs)  # type: ignore[arg-type]
        out.mkdir()
        (out / "other").write_text("x")
        return done

    monkeypatch.setattr(sim.studies.sweep, "compute", planted)
    result = _sweep(path, out)
    assert result.exit_code == 2 and "appeared" in result.output  # type: ignore[attr-defined]
    assert len(list((tmp_path / ".out.partial" / "tasks").glob("*.json"))) == 4


def test_out_where_nothing_can_be_written_exits_2(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    for args in (
        ("run", str(path), "--out", "/proc/hicache-x"),
        ("sweep", str(path), "--executor", "serial", "--out", "/proc/hicache-x"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "--out" in result.output


@pytest.mark.parametrize(
    ("bytes_per_token", "given", "gb"),
    [(24576, "1000000tokens", 24.576), (100_000_000_000, "640tokens", 64_000.0)],
)
def test_tokens_convert_to_gb_exactly(bytes_per_token: int, given: str, gb: float) -> None:
    doc = make_doc(**{"model.kv.bytes_per_token": bytes_per_token})
    doc["storage"]["pools"]["kv"] = {"capacity_gb": given}
    scenario = build_scenario(doc, "<t>")
    assert scenario.storage.pools["kv"].capacity_gb == pytest.approx(gb, rel=1e-12)


def test_capacity_force_replaces_nothing_when_a_value_is_refused(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    run_dir = tmp_path / "run"
    assert invoke("run", str(path), "--out", str(run_dir)).exit_code == 0
    before = sorted(p.name for p in run_dir.iterdir())
    result = invoke(
        "capacity",
        str(path),
        "--param",
        "device.swa_pages",
        "--target",
        "requests>=1",
        "--values",
        "400,-5",
        "--out",
        str(run_dir),
        "--force",
    )
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_a_sweep_out_name_too_long_for_its_staging_folder_exits_2(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    result = _sweep(path, tmp_path / ("a" * 250))
    assert result.exit_code == 2 and "246 bytes" in result.output  # type: ignore[attr-defined]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_sweep_into_a_folder_it_cannot_write_exits_2(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        result = _sweep(path, locked / "out")
        assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
        assert "--out" in result.output  # type: ignore[attr-defined]
    finally:
        locked.chmod(0o700)
