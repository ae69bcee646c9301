"""Sweeps: a scenario's grid × seeds on any executor, resumable, with per-point statistics.

A sweep's tasks are planned from its grid (`sim.studies.grid`), run where the executor says
(`sim.studies.executors`) and saved one by one in its task folder as they finish
(`sim.studies.tasks`), so a rerun into the same directory computes only what is missing. This
module writes what a sweep answers: one row per run (runs.parquet) and per-point statistics over
the seeds (points.csv), sorted by (point, seed) rather than completion order.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.core.stats import confidence
from sim.outputs.files import replace_file
from sim.results.layout import POINTS, RUNS, SWEEP_META, TASKS
from sim.scenario.schema import ScenarioError
from sim.studies.grid import Task, grid_of
from sim.studies.tasks import _write_json, compute


@dataclass
class SweepOutcome:
    runs: pd.DataFrame
    points: pd.DataFrame
    computed: int
    reused: int
    failed: list[dict[str, Any]]


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


def staging_dir(out: Path) -> Path:
    """Where an unfinished sweep into `out` keeps its runs."""
    return out.with_name(f".{out.name}.partial")


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
