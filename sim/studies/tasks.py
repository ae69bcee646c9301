"""A sweep's task folder: each finished task saved the moment it returns, and reused by a rerun.

A task's file, `tasks/<hash>.json`, is keyed by a hash of its resolved document, so a rerun into
the same directory computes only what is missing; a file is reused only when it is the run of
its task with a whole summary, and anything else runs again. Capacity searches and plans keep
their evaluations' runs the same way.
"""

from __future__ import annotations

import json
import os
from contextlib import closing
from pathlib import Path
from typing import Any

from sim.core.safe_io import read_text_bounded
from sim.deployment.resolve import get
from sim.model.pools import POOL_KINDS
from sim.outputs.files import replace_file
from sim.outputs.overload import SETTINGS as OVERLOAD_SETTINGS
from sim.outputs.progress import Progress
from sim.scenario.schema import ScenarioError
from sim.studies.executors import _dispatch
from sim.studies.grid import Task


def _write_json(path: Path, data: dict[str, Any]) -> None:
    replace_file(path, lambda tmp: tmp.write_text(json.dumps(data, indent=1, default=str)))


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
            record["resolved"] = {key: get(task.doc, key) for key in OVERLOAD_SETTINGS}
            _write_json(task_dir / f"{task.key}.json", record)
            kept[task.key] = json.loads(json.dumps(record, default=str))  # as a resume reads it
            failed = " failed" if record.get("error") else ""
            bar.update(f"point {task.point} seed {task.seed_index}{failed}")
    records = [kept[t.key] or {} for t in tasks]
    return records, len(todo)


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
