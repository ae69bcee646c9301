"""What every writer does with what it finds at its paths: the lock beside `--out` is opened
without following a link or blocking on a FIFO, every output file replaces only a regular file,
and a forced search replaces the old result only once the new one is complete
(docs/reliability.md, "Results are written safely")."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_SWEEP, invoke, make_doc

SMALL = {**TINY_SWEEP, "workload.requests": 30, "duration_s": 20}
SWA = "storage.pools.swa.capacity_gb"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    doc = make_doc(**SMALL)
    doc["hardware"] = {"gpu": "h200"}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 0.1, "swa": 1}}
    doc["sweep"] = {"seeds": 1, "grid": {"heal": ["none", "keep_pages"]}}
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    return tmp_path


WRITERS = {
    "run": ["run", "small.yaml", "--out", "o"],
    "compare": ["compare", "small.yaml", "--out", "o"],
    "sweep": ["sweep", "small.yaml", "--executor", "serial", "--out", "o"],
    "capacity": [
        "capacity", "small.yaml", "--param", SWA, "--values", "0.1", "--target", "requests>=1",
        "--seeds", "2", "--executor", "serial", "--out", "o",
    ],
    "plan": [
        "plan", "small.yaml", "--axis", f"{SWA}=0.1", "--target", "requests>=1", "--seeds", "2",
        "--executor", "serial", "--out", "o",
    ],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_symlink_at_the_lock_is_refused_and_its_target_kept(work: Path, command: str) -> None:
    (work / "v").write_text("data\n")
    (work / ".o.lock").symlink_to(work / "v")
    result = invoke(*WRITERS[command])
    assert result.exit_code == 2, (result.output, result.stderr)
    assert ".o.lock" in result.stderr and "Traceback" not in result.stderr
    assert (work / "v").read_text() == "data\n"
    assert (work / ".o.lock").is_symlink() and not (work / "o").exists()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_fifo_at_the_lock_is_refused_at_once(work: Path, command: str) -> None:
    os.mkfifo(work / ".o.lock")
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.update(result=invoke(*WRITERS[command])))
    thread.daemon = True
    thread.start()
    thread.join(60)
    if thread.is_alive():  # unblock the writer so the test process can end
        fd = os.open(work / ".o.lock", os.O_RDONLY | os.O_NONBLOCK)
        thread.join(5)
        os.close(fd)
        pytest.fail("the writer blocked opening a FIFO at its lock")
    result = box["result"]
    assert result.exit_code == 2, (result.output, result.stderr)  # type: ignore[attr-defined]
    assert ".o.lock" in result.stderr  # type: ignore[attr-defined]
    assert not (work / "o").exists()


def test_export_trace_never_replaces_what_is_not_a_regular_file(
    traced_run: Path, tmp_path: Path
) -> None:
    """One rule for every writer: a FIFO or a device (`/dev/null`) at `--out` is refused, as
    `report --out` refuses it, and stays what it was."""
    target = tmp_path / "trace.csv"
    os.mkfifo(target)
    result = invoke("export-trace", str(traced_run), "--out", str(target))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert str(target) in result.stderr and "not a regular file" in result.stderr
    assert target.is_fifo()


def test_a_file_inside_a_result_directory_refuses_a_fifo(traced_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(traced_run, run)
    os.mkfifo(run / "storage_trace_kv.csv")
    result = invoke("export-trace", str(run))
    assert result.exit_code == 2 and "not a regular file" in result.stderr
    assert (run / "storage_trace_kv.csv").is_fifo()


def test_calibrate_force_never_replaces_a_device(tmp_path: Path) -> None:
    from sim.core.spec import ScenarioError
    from sim.studies.calibrate import write_calibration

    fifo = tmp_path / "hw.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        write_calibration(None, fifo, force=True)  # type: ignore[arg-type]
    assert fifo.is_fifo()


@pytest.mark.parametrize("command", ["capacity", "plan"])
def test_force_replaces_the_old_result_only_once_the_search_is_complete(
    work: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """An interrupted `--force` search leaves the old result whole (it used to be deleted
    before the first run); a complete one replaces it, as `run --force` does."""
    import sim.studies.capacity
    import sim.studies.plan

    assert invoke("run", "small.yaml", "--out", "o").exit_code == 0
    before = sorted(p.name for p in (work / "o").iterdir())

    def interrupt(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    module = sim.studies.capacity if command == "capacity" else sim.studies.plan
    with monkeypatch.context() as patch:
        patch.setattr(module, "compute", interrupt)
        stopped = invoke(*WRITERS[command], "--force")
    assert stopped.exit_code == 130, (stopped.output, stopped.stderr)
    assert "nothing was replaced" in stopped.stderr
    assert sorted(p.name for p in (work / "o").iterdir()) == before
    assert not [p for p in work.iterdir() if p.name.startswith(".hicache-sim-staging-")]
    done = invoke(*WRITERS[command], "--force")
    assert done.exit_code == 0, (done.output, done.stderr)
    answer = "capacity.json" if command == "capacity" else "plan.json"
    assert (work / "o" / answer).is_file() and not (work / "o" / "summary.json").exists()
