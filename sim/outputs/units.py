"""Units of summary keys, read from their names, and how the report writes their values.

Summary keys carry their unit in their suffix (`_tokens`, `_bytes`, `_s`, ...; docs/metrics.md),
so a small table of suffixes gives every key, per-pool counters included, a unit without a
second list of keys to keep in step. Bytes are written in decimal units (GB as the plots use).
"""

from __future__ import annotations

import math
from typing import Any

BY_KEY = {
    "loop_length_mean": "discards",
    "loop_length_max": "discards",
    "requests": "requests",
    "loops": "loops",
    "events": "events",
    "instances": "servers",
    "load_imbalance": "ratio",
}
BY_SUFFIX = (
    ("_bytes", "bytes"),
    ("_tokens", "tokens"),
    ("_s", "s"),
    ("_rate", "ratio"),
    ("_pages", "pages"),
    ("_objects", "objects"),
    ("_slots", "slots"),
    ("_beliefs", "beliefs"),
)
BY_PREFIX = (
    ("prefetch_", "prefetches"),
    ("requests_", "requests"),
    ("loops_", "loops"),
    ("storage_", "objects"),
)
BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
SINGULAR = {"prefetches": "prefetch"}
MISSING = "–"


def unit_of(key: str) -> str:
    """'wasted_read_bytes' -> 'bytes'; a per-pool mean ('..._tokens_mean') takes its quantity's
    unit; anything unnamed is a plain 'count'."""
    if key in BY_KEY:
        return BY_KEY[key]
    stem = key.removesuffix("_mean")
    for suffix, unit in BY_SUFFIX:
        if stem.endswith(suffix):
            return unit
    for prefix, unit in BY_PREFIX:
        if key.startswith(prefix):
            return unit
    return "count"


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def human_bytes(value: float) -> str:
    for name, scale in BYTE_UNITS:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {name}"
    return f"{value:.4g} B"


def number(value: Any) -> str:
    """Whole numbers with thousands separators, others to four significant digits."""
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e3 else f"{value:.4g}"
    return str(value)


def cell(key: str, value: Any) -> str:
    """A value for a table whose unit is in its own column (bytes still read as GB)."""
    if is_missing(value):
        return MISSING
    if unit_of(key) == "bytes" and isinstance(value, int | float):
        return human_bytes(float(value))
    return number(value)


def brief(key: str, value: Any) -> str:
    """A value beside a label that already names what is counted: the unit only when the label
    cannot say it (seconds; bytes carry theirs)."""
    text = cell(key, value)
    return f"{text} s" if unit_of(key) == "s" and text != MISSING else text


def with_unit(key: str, value: Any) -> str:
    """A value for a sentence: '1,402 pages', '0.2385 s', '12.26 GB', '0.9813'."""
    text = cell(key, value)
    unit = unit_of(key)
    if text == MISSING or unit in ("bytes", "ratio", "count"):
        return text
    if unit == "s":
        return f"{text} s"
    if text == "1":
        unit = SINGULAR.get(unit, unit.removesuffix("s"))
    return f"{text} {unit}"
