"""Sweeps: a scenario's grid × seeds on any executor, resumable, with per-point statistics.

Every task is a fully resolved scenario document, so a task's result is a pure function of it:
the executor (serial, a process pool, a dask cluster) changes only where it runs, never what it
returns, and results are sorted by (point, seed) rather than completion order. Each finished
task is saved as `tasks/<hash>.json` the moment it returns, keyed by a hash of its resolved
document, so a rerun into the same directory computes only what is missing. A task that raises
becomes a failure record; the others finish.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import os
import time
import traceback
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.core.documents import resolve_paths
from sim.core.safe_io import read_text_bounded
from sim.core.stats import confidence, parse_target
from sim.engine.runner import run
from sim.model.pools import POOL_KINDS
from sim.outputs.files import replace_file
from sim.outputs.progress import Progress
from sim.results.layout import POINTS, RUNS, SWEEP_META, TASKS
from sim.scenario.loading import build_scenario, point_document
from sim.scenario.schema import Scenario, ScenarioError, scenario_document
from sim.studies.pool import run_all

EXECUTORS = ("serial", "process", "dask")
VARIANT = "variant"
"""The column of `sweep.variants`: each point's variant label."""


@dataclass(frozen=True)
class Task:
    """One (grid point, seed) of a sweep, with its resolved scenario document."""

    point: int
    values: tuple[tuple[str, Any], ...]
    seed_index: int
    seed: int
    doc: dict[str, Any]
    key: str


def sweep_seeds(root_seed: int, n: int) -> list[int]:
    """Replication seeds: children of the scenario's seed, the same at every grid point (CRN)."""
    children = np.random.SeedSequence(root_seed).spawn(n)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


MAX_SWEEP_RUNS = 100_000
"""Runs one sweep may plan: planning costs about 170 µs and 4 KB a run before anything runs,
and a larger sweep is better split (each part resumable on its own)."""


def plan(scenario: Scenario, source: str, seeds: int | None = None) -> list[Task]:
    """Expand the variants × grid × seeds into validated tasks; a bad value is a
    ScenarioError. A point is the scenario as written with the variant's keys, then the grid's,
    set on it."""
    if scenario.sweep is None:
        raise ScenarioError(source, "sweep", "the scenario has no sweep section")
    check_sweep_target(scenario, source)
    axes: dict[str, list[Any]] = {}
    variants = scenario.sweep.variants
    if variants:
        axes[VARIANT] = list(variants)
    axes.update(scenario.sweep.grid)
    replications = seeds or scenario.sweep.seeds
    runs = math.prod(len(values) for values in axes.values()) * replications
    if runs > MAX_SWEEP_RUNS:
        raise ScenarioError(
            source,
            "sweep",
            f"{runs:,} runs ({replications:,} seeds × the grid's points) is over the "
            f"{MAX_SWEEP_RUNS:,} a sweep may plan; split it, or use fewer seeds or values",
        )
    seed_list = sweep_seeds(scenario.seed, replications)
    keys = list(axes)
    tasks = []
    for point, combo in enumerate(itertools.product(*(axes[k] for k in keys))):
        values = tuple(zip(keys, combo, strict=True))
        label = dict(values).get(VARIANT)
        keyed = [*(variants[label].items() if label else ()), *values[1 if label else 0 :]]
        where = f"sweep.variants.{label}" if label else "sweep.grid"
        for seed_index, seed in enumerate(seed_list):
            doc = point_document(scenario, keyed, f"{source}: sweep")
            doc["seed"] = seed
            resolve_paths(doc, Path(source).parent)
            try:
                resolved = scenario_document(build_scenario(doc, source))
            except ScenarioError as exc:
                raise ScenarioError(
                    source, f"{where}.{exc.key}", f"{exc.message} (point {dict(values)})"
                ) from None
            digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
            tasks.append(Task(point, values, seed_index, seed, resolved, digest[:20]))
    return tasks


def check_sweep_target(scenario: Scenario, source: str) -> None:
    """Refuse a `sweep.target` whose metric this model never reports (it would be drawn as
    holding 'at 0 of 0 points') or whose bound is not a finite number."""
    from sim.engine.metrics import summary_keys

    target = scenario.sweep.target if scenario.sweep is not None else None
    if target is None:
        return
    try:
        metric, _, _ = parse_target(target)
    except ValueError as exc:
        raise ScenarioError(source, "sweep.target", str(exc)) from None
    reported = summary_keys(scenario.model.pools)
    if metric not in reported:
        close = difflib.get_close_matches(metric, sorted(reported), n=2)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ScenarioError(
            source,
            "sweep.target",
            f"unknown metric {metric!r}: this model never reports it ({hint}docs/metrics.md "
            "lists every metric)",
        )


def execute(doc: dict[str, Any]) -> dict[str, Any]:
    """Run one resolved scenario; any exception becomes a failure record (picklable)."""
    try:
        result = run(build_scenario(doc, "<sweep task>"))
    except Exception as exc:
        return {
            "summary": None,
            "loop_lengths": [],
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    return {
        "summary": result.summary,
        "loop_lengths": [loop.length for loop in result.loops],
        "error": None,
        "traceback": None,
    }


WORKER_DIED = (
    "BrokenProcessPool: the worker process running this run died (killed by a signal, or out "
    "of memory); a rerun retries it"
)


def worker_died() -> dict[str, Any]:
    """The failure record of a run whose worker was killed under it: one lost run, not a
    reason to abandon the sweep (it is retried like any failure)."""
    return {"summary": None, "loop_lengths": [], "error": WORKER_DIED, "traceback": None}


def _dispatch(
    tasks: list[Task], executor: str, workers: int, scheduler: str | None
) -> Generator[tuple[Task, dict[str, Any]], None, None]:
    if not tasks:
        return
    if executor == "serial":
        for task in tasks:
            yield task, execute(task.doc)
    elif executor == "process":
        for index, record in run_all(execute, [task.doc for task in tasks], workers):
            yield tasks[index], record if record is not None else worker_died()
    elif executor == "dask":
        yield from _dispatch_dask(tasks, workers, scheduler)
    else:
        raise ValueError(f"unknown executor {executor!r}")


def _dispatch_dask(
    tasks: list[Task], workers: int, scheduler: str | None
) -> Generator[tuple[Task, dict[str, Any]], None, None]:
    from distributed import Client, LocalCluster
    from distributed import as_completed as dask_completed

    if scheduler:
        client = connect_scheduler(scheduler)
        cluster = None
    else:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    try:
        futures = client.map(execute, [t.doc for t in tasks], key=[f"sim-{t.key}" for t in tasks])
        by_key = {f"sim-{t.key}": t for t in tasks}
        for future in dask_completed(futures):
            yield by_key[future.key], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
SCHEDULER_TIMEOUT_S = 10.0
"""How long joining a Dask scheduler may take, handshake included, before it is bad input."""


def check_scheduler_address(address: str) -> None:
    """Refuse (exit 2) an address Dask cannot join: a scheme it does not speak, no port."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in DASK_SCHEMES:
        raise ScenarioError(
            "--scheduler",
            None,
            f"{address!r}: unknown scheme {scheme!r}; a Dask scheduler address is "
            f"{' or '.join(s + '://' for s in DASK_SCHEMES)}HOST:PORT, e.g. tcp://10.0.0.5:8786",
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ScenarioError(
            "--scheduler",
            None,
            f"{address!r} is not HOST:PORT with a port in 1-65535 (e.g. tcp://10.0.0.5:8786)",
        )


def connect_scheduler(address: str, timeout_s: float | None = None) -> Any:
    """A Dask client joined to the scheduler at `address`, or a ScenarioError naming it.

    Dask's own timeout covers the connect but not the handshake, so a port that speaks another
    protocol (an HTTP server waits for a request forever) would hang the sweep: the client is
    made in a daemon thread that is abandoned after `timeout_s`. A peer that answers junk makes
    Dask raise whatever its decoder hits (a ValueError, a MemoryError for a frame of exabytes)."""
    import threading

    from distributed import Client

    check_scheduler_address(address)
    timeout_s = SCHEDULER_TIMEOUT_S if timeout_s is None else timeout_s
    box: dict[str, Any] = {}

    def join() -> None:
        try:
            box["client"] = Client(address, timeout=timeout_s)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=join, name="dask-connect", daemon=True)
    thread.start()
    thread.join(timeout_s + 1)
    if "client" in box:
        return box["client"]
    error = box.get("error")
    why = (
        f"no answer within {timeout_s:g} s"
        if error is None
        else f"{type(error).__name__}: {str(error)[:200]}"
    )
    raise ScenarioError(
        "--scheduler",
        None,
        f"cannot join a Dask scheduler at {address} ({why}); is `dask scheduler` running there, "
        "and is it a Dask port?",
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    replace_file(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1, default=str)))


@dataclass
class SweepOutcome:
    runs: pd.DataFrame
    points: pd.DataFrame
    computed: int
    reused: int
    failed: list[dict[str, Any]]


def compute(
    tasks: list[Task],
    task_dir: Path,
    *,
    executor: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
) -> tuple[list[dict[str, Any]], int]:
    """Run the tasks without a finished record in `task_dir`; returns all records, in task order,
    and how many were computed now."""
    workers = workers or os.cpu_count() or 1
    check_task_dir(task_dir, tasks)
    try:
        task_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(
            "--out", None, f"cannot make {task_dir}: {exc.strerror or exc}"
        ) from None
    kept = {t.key: _reusable(task_dir / f"{t.key}.json", t) for t in tasks}
    todo = [t for t in tasks if kept[t.key] is None]
    # A bar on a terminal, a line per finished run on a file (sim.outputs.progress).
    bar = Progress(len(tasks), "runs", "run", initial=len(tasks) - len(todo), enabled=progress)
    with bar, closing(_dispatch(todo, executor, workers, scheduler)) as results:
        for task, record in results:
            record.update(_labels(task))
            _write_json(task_dir / f"{task.key}.json", record)
            kept[task.key] = json.loads(json.dumps(record, default=str))  # as a resume reads it
            failed = " failed" if record.get("error") else ""
            bar.update(f"point {task.point} seed {task.seed_index}{failed}")
    records = [kept[t.key] or {} for t in tasks]
    return records, len(todo)


def run_sweep(
    tasks: list[Task],
    out: Path,
    *,
    executor: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    provenance: dict[str, Any] | None = None,
) -> SweepOutcome:
    """Run the tasks not already finished in `out`, then write runs.parquet and points.csv.

    A new sweep is built in a hidden sibling, `.<name>.partial`, and renamed to `out` once every
    run has finished (or failed), so a killed sweep leaves no half-filled result directory; a
    rerun resumes from the hidden one. An existing `out` is extended in place.
    """
    started = time.perf_counter()
    work = out if out.exists() else staging_dir(out)
    records, computed = compute(
        tasks,
        work / TASKS,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
    )
    runs = runs_table(tasks, records)
    points = points_table(runs, [k for k, _ in tasks[0].values] if tasks else [])
    failed = [
        {"point": r["point"], "values": r["values"], "seed": r["seed"], "error": r["error"]}
        for r in records
        if r["error"]
    ]
    _replace_parquet(runs, work / RUNS)
    replace_file(work / POINTS, lambda tmp: points.to_csv(tmp, index=False))
    meta = {**(provenance or {}), "grid": grid_of(tasks)}
    meta.update(
        tasks=len(tasks),
        computed=computed,
        reused=len(tasks) - computed,
        failed=failed,
        executor=executor,
        workers=workers or os.cpu_count() or 1,
        wall_s=round(time.perf_counter() - started, 3),
    )
    _write_json(work / SWEEP_META, meta)
    if work != out:
        try:
            os.replace(work, out)
        except OSError:
            raise ScenarioError(
                "--out",
                None,
                f"{out} appeared while the sweep ran (made by another program); every run is "
                f"kept in {work}: move {out} away and rerun the same command to finish",
            ) from None
    return SweepOutcome(runs, points, computed, len(tasks) - computed, failed)


def finished_runs(task_dir: Path, tasks: list[Task] | None = None) -> int:
    """How many finished runs (of `tasks`, or of any) are saved in `task_dir`: what a resume
    reuses."""
    if tasks is None:
        return sum(_finished(path) for path in task_dir.glob("*.json"))
    return sum(_reusable(task_dir / f"{t.key}.json", t) is not None for t in tasks)


def check_task_dir(task_dir: Path, tasks: list[Task]) -> None:
    """Refuse, before anything runs, a task folder a write would leave the result directory
    through (it, or its parent, is a symbolic link) or a task path that is a folder (no file can
    be written there); exit 2 naming it."""
    for path in (task_dir.parent, task_dir):
        if path.is_symlink():
            raise ScenarioError(
                str(path), None, "is a symbolic link; runs are never written through one"
            )
        if path.exists() and not path.is_dir():
            raise ScenarioError(str(path), None, "is not a folder")
    if not task_dir.is_dir():
        return
    for task in tasks:
        path = task_dir / f"{task.key}.json"
        if path.is_dir() and not path.is_symlink():
            raise ScenarioError(
                str(path), None, "is a folder where a finished run's file goes; remove it"
            )


def staging_dir(out: Path) -> Path:
    """Where an unfinished sweep into `out` keeps its runs."""
    return out.with_name(f".{out.name}.partial")


def grid_of(tasks: list[Task]) -> dict[str, list[Any]]:
    """The swept keys and their values, in grid order, recovered from the tasks."""
    grid: dict[str, list[Any]] = {}
    for task in tasks:
        for key, value in task.values:
            values = grid.setdefault(key, [])
            if value not in values:
                values.append(value)
    return grid


def _load_record(path: Path) -> Any:
    try:
        return json.loads(read_text_bounded(path))
    except (OSError, ValueError, RecursionError):
        return None


def _finished(path: Path) -> bool:
    """A task file holding a finished run (the shape only; `_reusable` checks it against its
    task)."""
    record = _load_record(path)
    return (
        isinstance(record, dict)
        and record.get("error") is None
        and isinstance(record.get("summary"), dict)
        and {"point", "values", "seed"} <= record.keys()
    )


def _reusable(path: Path, task: Task) -> dict[str, Any] | None:
    """The record saved for `task`, if it is one a resume may trust: the run of this task (its
    key, point, values and seeds, as written) with a summary holding every key the
    model reports and only numbers in it. Anything else (missing, junk, a failure, a file
    copied under another task's name, a summary cut short or with strings in it) is None: the
    task runs again and the file is rewritten."""
    record = _load_record(path)
    if not isinstance(record, dict):
        return None
    labels = json.loads(json.dumps(_labels(task), default=str))
    if any(record.get(name) != value for name, value in labels.items()):
        return None
    if not isinstance(record.get("loop_lengths"), list):
        return None
    if record.get("error") is None and _valid_summary(record.get("summary"), task):
        return record
    return None


def _labels(task: Task) -> dict[str, Any]:
    return {
        "point": task.point,
        "values": dict(task.values),
        "seed_index": task.seed_index,
        "seed": task.seed,
        "key": task.key,
    }


def _valid_summary(summary: Any, task: Task) -> bool:
    """Every key a run of the task's model reports, each a number or null, and nothing else."""
    from sim.engine.metrics import is_summary_key, summary_keys

    if not isinstance(summary, dict):
        return False
    model = task.doc.get("model") or {}
    pools = [name for name in POOL_KINDS if isinstance(model.get(name), dict)]
    if not summary_keys(pools) <= summary.keys() or not all(map(is_summary_key, summary)):
        return False
    return all(
        value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        for value in summary.values()
    )


def runs_table(tasks: list[Task], records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per point × seed: the swept keys, the seed, the error (if any), every summary key."""
    rows = []
    for task, rec in zip(tasks, records, strict=True):
        row: dict[str, Any] = {"point": task.point, "seed_index": task.seed_index}
        row.update(dict(task.values))
        row.update(seed=task.seed, key=task.key, error=rec["error"])
        row.update(rec["summary"] or {})
        rows.append(row)
    return (
        pd.DataFrame(rows)
        .sort_values(["point", "seed_index"], kind="stable")
        .reset_index(drop=True)
    )


def points_table(runs: pd.DataFrame, swept: list[str]) -> pd.DataFrame:
    """Per point and numeric metric: mean, std, n, and a 95 % t confidence interval over seeds."""
    ok = runs[runs["error"].isna()]
    skip = {"point", "seed_index", "seed", "key", "error", *swept}
    metrics = [c for c in ok.columns if c not in skip and pd.api.types.is_numeric_dtype(ok[c])]
    rows: list[dict[str, Any]] = []
    for point, group in ok.groupby("point", sort=True):
        head = {"point": point, **{k: group[k].iloc[0] for k in swept}}
        for metric in metrics:
            rows.append(
                {**head, "metric": metric, **confidence(group[metric].dropna(), key=metric)}
            )
    columns = ["point", *swept, "metric", "mean", "std", "n", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=columns)


def _replace_parquet(frame: pd.DataFrame, path: Path) -> None:
    def write(tmp: Path) -> None:
        try:
            frame.to_parquet(tmp, index=False)
        except (TypeError, ValueError, ImportError):
            mixed = [c for c in frame.columns if frame[c].dtype == object]
            frame.astype({c: str for c in mixed}).to_parquet(tmp, index=False)

    replace_file(path, write)
