"""Findings: plain sentences computed from a result directory's numbers.

A reader of a report should not have to know which of seventy summary keys answer the three
questions the tool exists for (what looped, what healed, what it cost), nor compare columns by
eye. Each kind of result has its module (findings_run, findings_compare, findings_sweep,
findings_capacity); this one holds the words they share; the report only lays them out.
Every number in a sentence comes from the data passed in, never from a threshold of opinion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sim.core.units import cell, is_missing, number

LABELS = {
    "prefetch_discarded": "discarded prefetches",
    "discard_rate": "discard rate",
    "loops": "loops",
    "loop_length_mean": "mean loop length",
    "loop_length_max": "longest loop",
    "heal_rate": "heal rate",
    "time_to_heal_p50_s": "median time to heal",
    "wasted_read_bytes": "wasted storage reads",
    "rewrite_pages": "rewritten KV pages",
    "rewrite_bytes": "rewrite bytes",
    "recomputed_tokens": "recomputed tokens",
    "ttft_p99_s": "TTFT p99",
    "ttft_p50_s": "TTFT p50",
    "l3_loaded_rate": "share of prompt tokens restored from storage",
}


Row = Mapping[Any, Any]
"""A record of points.csv or evaluations.csv (pandas types its keys as Hashable)."""


def label(key: str) -> str:
    return LABELS.get(key, key)


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def percent(part: float, whole: float) -> str:
    return f"{part / whole * 100:.1f} %"


def join(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def short(key: str) -> str:
    return key.split(".")[-1]


def setting(value: Any) -> str:
    """A swept value as the scenario file would say it (null for None)."""
    return "null" if is_missing(value) else number(value)


def where(row: Row, keys: Sequence[str]) -> str:
    return ", ".join(f"{short(k)}={setting(row[k])}" for k in keys) or "the only point"


def interval(key: str, row: Row) -> str:
    """'0.0958 (95 % CI 0.083 to 0.1086)'."""
    mean = cell(key, row["mean"])
    if (
        int(row.get("n") or 0) < 2
        or is_missing(row.get("ci_low"))
        or is_missing(row.get("ci_high"))
    ):
        return f"{mean} (one seed: no interval)"
    return f"{mean} (95 % CI {cell(key, row['ci_low'])} to {cell(key, row['ci_high'])})"
