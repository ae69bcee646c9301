"""Fuzzing the command-line surfaces and damaged resume directories (docs/reliability.md).

Hypothesis draws hostile values for every option that carries data into the tool: `--set`
values (flow YAML with aliases, tags, huge or tiny numbers, deep nesting), sweep grids given by
`--set sweep.grid=...`, `--vary KEY=A,B`, `--variant LABEL:KEY=VALUE`, and `--scheduler`
addresses; and it damages a finished sweep directory in many ways (task files copied under
another task's name, cut short, with strings for numbers, replaced by folders, links to
`/dev/zero` or to a folder elsewhere, a planted `.<out>.partial` link) before resuming into it.
Every case runs the CLI in-process in a fresh working directory and must keep the contract:

* exit 0 or 2, never 1, no escaping exception, no traceback, within CASE_SECONDS;
* on exit 2 an `error:` line naming the option or the file, and nothing written;
* a resumed sweep that exits 0 has the same runs as the undamaged one (wall clock aside), and
  nothing outside `--out` changed.

The cases are the same on every run (derandomized) unless HICACHE_FUZZ_EXPLORE=1 is set.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_doc

CASE_SECONDS = 20
SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not os.environ.get("HICACHE_FUZZ_EXPLORE"),
)
TINY = {"workload.requests": 12, "duration_s": 5, "workload.prefixes": 4}
KEYS = [
    "heal",
    "seed",
    "duration_s",
    "device.kv_pages",
    "host.pages",
    "storage.read_gbps",
    "storage.pools.kv.capacity_gb",
    "prefetch.retry.interval_s",
    "prefetch.retry.max_attempts",
    "cluster.link_gbps",
    "cluster.router",
    "workload.requests",
    "model.preset",
    "sweep.target",
]


def _bomb(levels: int) -> str:
    names = "abcdefghijkl"[:levels]
    parts = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    for prev, name in itertools.pairwise(names):
        parts.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    return "{" + ", ".join(parts) + "}"


NUMBERS = st.sampled_from(
    [
        "0",
        "-1",
        "1e-300",
        "5e-324",
        "1.0e-300",
        "1e308",
        "1.0e+308",
        "inf",
        ".nan",
        "-.inf",
        "10000000000000000000000000000000",
        "2**62",
        "0x7fffffffffffffff",
        "1_000",
        "12Gb",
        "12GB",
        "640tokens",
        "1e9tokens",
        "0.5",
        "8",
        "true",
        "null",
        "~",
        "''",
    ]
)
JUNK = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)
VALUES = st.one_of(
    NUMBERS,
    JUNK,
    st.builds(_bomb, st.integers(min_value=2, max_value=9)),
    st.sampled_from(
        [
            "[",
            "{a: 1",
            "&a [*a]",
            "!!python/object:os.system ls",
            "!!binary aGVsbG8=",
            "[" * 300 + "]" * 300,
            "{policy: power_of_two, load_poll_interval_s: 1.0e-300}",
            "{policy: cache_aware, eviction_interval_s: 0.0005}",
            "$\\badcmd{$",
            "a" * 5000,
            "nope>=1",
            "heal_rate>=nan",
            "[none, keep_pages]",
            "{}",
            "[]",
        ]
    ),
)


def _scenario(tmp: Path, sweep: bool = False) -> Path:
    doc = make_doc(**TINY)
    if sweep:
        doc["sweep"] = {"seeds": 2, "grid": {"heal": ["none", "keep_pages"]}}
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as tmp, contextlib.chdir(tmp):
        yield Path(tmp)


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _check(result: Result, started: float, options: tuple[str, ...]) -> None:
    elapsed = time.perf_counter() - started
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{type(exc).__name__}: {exc}"
    assert result.exit_code in (0, 2), result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    assert elapsed < CASE_SECONDS, f"took {elapsed:.1f} s"
    if result.exit_code == 2:
        line = next((ln for ln in result.output.splitlines() if ln.startswith("error: ")), "")
        assert line, result.output[-3000:]
        assert any(o in line for o in options), line[:500]


@settings(SETTINGS, max_examples=80)
@given(key=st.sampled_from(KEYS), value=VALUES, grid=st.booleans())
def test_fuzz_set_and_grid_values(key: str, value: str, grid: bool) -> None:
    with _workdir() as tmp:
        scenario = _scenario(tmp, sweep=grid)
        before = _listing(tmp)
        item = f"sweep.grid={{{key}: [{value}]}}" if grid else f"{key}={value}"
        started = time.perf_counter()
        validated = invoke("validate", str(scenario), "--set", item)
        _check(validated, started, ("--set", "s.yaml"))
        assert _listing(tmp) == before
        if validated.exit_code != 0 or not grid:
            return
        started = time.perf_counter()
        swept = invoke("sweep", str(scenario), "--executor", "serial", "--set", item, "--out", "o")
        _check(swept, started, ("--set", "s.yaml", "--out"))
        if swept.exit_code == 2:
            assert _listing(tmp) == before


@settings(SETTINGS, max_examples=40)
@given(
    kind=st.sampled_from(["--vary", "--variant"]),
    key=st.sampled_from(KEYS),
    values=st.lists(VALUES, min_size=1, max_size=3),
    label=st.one_of(JUNK, st.sampled_from(["a", "$\\badcmd{$", "../x", ".hidden", "a" * 300])),
)
def test_fuzz_vary_and_variant(kind: str, key: str, values: list[str], label: str) -> None:
    with _workdir() as tmp:
        scenario = _scenario(tmp)
        before = _listing(tmp)
        if kind == "--vary":
            args = ["--vary", f"{key}={','.join(values)}"]
        else:
            args = [a for v in values for a in ("--variant", f"{label}{v[:3]}:{key}={v}")]
        started = time.perf_counter()
        result = invoke("compare", str(scenario), *args, "--out", "o")
        _check(result, started, ("--vary", "--variant", "--heal", "--set", "s.yaml", "--out"))
        if result.exit_code == 2:
            assert _listing(tmp) == before


@settings(SETTINGS, max_examples=25)
@given(
    scheme=st.sampled_from(["tcp://", "tls://", "foo://", "http://", "", "inproc://", "ws://"]),
    host=st.sampled_from(["127.0.0.1", "localhost", "[::", "", "a" * 300, "::1", "nohost.invalid"]),
    port=st.sampled_from([":1", ":0", ":65536", ":-1", ":x", "", ":8786", ":99999999999"]),
    executor=st.sampled_from(["dask", "serial"]),
)
def test_fuzz_scheduler_addresses(scheme: str, host: str, port: str, executor: str) -> None:
    import sim.studies.executors

    address = f"{scheme}{host}{port}"
    previous = sim.studies.executors.SCHEDULER_TIMEOUT_S
    sim.studies.executors.SCHEDULER_TIMEOUT_S = 1.0
    try:
        with _workdir() as tmp:
            scenario = _scenario(tmp, sweep=True)
            before = _listing(tmp)
            started = time.perf_counter()
            result = invoke(
                "sweep",
                str(scenario),
                "--executor",
                executor,
                "--scheduler",
                address,
                "--out",
                "o",
            )
            _check(result, started, ("--scheduler",))
            assert result.exit_code == 2, "no Dask scheduler runs here"
            assert _listing(tmp) == before
    finally:
        sim.studies.executors.SCHEDULER_TIMEOUT_S = previous


# --- damaged resume directories -------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A finished sweep of four runs, and its runs table (the truth a resume must reproduce)."""
    root = tmp_path_factory.mktemp("finished")
    scenario = _scenario(root, sweep=True)
    out = root / "out"
    result = invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, pd.read_parquet(out / "runs.parquet").drop(columns="wall_s")


DAMAGES = [
    "copy-other",
    "summary-cut",
    "summary-strings",
    "summary-bool",
    "key-changed",
    "junk",
    "empty",
    "list",
    "folder",
    "link-dev-zero",
    "link-elsewhere",
    "fifo",
    "huge",
    "tasks-link",
    "partial-link",
    "delete",
]


def _damage(staging: Path, files: list[Path], damage: str, index: int, victim: Path) -> None:
    path = files[index % len(files)]
    other = files[(index + 1) % len(files)]
    record = json.loads(path.read_text())
    if damage == "copy-other":
        path.write_text(other.read_text())
    elif damage == "summary-cut":
        record["summary"] = {"requests": 1}
        path.write_text(json.dumps(record))
    elif damage == "summary-strings":
        record["summary"]["loops"] = "many"
        path.write_text(json.dumps(record))
    elif damage == "summary-bool":
        record["summary"]["requests"] = True
        path.write_text(json.dumps(record))
    elif damage == "key-changed":
        record["key"] = "0" * 20
        path.write_text(json.dumps(record))
    elif damage in ("junk", "empty", "list"):
        path.write_text({"junk": "\x00{not json", "empty": "", "list": "[1, 2]"}[damage])
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    elif damage == "link-dev-zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif damage == "link-elsewhere":
        path.unlink()
        path.symlink_to(victim / "note.json")
    elif damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif damage == "huge":
        path.write_text(json.dumps(record) + " " * (17 * 2**20))
    elif damage == "tasks-link":
        shutil.rmtree(staging / "tasks")
        (staging / "tasks").symlink_to(victim, target_is_directory=True)
    elif damage == "partial-link":
        shutil.rmtree(staging)
        staging.symlink_to(victim, target_is_directory=True)
    elif damage == "delete":
        path.unlink()


@settings(SETTINGS, max_examples=40)
@given(damages=st.lists(st.sampled_from(DAMAGES), min_size=1, max_size=3), index=st.integers(0, 3))
def test_fuzz_damaged_resume_directories(
    finished_sweep: tuple[Path, pd.DataFrame], damages: list[str], index: int
) -> None:
    out, truth = finished_sweep
    with _workdir() as tmp:
        victim = tmp / "victim"
        victim.mkdir()
        (victim / "note.json").write_text('{"mine": true}')
        scenario = _scenario(tmp, sweep=True)
        staging = tmp / ".again.partial"
        staging.mkdir()
        shutil.copytree(out / "tasks", staging / "tasks")
        for step, damage in enumerate(damages):
            if staging.is_symlink() or (staging / "tasks").is_symlink():
                break
            files = sorted((staging / "tasks").glob("*.json"))  # the runs, not tasks/origin
            if files:
                _damage(staging, files, damage, index + step, victim)
        started = time.perf_counter()
        result = invoke("sweep", str(scenario), "--executor", "serial", "--out", "again")
        _check(result, started, ("--out", "tasks", ".json"))
        assert sorted(os.listdir(victim)) == ["note.json"]
        assert (victim / "note.json").read_text() == '{"mine": true}'
        if result.exit_code == 0:
            runs = pd.read_parquet(tmp / "again" / "runs.parquet").drop(columns="wall_s")
            pd.testing.assert_frame_equal(runs, truth)
