"""Findings of a sweep: each key metric's range over the grid, whether a categorical key's
values can be told apart, the target, and failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from sim.core.stats import parse_target
from sim.core.units import brief, number
from sim.outputs.findings import (
    capital,
    interval,
    join,
    label,
    plural,
    setting,
    short,
    where,
)

SWEEP_KEYS = (
    "discard_rate",
    "loops",
    "loop_length_max",
    "heal_rate",
    "wasted_read_bytes",
    "rewrite_pages",
    "recomputed_tokens",
    "ttft_p99_s",
    "l3_loaded_rate",
)
"""The metrics a sweep report ranges over (the target's metric is added when it is not one)."""


OVERLAP_KEYS = ("discard_rate", "heal_rate", "rewrite_pages", "wasted_read_bytes")
LISTED_POINTS = 6


def sweep_metrics(target: str | None) -> list[str]:
    keys = list(SWEEP_KEYS)
    if target:
        metric = parse_target(target)[0]
        if metric not in keys:
            keys.append(metric)
    return keys


def sweep_findings(
    points: pd.DataFrame, grid: Mapping[str, list[Any]], meta: Mapping[str, Any]
) -> list[str]:
    """Size of the sweep, the range of each key metric across points (with 95 % intervals),
    whether the values of a categorical key can be told apart, the target, and failures."""
    keys = list(grid)
    n_points = int(points["point"].nunique()) if not points.empty else 0
    seeds = int(points["n"].max()) if not points.empty else 0
    failed = list(meta.get("failed") or [])
    runs = number(meta.get("tasks"))
    head = f"{plural(n_points, 'grid point')} × {plural(seeds, 'seed')} ({runs} runs"
    sentences = [head + (f", {len(failed):,} failed)." if failed else ").")]
    target = meta.get("target")
    for key in sweep_metrics(target):
        rows = points[(points["metric"] == key) & points["mean"].notna()]
        if rows.empty:
            if key in set(points["metric"]):
                sentences.append(f"{capital(label(key))}: no value at any point.")
            continue
        records = rows.to_dict("records")
        low = min(records, key=lambda r: r["mean"])
        high = max(records, key=lambda r: r["mean"])
        if low["mean"] == high["mean"]:
            everywhere = (
                "at every point"
                if len(records) == n_points
                else f"at the {len(records)} of {n_points} points with a value"
            )
            sentences.append(f"{capital(label(key))}: {brief(key, low['mean'])} {everywhere}.")
            continue
        sentences.append(
            f"{capital(label(key))}: from {interval(key, low)} at {where(low, keys)} "
            f"to {interval(key, high)} at {where(high, keys)}."
        )
    sentences += _overlaps(points, grid)
    if target:
        sentences.append(_target(points, target, keys))
    for fail in failed[:LISTED_POINTS]:
        sentences.append(
            f"Failed: point {fail.get('values')} seed {fail.get('seed')}: {fail.get('error')}."
        )
    if len(failed) > LISTED_POINTS:
        sentences.append(
            f"{len(failed) - LISTED_POINTS:,} more failed runs are not listed here (sweep.json "
            "has every one)."
        )
    return sentences


def _more(listed: int) -> str:
    """What a list cut at LISTED_POINTS left out, said rather than dropped silently."""
    left = listed - LISTED_POINTS
    return f" and {left:,} more, not listed here (points.csv has every one)" if left > 0 else ""


def _numeric(values: Sequence[Any]) -> bool:
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values if v is not None
    )


def _overlaps(points: pd.DataFrame, grid: Mapping[str, list[Any]]) -> list[str]:
    """For each categorical swept key (a heal rule, a hit query): at how many settings of the
    other keys the 95 % intervals of its values share a common value, i.e. the sweep cannot
    tell them apart there."""
    sentences = []
    for key, values in grid.items():
        if _numeric(values) or len(values) < 2:
            continue
        others = [k for k in grid if k != key]
        for metric in OVERLAP_KEYS:
            rows = points[(points["metric"] == metric) & points["mean"].notna()]
            if rows.empty or rows["n"].max() < 2:
                continue
            groups = rows.groupby(others, dropna=False, sort=False) if others else [((), rows)]
            together, apart, unknown = 0, [], 0
            for _, group in groups:
                if len(group) < 2:
                    continue
                if not _has_intervals(group):
                    unknown += 1
                elif group["ci_low"].max() <= group["ci_high"].min():
                    together += 1
                else:
                    apart.append(where(group.iloc[0].to_dict(), others))
            total = together + len(apart)
            if not total:
                if unknown:
                    sentences.append(
                        f"{capital(label(metric))} under {short(key)}: one seed (or one value) "
                        "at each setting, no interval, so the sweep cannot tell them apart."
                    )
                continue
            names = join([setting(v) for v in values])
            over = f"settings of {join([short(k) for k in others])}" if others else "points"
            text = (
                f"The 95 % intervals of {label(metric)} under {short(key)} {names} overlap at "
                f"{together} of {total} {over}"
            )
            if apart:
                text += f"; they are apart at {'; '.join(apart[:LISTED_POINTS])}"
                text += _more(len(apart))
            if unknown:
                text += f"; at {unknown} more a value has one seed: no interval"
            sentences.append(text + ".")
    return sentences


def _has_intervals(group: pd.DataFrame) -> bool:
    """Every row of the group has an interval (two seeds or more with a value): only then can
    intervals be said to overlap or to be apart."""
    return bool(
        (group["n"] >= 2).all() and group["ci_low"].notna().all() and group["ci_high"].notna().all()
    )


def _target(points: pd.DataFrame, target: str, keys: Sequence[str]) -> str:
    metric, op, bound = parse_target(target)
    rows = points[(points["metric"] == metric) & points["mean"].notna()].to_dict("records")
    meets = [r for r in rows if (r["ci_low"] >= bound if op == ">=" else r["ci_high"] <= bound)]
    text = f"The target {target} holds with 95 % confidence at {len(meets)} of {len(rows)} points"
    if meets and len(meets) < len(rows):
        listed = "; ".join(where(r, keys) for r in meets[:LISTED_POINTS])
        text += f": {listed}" + _more(len(meets))
    return text + "."
