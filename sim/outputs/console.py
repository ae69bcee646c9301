"""What the command line prints: progress bars over simulated time, summaries and tables."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import pandas as pd
from tqdm import tqdm

from sim.outputs.metrics import SUMMARY_KEYS
from sim.runner import RunResult
from sim.scenario import Scenario

COMPARE_COLUMNS = tuple(
    key
    for key in SUMMARY_KEYS
    if key
    not in {
        "prompt_tokens",
        "device_hit_tokens",
        "host_hit_tokens",
        "prefetch_success",
        "l3_hit_tokens",
        "l3_loaded_tokens",
        "recomputed_tokens",
        "events",
        "wall_s",
    }
)
"""The summary keys `compare` prints (all are in comparison.csv)."""


@contextmanager
def progress(scenario: Scenario, label: str) -> Iterator[Callable[[float], None]]:
    """A progress bar over simulated time on stderr (tqdm; hidden when stderr is not a terminal)."""
    total = scenario.duration_s
    with tqdm(total=total, desc=label, unit="sim-s", file=sys.stderr, disable=None) as bar:

        def advance(now_s: float) -> None:
            bar.update(min(now_s, total) - bar.n)

        yield advance
        advance(total)


def print_summary(result: RunResult) -> None:
    s = result.summary
    width = max(len(k) for k in s)
    for key, value in s.items():
        click.echo(f"{key:<{width}}  {_fmt(value)}")


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(table: pd.DataFrame, label: str | None = None) -> str:
    """The compare table: the label column (default: the first), then COMPARE_COLUMNS."""
    label = label or str(table.columns[0])
    rows = [[label, *COMPARE_COLUMNS]]
    rows += [[str(r[label]), *(_fmt(r[c]) for c in COMPARE_COLUMNS)] for _, r in table.iterrows()]
    cols = list(zip(*rows, strict=True))
    widths = [max(len(x) for x in col) for col in cols]
    return "\n".join(
        "  ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)) for row in rows
    )
