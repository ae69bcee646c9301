"""The files of a result directory, and its kind, told by one marker file.

Every writer and reader names these files through the constants here, so a renamed file is one
edit, and the plot, the report and the command line agree on what a directory is.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from sim.core.spec import ScenarioError

SUMMARY = "summary.json"
META = "meta.json"
CONFIG = "config.resolved.yaml"
TIMESERIES = "timeseries.parquet"
INSTANCES = "instances.parquet"
COMPARISON = "comparison.csv"
VARIANTS = "variants.json"
SWEEP_META = "sweep.json"
POINTS = "points.csv"
RUNS = "runs.parquet"
TASKS = "tasks"
"""A sweep's and a capacity search's folder of finished runs, one JSON file each."""
CAPACITY = "capacity.json"
EVALUATIONS = "evaluations.csv"
PLAN = "plan.json"
"""A plan's answer: the plan command draws and reports its own directory."""


class Kind(StrEnum):
    RUN = "run"
    COMPARE = "compare"
    SWEEP = "sweep"
    CAPACITY = "capacity"


MARKERS = (
    (Kind.CAPACITY, CAPACITY),
    (Kind.SWEEP, SWEEP_META),
    (Kind.COMPARE, COMPARISON),
    (Kind.RUN, SUMMARY),
)
"""What makes a directory each kind, checked in this order (a sweep or a capacity search has no
summary.json of its own; a comparison has one per variant below it)."""


def detect(directory: Path) -> Kind:
    """The kind of result `directory` holds; a folder with no marker is bad input."""
    for kind, marker in MARKERS:
        if (directory / marker).is_file():
            return kind
    if (directory / PLAN).is_file():
        raise ScenarioError(
            str(directory),
            None,
            "a plan directory: `hicache-sim plan` wrote its report.html and frontier.png here "
            "when it finished; run the same plan command again to redraw them (it reuses the "
            "finished runs)",
        )
    expected = ", ".join(f"{marker} ({kind})" for kind, marker in MARKERS)
    raise ScenarioError(str(directory), None, f"not a result directory: none of {expected}")
