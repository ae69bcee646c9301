"""Variants of one scenario run on the same seed, the table that compares them, and the
comparison directory (`comparison.csv`, `variants.json`, one run directory per variant, the
plot): what `hicache-sim compare` does, as a library call."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.engine.runner import RunResult, run
from sim.outputs.results import write_run
from sim.results.layout import COMPARISON, VARIANTS
from sim.scenario.schema import Scenario
from sim.studies.variants import run_dir_names

Progress = Callable[[Scenario, str], AbstractContextManager[Callable[[float], None] | None]]
"""Given a variant and its label, a context that yields a progress callback (or None)."""


@contextmanager
def _silent(scenario: Scenario, label: str) -> Iterator[None]:
    yield None


@dataclass(frozen=True)
class Comparison:
    """The runs of a comparison, in the order given, by label."""

    column: str
    """What the labels are values of: a key, `heal`, or `variant`."""
    runs: dict[str, RunResult]

    @property
    def table(self) -> pd.DataFrame:
        """One row per variant: its label, then every summary key."""
        return pd.DataFrame(
            [{self.column: label, **result.summary} for label, result in self.runs.items()]
        )


def compare(
    variants: Mapping[str, Scenario], column: str = "variant", progress: Progress = _silent
) -> Comparison:
    """Run each labelled scenario (variants of one scenario, on the same seed) and collect the
    runs; labels are kept in the order given."""
    runs = {}
    for label, scenario in variants.items():
        with progress(scenario, label) as on_progress:
            runs[label] = run(scenario, on_progress=on_progress)
    return Comparison(column, runs)


def write_comparison(
    comparison: Comparison,
    directory: Path,
    sets: Mapping[str, Mapping[str, Any]] | None = None,
    option: str | None = None,
) -> None:
    """The comparison directory, written into `directory` (which must not exist yet): the table,
    `variants.json` (each variant's label, run directory and, from `sets`, the keys it set; the
    command-line option the variants came from, if any), a run directory per variant and the
    plot."""
    from sim.outputs.plot_compare import plot_comparison

    labels = list(comparison.runs)
    dirs = run_dir_names(labels)
    listing: dict[str, Any] = {
        **({"option": option} if option else {}),
        "column": comparison.column,
        "variants": [
            {"label": label, "dir": name, "set": dict((sets or {}).get(label, {}))}
            for label, name in zip(labels, dirs, strict=True)
        ],
    }
    directory.mkdir(parents=True)
    comparison.table.to_csv(directory / COMPARISON, index=False)
    (directory / VARIANTS).write_text(json.dumps(listing, indent=2) + "\n")
    for name, result in zip(dirs, comparison.runs.values(), strict=True):
        write_run(result, directory / name)
    try:
        plot_comparison(directory, comparison.column)
    except Exception as exc:  # finished runs are never lost to a figure
        print(f"warning: comparison plot not drawn ({type(exc).__name__}: {exc})", file=sys.stderr)
