"""Interrupting sweeps: Ctrl-C and SIGTERM stop a process-pool sweep at once and keep what
finished, a second Ctrl-C does not hang, a killed worker is a failed run rather than an
interrupt, workers do not outlive a killed sweep, and a write killed midway leaves no staging
directory behind for good.

Every test drives a real `hicache-sim sweep` subprocess with signals and polls with generous
deadlines: a 2-core machine running the rest of the suite must not make them flaky.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sim.results.directories import STAGING_OWNER, STAGING_PREFIX, write_atomically
from tests.test_sweep import GRID, sweep_doc, sweep_meta, write_yaml

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="finds worker processes through /proc (Linux)"
)

CAP = "storage.pools.swa.capacity_gb"
RUNS = 40
WORKERS = 2
DEADLINE_S = 60.0
"""Generous: every wait below normally ends within a second or two."""
STOP_S = 8.0
"""An interrupted sweep exits well within this (about 0.5 s unloaded), and the slow scenario's
queued runs take twice as long at least."""


def interrupt_scenario(directory: Path, requests: int) -> Path:
    """40 runs (5 capacities × 2 heal rules × 4 seeds) of `requests` requests each."""
    grid = {CAP: [0.05, 0.1, 0.2, 0.3, 0.4], "heal": GRID["heal"]}
    overrides = {"workload.requests": requests, "duration_s": requests * 0.3}
    return write_yaml(directory / f"s{requests}.yaml", sweep_doc(grid, seeds=4, **overrides))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of about 0.3 s: a sweep of about 7 s on 2 workers, for the ones run to the end."""
    return interrupt_scenario(tmp_path_factory.mktemp("interrupts"), 2000)


@pytest.fixture(scope="module")
def slow_scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs of about 0.9 s: the queued runs take 15 s or more on 2 workers, far longer than
    stopping does, so a sweep that still ran them after an interrupt is told apart."""
    return interrupt_scenario(tmp_path_factory.mktemp("interrupts"), 8000)


def as_from_a_terminal() -> None:
    """In the child before it starts: Ctrl-C's default disposition, as a shell in a terminal
    gives a command. A runner started in the background by a non-interactive shell (`cmd &`,
    nohup) ignores SIGINT, every process it starts inherits that, and Python then never raises
    KeyboardInterrupt: the sweep would run to its end however often it is interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(scenario: Path, out: Path) -> subprocess.Popen[str]:
    """A process-pool sweep in its own session, so that a signal to its group is a Ctrl-C."""
    command = [sys.executable, "-m", "sim", "sweep", str(scenario)]
    return subprocess.Popen(
        [*command, "--executor", "process", "--workers", str(WORKERS), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )


def task_files(out: Path) -> int:
    return sum(len(list((d / "tasks").glob("*.json"))) for d in (out, partial(out)))


def partial(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial")


def wait_for_runs(proc: subprocess.Popen[str], out: Path, n: int = 2) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while (found := task_files(out)) < n:
        assert proc.poll() is None, "the sweep ended before it was signalled"
        assert time.monotonic() < deadline, "no task record appeared"
        time.sleep(0.01)
    return found


def workers_of(pid: int) -> list[int]:
    """The sweep's pool workers: its children that run the same command."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    own = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [int(c) for c in children if cmdline(int(c)) == own]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by whoever adopted it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + DEADLINE_S
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def cleanup() -> Iterator[Callable[..., None]]:
    """`cleanup(*pids)` lists processes to SIGKILL after the test whatever happened (a failing
    test leaves none running); only one still running the command it ran when listed is
    killed, never a process that reused its pid."""
    listed: dict[int, bytes] = {}

    def track(*pids: int) -> None:
        listed.update((pid, cmdline(pid)) for pid in pids)

    yield track
    for pid, command in listed.items():
        if alive(pid) and cmdline(pid) == command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the sweep did not exit within {DEADLINE_S:.0f} s of the signal: {err}")
    return proc.returncode, err


def interrupt(
    scenario: Path, out: Path, cleanup: Callable[..., None], signum: int, to_group: bool
) -> tuple[float, int, re.Match[str]]:
    """Start a sweep, signal it once two runs finished, and check it stopped as an interrupt:
    (seconds from the signal to its exit, runs kept, the match of its resume line)."""
    proc = start_sweep(scenario, out)
    cleanup(proc.pid)
    before = wait_for_runs(proc, out)
    workers = workers_of(proc.pid)
    cleanup(*workers)
    signalled = time.monotonic()
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    code, err = finish(proc)
    took = time.monotonic() - signalled

    assert code == 130, err
    after = task_files(out)
    assert before <= after <= before + 2 * WORKERS < RUNS, (before, after)
    assert not out.exists() and partial(out).is_dir(), "only the resumable hidden directory"
    match = re.search(r"interrupted after (\d+) of 40 runs .*finish with: (.+)$", err, re.M)
    assert match, err
    assert int(match[1]) == after
    assert match[2].endswith(f"--out {out}")
    assert wait_gone(workers) == [], "the workers were ended with the sweep"
    assert "Traceback" not in err
    return took, after, match


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_process_sweep_stops_at_once(
    slow_scenario: Path, tmp_path: Path, cleanup: Callable[..., None], signum: int, to_group: bool
):
    took, _, _ = interrupt(slow_scenario, tmp_path / "out", cleanup, signum, to_group)
    # it used to run every queued run (15 s and more here) and then throw them away
    assert took < STOP_S, f"{took:.1f} s from the signal to the exit"


def test_an_interrupted_sweep_resumes_computing_only_the_runs_left(
    scenario: Path, tmp_path: Path, cleanup: Callable[..., None]
):
    """Resuming by the printed command (on the faster scenario: the runs left are computed)."""
    out = tmp_path / "out"
    _, after, match = interrupt(scenario, out, cleanup, signal.SIGINT, True)
    resumed = subprocess.run(
        [sys.executable, "-m", "sim", *shlex.split(match[2])[1:], "--workers", str(WORKERS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    meta = sweep_meta(out)
    assert (meta["tasks"], meta["reused"], meta["computed"]) == (RUNS, after, RUNS - after)
    assert not partial(out).exists()


def test_a_second_ctrl_c_does_not_hang_the_sweep(
    slow_scenario: Path, tmp_path: Path, cleanup: Callable[..., None]
):
    out = tmp_path / "out"
    proc = start_sweep(slow_scenario, out)
    cleanup(proc.pid)
    wait_for_runs(proc, out)
    workers = workers_of(proc.pid)
    cleanup(*workers)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    code, err = finish(proc)  # it used to wait forever joining its workers

    assert code in (130, -signal.SIGINT), err  # the second may land while the first exits
    assert wait_gone(workers) == []
    assert task_files(out) < RUNS and partial(out).is_dir()


def test_an_interrupted_capacity_search_stops_at_once(
    slow_scenario: Path, tmp_path: Path, cleanup: Callable[..., None]
):
    out = tmp_path / "cap"
    values = "0.05,0.1,0.2,0.4"
    question = ["--param", CAP, "--target", "discard_rate<=0.2", "--values", values]
    pool = ["--executor", "process", "--workers", str(WORKERS)]
    rest = ["--seeds", "10", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", "capacity", str(slow_scenario), *question, *pool, *rest],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    cleanup(proc.pid)
    deadline = time.monotonic() + DEADLINE_S
    while len(list((out / "tasks").glob("*.json"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "no task record appeared"
        time.sleep(0.01)
    cleanup(*workers_of(proc.pid))
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    code, err = finish(proc)

    assert code == 130, err
    assert time.monotonic() - signalled < STOP_S
    kept = len(list((out / "tasks").glob("*.json")))
    assert f"interrupted after {kept} finished runs" in err and f"--out {out}" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_worker_fails_its_run_and_the_sweep_finishes(
    scenario: Path, tmp_path: Path, cleanup: Callable[..., None], signum: int
):
    out = tmp_path / "out"
    proc = start_sweep(scenario, out)
    cleanup(proc.pid)
    wait_for_runs(proc, out)
    workers = workers_of(proc.pid)
    cleanup(*workers)
    assert len(workers) == WORKERS
    os.kill(workers[0], signum)
    code, err = finish(proc)

    assert code == 1, err
    assert "interrupted" not in err, "a dead worker is not a user's interrupt"
    failed = [line for line in err.splitlines() if line.startswith("failed:")]
    # the killed worker's run, and another in flight when the broken pool ended its worker
    assert 1 <= len(failed) <= WORKERS, err
    assert all("worker process running this run died" in line for line in failed), err
    meta = sweep_meta(out)
    assert (meta["tasks"], len(meta["failed"])) == (RUNS, len(failed))
    records = [json.loads(p.read_text()) for p in (out / "tasks").glob("*.json")]
    assert len(records) == RUNS
    assert sum(r["error"] is None for r in records) == RUNS - len(failed)


def test_the_workers_exit_when_the_sweep_is_killed(
    slow_scenario: Path, tmp_path: Path, cleanup: Callable[..., None]
):
    out = tmp_path / "out"
    proc = start_sweep(slow_scenario, out)
    cleanup(proc.pid)
    wait_for_runs(proc, out, n=1)
    workers = workers_of(proc.pid)
    cleanup(*workers)
    assert len(workers) == WORKERS
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=DEADLINE_S)
    assert wait_gone(workers) == [], "orphaned workers kept running (they used to, for good)"


# --- staging directories -------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from sim.results.directories import write_atomically

def fill(directory):
    directory.mkdir()
    (directory / "half.txt").write_text("half written")
    time.sleep(600)

write_atomically(Path(sys.argv[1]), fill)
"""


def start_writer(target: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(target)])


def staging_of(proc: subprocess.Popen[bytes], parent: Path) -> Path:
    """The staging directory the writer made, once its half-written file is in it."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for path in parent.glob(f"{STAGING_PREFIX}*"):
            try:  # the other writer's staging may not have its owner file yet
                owner = (path / STAGING_OWNER).read_text().split()
            except FileNotFoundError:
                continue
            if owner[1:] == [str(proc.pid)] and (path / "out" / "half.txt").exists():
                return path
        assert proc.poll() is None and time.monotonic() < deadline, "no staging appeared"
        time.sleep(0.02)


def test_a_write_removes_staging_left_by_a_killed_writer_but_not_a_live_one(
    tmp_path: Path, cleanup: Callable[..., None]
):
    parent = tmp_path / "results"
    killed = start_writer(parent / "a")
    live = start_writer(parent / "b")
    cleanup(killed.pid, live.pid)
    stale = staging_of(killed, parent)
    busy = staging_of(live, parent)
    killed.kill()
    killed.wait(timeout=DEADLINE_S)
    assert stale.is_dir(), "a SIGKILL leaves the staging directory"
    foreign = parent / f"{STAGING_PREFIX}foreign"
    foreign.mkdir()
    (foreign / STAGING_OWNER).write_text(f"not-{socket.gethostname()} {killed.pid}\n")
    unowned = parent / f"{STAGING_PREFIX}unowned"
    unowned.mkdir()

    written = write_atomically(parent / "c", lambda d: d.mkdir())

    assert written.is_dir()
    assert not stale.exists(), "the dead writer's staging is removed by the next write"
    assert (busy / "out" / "half.txt").exists(), "a live writer's staging is left alone"
    assert foreign.is_dir() and unowned.is_dir(), "another host's, or one of unknown owner"
    live.kill()
    live.wait(timeout=DEADLINE_S)
