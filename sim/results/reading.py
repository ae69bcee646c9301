"""Reading the files of a result directory: a file this tool did not write as it is (missing,
junk JSON, CSV or Parquet, a configuration that is not YAML, a table without the columns a
reader needs) is bad input naming the file. Only the resolved configuration may be absent
(`read_config` then returns no text)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sim.core.safe_io import check_regular, read_text_bounded
from sim.core.spec import ScenarioError
from sim.core.stats import parse_target
from sim.outputs.files import read_table
from sim.results.layout import (
    CAPACITY,
    COMPARISON,
    CONFIG,
    EVALUATIONS,
    INSTANCES,
    META,
    POINTS,
    SUMMARY,
    SWEEP_META,
    TASKS,
    TIMESERIES,
    VARIANTS,
)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object (every JSON file of a result directory is one)."""
    try:
        doc = json.loads(read_text_bounded(path))
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None
    except RecursionError:
        raise ScenarioError(str(path), None, "nested too deeply to be a result file") from None
    if not isinstance(doc, dict):
        raise ScenarioError(str(path), None, "not a JSON object")
    return doc


def read_csv(path: Path) -> pd.DataFrame:
    try:
        check_regular(path)
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def read_parquet(path: Path) -> pd.DataFrame:
    try:
        return read_table(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def read_config(run_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """A run directory's resolved configuration: its text and the parsed mapping."""
    path = run_dir / CONFIG
    if not path.is_file():
        return None, {}
    try:
        text = read_text_bounded(path)
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None
    return text, doc if isinstance(doc, dict) else {}


def read_model(run_dir: Path) -> dict[str, Any]:
    """The `model` section of a run directory's resolved configuration (which must be there)."""
    text, config = read_config(run_dir)
    if text is None:
        raise FileNotFoundError(f"{run_dir / CONFIG} not found")
    model = config.get("model")
    if not isinstance(model, dict):
        raise ScenarioError(str(run_dir / CONFIG), "model", "not a mapping of the model's pools")
    return model


def with_columns(
    frame: pd.DataFrame, path: Path, columns: Iterable[str], numeric: Iterable[str] = ()
) -> pd.DataFrame:
    """The table, if it has every column a reader needs and the `numeric` ones hold numbers;
    otherwise bad input naming them."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ScenarioError(str(path), None, f"lacks the columns {', '.join(missing)}")
    wrong = [c for c in numeric if len(frame) and not pd.api.types.is_numeric_dtype(frame[c])]
    if wrong:
        raise ScenarioError(str(path), None, f"the columns {', '.join(wrong)} are not numbers")
    return frame


TIMESERIES_COLUMNS = (
    "t_s",
    "discards",
    "existence_entries",
    "stale_beliefs_recent_4096",
    "healed_beliefs_pending",
    "host_pages",
)
"""What the plots read of a run's time series (docs/metrics.md)."""


def read_timeseries(path: Path) -> pd.DataFrame:
    """A run's time series: every column the plots read, and every column a finite number
    (each is a count or a time; an inf or a NaN would reach the axis arithmetic)."""
    frame = read_table(path)
    with_columns(frame, path, TIMESERIES_COLUMNS, frame.columns)
    return finite(frame, path, frame.columns)


def finite(frame: pd.DataFrame, path: Path, columns: Iterable[str]) -> pd.DataFrame:
    """The table, if the numeric `columns` hold only finite numbers; otherwise bad input."""
    bad = [
        str(c)
        for c in columns
        if pd.api.types.is_numeric_dtype(frame[c])
        and not pd.api.types.is_bool_dtype(frame[c])
        and not np.isfinite(frame[c].to_numpy(dtype=float)).all()
    ]
    if bad:
        raise ScenarioError(
            str(path), None, f"the columns {', '.join(bad)} hold a value that is not finite"
        )
    return frame


def check_summary(summary: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's summary.json: every value a finite number or null (what a run writes)."""
    for key, value in summary.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not (number and math.isfinite(value)):
            raise ScenarioError(
                str(path), str(key), f"not a finite number (got {json.dumps(value)[:40]})"
            )
    return summary


@dataclass(frozen=True)
class RunDir:
    """A run directory as the plots and the report read it. The small files are read at once;
    the tables only when asked for (a run's time series can be large, and a page or a plot may
    not need it)."""

    path: Path
    summary: dict[str, Any]
    """summary.json: every summary key (docs/metrics.md)."""
    meta: dict[str, Any]
    """meta.json: seed, versions, wall time and the sources of resolved values ({} if absent)."""
    config_text: str | None
    """config.resolved.yaml as written (None if absent)."""
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.config.get("name", self.path.name))

    @property
    def has_timeseries(self) -> bool:
        return (self.path / TIMESERIES).is_file()

    def timeseries(self) -> pd.DataFrame:
        return read_timeseries(self.path / TIMESERIES)

    def instances(self) -> pd.DataFrame | None:
        """instances.parquet: a summary row per server (None for a directory without one)."""
        path = self.path / INSTANCES
        return read_parquet(path) if path.is_file() else None


def read_run(directory: Path) -> RunDir:
    config_text, config = read_config(directory)
    meta_path = directory / META
    meta = read_json(meta_path) if meta_path.is_file() else {}
    summary = check_summary(read_json(directory / SUMMARY), directory / SUMMARY)
    return RunDir(directory, summary, meta, config_text, config)


# ---------------------------------------------------------------- studies


POINT_COLUMNS = ("point", "metric", "mean", "n", "ci_low", "ci_high")
EVALUATION_COLUMNS = ("value", "mean", "ci_low", "ci_high", "n", "meets")


@dataclass(frozen=True)
class SweepDir:
    """A sweep directory as the plots and the report read it."""

    path: Path
    meta: dict[str, Any]
    """sweep.json: provenance, counts and failures."""
    grid: dict[str, list[Any]]
    target: str | None
    points: pd.DataFrame
    """points.csv: per point and metric, mean and 95 % interval (empty: no finished point)."""

    def task_records(self) -> list[dict[str, Any]]:
        return task_records(self.path)


def task_records(directory: Path) -> list[dict[str, Any]]:
    """The finished runs a sweep or capacity search keeps in tasks/, in (point, seed) order; a
    file that is not one (a failure, junk a resume would redo, a run copied under another
    run's name, which would count twice) is left out."""
    records = []
    for path in sorted((directory / TASKS).glob("*.json")):
        try:
            record = json.loads(read_text_bounded(path))
        except (OSError, ValueError):
            continue
        if _is_task_record(record) and record.get("key", path.stem) == path.stem:
            records.append(record)
    return sorted(records, key=lambda r: (r["point"], r["seed_index"]))


def _is_task_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and isinstance(record.get("point"), int)
        and isinstance(record.get("seed_index"), int)
        and isinstance(record.get("values"), dict)
        and isinstance(record.get("summary"), dict)
        and isinstance(record.get("loop_lengths", []), list)
    )


def read_sweep(directory: Path) -> SweepDir:
    path = directory / SWEEP_META
    meta = read_json(path)
    grid = meta.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
        raise ScenarioError(str(path), "grid", "not a mapping of swept keys to their values")
    points = with_columns(
        read_csv(directory / POINTS), directory / POINTS, POINT_COLUMNS, POINT_COLUMNS[2:]
    )
    if not points.empty:
        numbers = [key for key, values in grid.items() if all(map(_is_number, values))]
        with_columns(points, directory / POINTS, map(str, grid), numbers)
    return SweepDir(directory, meta, grid, _target(meta.get("target"), path), points)


def _is_number(value: Any) -> bool:
    """A swept value the plots put on an axis (None: a point that left the key unset)."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


@dataclass(frozen=True)
class CapacityDir:
    """A capacity search's directory as the plot and the report read it."""

    path: Path
    answer: dict[str, Any]
    """capacity.json: the parameter, the target, the answer and the search's settings."""
    param: str
    target: str
    evaluations: pd.DataFrame
    """evaluations.csv: per value tried, the metric's mean, interval and verdict."""


def read_capacity(directory: Path) -> CapacityDir:
    path = directory / CAPACITY
    answer = read_json(path)
    param = answer.get("param")
    if not isinstance(param, str):
        raise ScenarioError(str(path), "param", "missing (or not a dotted key)")
    target = _target(answer.get("target"), path)
    if target is None:
        raise ScenarioError(str(path), "target", "missing")
    evaluations = read_csv(directory / EVALUATIONS)
    with_columns(evaluations, directory / EVALUATIONS, EVALUATION_COLUMNS, EVALUATION_COLUMNS[:5])
    return CapacityDir(directory, answer, param, target, evaluations)


def _target(target: Any, path: Path) -> str | None:
    if target is None:
        return None
    try:
        parse_target(str(target))
    except ValueError as exc:
        raise ScenarioError(str(path), "target", str(exc)) from None
    return str(target)


@dataclass(frozen=True)
class CompareDir:
    """A comparison directory: its table, the column naming the variants, and each variant's
    label and run directory (from variants.json when there is one: a label such as `null` or
    `0.10` does not survive a CSV round trip; older directories name each run directory after
    its label)."""

    path: Path
    table: pd.DataFrame
    column: str
    labels: list[str]
    run_dirs: list[Path]

    def runs(self) -> dict[str, RunDir]:
        """Each variant's run by its label, for the variants whose directory holds a run."""
        return {
            label: read_run(run_dir)
            for label, run_dir in zip(self.labels, self.run_dirs, strict=True)
            if (run_dir / SUMMARY).is_file()
        }


def read_compare(directory: Path, column: str | None = None) -> CompareDir:
    path = directory / COMPARISON
    table = read_csv(path)
    if table.empty:
        raise ScenarioError(str(path), None, "has no variant")
    column = column or str(table.columns[0])
    figures = [c for c in table.columns if c != column]
    with_columns(table, path, (column,), figures)  # every other column is a summary key
    listing_path = directory / VARIANTS
    if listing_path.exists():
        variants = read_json(listing_path).get("variants")
        if not isinstance(variants, list) or not all(_is_variant(v) for v in variants):
            raise ScenarioError(str(listing_path), "variants", "not a list of labels and dirs")
        labels = [str(v["label"]) for v in variants]
        names = [str(v["dir"]) for v in variants]
    else:
        labels = names = [str(x) for x in table[column]]
    run_dirs = [directory / name for name in names if Path(name).name == name]
    if len(run_dirs) != len(names):
        raise ScenarioError(str(directory), None, "names a run directory outside itself")
    return CompareDir(directory, table, column, labels, run_dirs)


def _is_variant(entry: Any) -> bool:
    return isinstance(entry, dict) and "label" in entry and isinstance(entry.get("dir"), str)
