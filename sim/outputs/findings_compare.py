"""Findings of a comparison: how each variant differs from the first, and where most."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sim.core.units import brief, is_missing, metric_text, metric_unit
from sim.outputs.findings import (
    capital,
    join,
    label,
)

COMPARE_KEYS = (
    "prefetch_discarded",
    "loops",
    "loop_length_max",
    "heal_rate",
    "time_to_heal_p50_s",
    "wasted_read_bytes",
    "rewrite_pages",
    "recomputed_tokens",
    "ttft_p99_s",
)


def compare_findings(table: pd.DataFrame, column: str) -> list[str]:
    """How the variants (rows of comparison.csv, named in `column`) differ from the first one,
    metric by metric, and where they differ most."""
    rows = table.to_dict("records")
    names = [str(r[column]) for r in rows]
    if len(rows) < 2:
        return [f"Only one variant ({', '.join(names)}): nothing to compare."]
    base = names[0]
    sentences, same = [], []
    spreads: list[tuple[float, str]] = []
    for key in (k for k in COMPARE_KEYS if k in table.columns):
        values = [r[key] for r in rows]
        present = [float(v) for v in values if not is_missing(v)]
        if not present:
            continue
        if len(present) == len(values) and min(present) == max(present):
            same.append(f"{label(key)} ({metric_text(key, values[0])})")
            continue
        items = [f"{base} {brief(key, values[0])}"]
        for name, value in zip(names[1:], values[1:], strict=True):
            delta = _delta(key, values[0], value)
            items.append(f"{name} {brief(key, value)}" + (f" ({delta})" if delta else ""))
        sentences.append(f"{capital(label(key))}: {'; '.join(items)}.")
        if metric_unit(key) != "ratio" and min(present) > 0:
            spreads.append((max(present) / min(present), key))
    if spreads:
        ratio, key = max(spreads)
        low = min(range(len(rows)), key=lambda i: _sortable(rows[i][key]))
        high = max(range(len(rows)), key=lambda i: _sortable(rows[i][key], -np.inf))
        sentences.insert(
            0,
            f"The variants differ most in {label(key)}: {ratio:.3g}× from "
            f"{metric_text(key, rows[low][key])} under {names[low]} to "
            f"{metric_text(key, rows[high][key])} under {names[high]}.",
        )
    if same:
        sentences.append(f"The same under every variant: {join(same)}.")
    return sentences


def _sortable(value: Any, missing: float = np.inf) -> float:
    return missing if is_missing(value) else float(value)


def _delta(key: str, base: Any, value: Any) -> str:
    """A change against the first variant: a difference for ratios, a factor or percentage for
    amounts."""
    if is_missing(base) or is_missing(value):
        return ""
    base, value = float(base), float(value)
    if value == base:
        return "the same"
    if metric_unit(key) == "ratio":
        return f"{value - base:+.3g}"
    if base == 0:
        return "none under the first"
    factor = value / base
    if factor >= 2 or factor <= 0.5:
        return f"{factor:.3g}×"
    return f"{(factor - 1) * 100:+.1f} %"
