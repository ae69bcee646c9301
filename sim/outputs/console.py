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

from sim.core.units import size_text
from sim.engine.metrics import SUMMARY_KEYS
from sim.engine.runner import RunResult
from sim.results.layout import SUMMARY
from sim.scenario.schema import Scenario

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


def print_summary(result: RunResult, summary_path: str = SUMMARY) -> None:
    """The run's headline figures with their units; every key is in summary.json."""
    router = result.scenario.cluster.router.policy
    for label, text in summary_lines(result.summary, router):
        keys = LINE_KEYS.get(label)
        named = f"  [{', '.join(keys)}]" if keys else ""
        click.echo(f"{label:<28}{text}{named}")
    click.echo(f"(every key, {len(result.summary)} in all, is in {summary_path})")


LINE_KEYS = {
    "requests": ("requests", "requests_finished"),
    "prompt": ("prompt_tokens",),
    "device hits": ("device_hit_tokens",),
    "storage (L3) loaded": ("l3_loaded_tokens", "l3_loaded_rate"),
    "recomputed": ("recomputed_tokens",),
    "prefetches": ("prefetch_issued", "prefetch_discarded", "discard_rate"),
    "repeated-failure loops": ("loops", "heal_rate", "loop_length_max"),
    "wasted storage reads": ("wasted_read_bytes",),
    "rewritten after a heal": ("rewrite_pages",),
    "written to storage": ("written_bytes",),
    "TTFT p50 / p99": ("ttft_p50_s", "ttft_p99_s"),
    "wall clock": ("wall_s", "events"),
    "load imbalance": ("load_imbalance",),
    "L3 read across servers": ("cross_instance_l3_hit_pages",),
    "cross-server rewrites": ("cross_instance_rewrite_objects",),
    "loops stale by other server": ("loops_stale_by_other_instance",),
    "storage traffic": ("read_transfer_bytes", "written_bytes"),
}
"""The summary.json keys (the contract: docs/metrics.md) behind each printed line, printed
beside it so that a target (`--target l3_loaded_rate>=0.2`) can be written from the summary."""


def _rewrites(s: dict[str, Any]) -> str:
    """Rewritten pages, and which heal dropped the beliefs: with no discard, every one is the
    hit-query heal's (beliefs past a reported hit are dropped), not the discard heal's."""
    text = f"{s.get('rewrite_pages', 0):,} pages"
    by_discard, by_query = s.get("heal_dropped_beliefs"), s.get("hit_query_dropped_beliefs")
    if by_discard is None or by_query is None:
        return text
    return (
        f"{text} (beliefs dropped: {by_query:,} by the hit-query heal, {by_discard:,} by the "
        "discard heal)"
    )


def summary_lines(s: dict[str, Any], router: str | None = None) -> list[tuple[str, str]]:
    """(label, value with unit) for the figures a reader of one run looks at first; a cluster
    (more than one instance) adds its shape first and what its servers did to each other
    through the shared backend before the latencies."""
    prompt = s.get("prompt_tokens") or 0

    def tokens(key: str) -> str:
        value = s.get(key) or 0
        share = f" ({value / prompt:.1%} of prompt)" if prompt else ""
        return f"{value:,} tokens{share}"

    def seconds(key: str) -> str:
        value = s.get(key)
        return "-" if value is None else f"{value:.3f} s"

    loops = s.get("loops") or 0
    heal = s.get("heal_rate")
    lines = [
        ("requests", f"{s.get('requests', 0):,} ({s.get('requests_finished', 0):,} finished)"),
        ("prompt", f"{prompt:,} tokens"),
        ("device hits", tokens("device_hit_tokens")),
        ("storage (L3) loaded", tokens("l3_loaded_tokens")),
        ("recomputed", tokens("recomputed_tokens")),
        (
            "prefetches",
            f"{s.get('prefetch_issued', 0):,} issued, {s.get('prefetch_discarded', 0):,} "
            f"discarded (rate {_fmt(s.get('discard_rate'))})",
        ),
        (
            "repeated-failure loops",
            f"{loops:,}, heal rate {_fmt(heal)}, longest {s.get('loop_length_max', 0)} discards",
        ),
        ("wasted storage reads", size_text(float(s.get("wasted_read_bytes") or 0))),
        ("rewritten after a heal", _rewrites(s)),
        ("written to storage", size_text(float(s.get("written_bytes") or 0))),
        ("TTFT p50 / p99", f"{seconds('ttft_p50_s')} / {seconds('ttft_p99_s')}"),
        ("wall clock", f"{s.get('wall_s', 0):.2f} s ({s.get('events', 0):,} events)"),
    ]
    instances = s.get("instances") or 1
    if instances <= 1:
        return lines
    behind = f" behind a {router} router" if router else ""
    shape = [
        ("cluster", f"{instances:,} instances{behind}"),
        ("load imbalance", f"{_fmt(s.get('load_imbalance'))} (busiest's requests / mean)"),
    ]
    read = size_text(float(s.get("read_transfer_bytes") or 0))
    written = size_text(float(s.get("written_bytes") or 0))
    across = [
        (
            "L3 read across servers",
            f"{s.get('cross_instance_l3_hit_pages', 0):,} KV pages read from objects another "
            "server stored",
        ),
        (
            "cross-server rewrites",
            f"{s.get('cross_instance_rewrite_objects', 0):,} objects put that another server "
            "had stored",
        ),
        (
            "loops stale by other server",
            f"{s.get('loops_stale_by_other_instance', 0):,} of {loops:,} loops",
        ),
        ("storage traffic", f"read {read}, written {written}"),
    ]
    latency = next(i for i, (label, _) in enumerate(lines) if label == "TTFT p50 / p99")
    return shape + lines[:latency] + across + lines[latency:]


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


SWEEP_COLUMNS = ("discard_rate", "loops", "heal_rate", "l3_loaded_rate", "ttft_p99_s")
"""The summary keys `sweep` prints per grid point (points.csv has every one)."""
SWEEP_ROWS = 40
"""Grid points printed; the rest are in points.csv."""


def sweep_table(points: pd.DataFrame, target: str | None = None) -> str:
    """The grid points, one row each: the swept values, then each SWEEP_COLUMNS key's (and the
    target's) mean over seeds ± the half-width of its 95 % interval."""
    if points.empty:
        return "no grid point has a summary"
    swept = [str(c) for c in points.columns[: list(points.columns).index("metric")]]
    metrics = list(SWEEP_COLUMNS)
    if target:
        metric = target.replace("<", ">").split(">")[0].strip()
        metrics += [metric] if metric not in metrics else []
    known = set(points["metric"])
    metrics = [m for m in metrics if m in known]
    rows = [[*swept, *metrics]]
    groups = list(points.groupby("point", sort=True))
    for _, group in groups[:SWEEP_ROWS]:
        by_metric = {r["metric"]: r for r in group.to_dict("records")}
        head = group.iloc[0]
        rows.append([_fmt(head[k]) for k in swept] + [_spread(by_metric.get(m)) for m in metrics])
    widths = [max(len(x) for x in col) for col in zip(*rows, strict=True)]
    lines = ["  ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    if len(groups) > SWEEP_ROWS:
        lines.append(f"... {len(groups) - SWEEP_ROWS:,} more points in points.csv")
    return "\n".join(lines)


def _spread(row: Any) -> str:
    """'0.25 ± 0.03' (mean ± the half-width of the 95 % interval); the mean alone where there
    is no interval or no width (one seed, or every seed gave the same value)."""
    if row is None or _fmt(row["mean"]) == "-":
        return "-"
    low, high = row.get("ci_low"), row.get("ci_high")
    if _fmt(low) == "-" or _fmt(high) == "-" or low == high:
        return _fmt(row["mean"])
    return f"{_fmt(row['mean'])} ± {(high - low) / 2:.2g}"
