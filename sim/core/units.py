"""Units: of bytes, of scenario keys (parameters) and of summary keys (metrics), read from their
names, and how numbers are written with them.

Keys carry their unit in their name: a parameter (`capacity_gb`, `swa_pages`, `entries`) and a
metric (`wasted_read_bytes`, `ttft_p99_s`, `heal_rate`; docs/metrics.md) alike, so the unit a
value is written in is derived from its key, never listed per key. The two vocabularies differ
(a parameter's `_gb` is GB, a metric's byte counts are bytes), so each has its own table and
its own pair of functions: `param_unit` / `param_text`, `metric_unit` / `metric_text`.

Only parameters in GB take a unit suffix on the command line (`512MB`, `2GiB`): the one size a
user is likely to have in another unit, converted here once, so the rest of the program sees
plain GB. Byte sizes are decimal (GB = 1e9 bytes) except where a size is shown beside the
binary unit a memory is bought in (`size_text`: '36.15 GiB (38.82 GB)').
"""

from __future__ import annotations

import math
import re
from typing import Any

# ---------------------------------------------------------------- bytes

BYTE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
"""Byte units scenario files and the command line accept (case-insensitive)."""
GB = 10**9
"""Bandwidths and capacities are in gigabytes (1e9 bytes), as storage vendors quote them."""
_DECIMAL = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def bytes_text(value: float) -> str:
    """Bytes in a decimal unit, four significant digits: '12.26 GB'."""
    for name, scale in _DECIMAL:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {name}"
    return f"{value:.4g} B"


def size_text(n: float) -> str:
    """Bytes with a binary unit (GiB) and the decimal GB beside it when they differ."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit} ({n / GB:,.2f} GB)"
    return f"{n:,.0f} B"


# ---------------------------------------------------------------- parameters (scenario keys)

PARAM_UNITS = (
    ("_gbps", "GB/s"),
    ("_gb", "GB"),
    ("_ms", "ms"),
    ("_tokens_per_s", "tokens/s"),
    ("_per_s", "/s"),
    ("_s", "s"),
    ("_pages", "pages"),
    ("_slots", "slots"),
    ("_tokens", "tokens"),
    ("_bytes", "bytes"),
    ("entries", "entries"),
    ("_attempts", "attempts"),
    ("_prob", ""),
)
"""Key-name endings and the unit they mean, most specific first (`_gbps` before `_s`)."""

GB_PER_UNIT = {
    name: BYTE_UNITS[name.lower()] / GB for name in ("GB", "MB", "TB", "GiB", "MiB", "TiB")
}
"""Size suffixes a `_gb` key accepts, in GB (1e9 bytes) each: the byte units scenario files
take, so the two can never disagree."""

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_QUANTITY = re.compile(rf"\s*({_NUMBER.pattern})\s*([A-Za-z]+)?\s*")


def param_unit(key: str) -> str:
    """The unit of a dotted scenario key's values ('' when its name says none)."""
    leaf = key.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in PARAM_UNITS if leaf.endswith(suffix)), "")


def param_text(key: str, value: float) -> str:
    """A parameter's value as an answer prints it: 6 significant digits and the key's unit."""
    text = str(int(value)) if float(value).is_integer() else f"{value:.6g}"
    unit = param_unit(key)
    return f"{text}{unit}" if unit in ("", "/s") else f"{text} {unit}"


def takes_size_units(key: str) -> bool:
    return param_unit(key) == "GB"


def parse_quantity(text: str, key: str) -> int | float:
    """A command-line number for `key`: an int when written as one, a float otherwise; a `_gb` key
    also takes a size with a unit (`512MB` -> 0.512), which is always a float.

    Raises ValueError with a sentence saying what is wrong and what to give instead.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        hint = ", or a size such as 512MB, 2GiB or 1.5TB" if takes_size_units(key) else ""
        raise ValueError(
            f"{text.strip()!r} is not a number (give a number such as 0.5, 100 or 2e3{hint})"
        )
    number, suffix = match.groups()
    if suffix is None:
        plain = re.fullmatch(r"[+-]?\d+", number)
        value: int | float = int(number) if plain else float(number)
    elif not takes_size_units(key):
        unit = param_unit(key) or "its own unit"
        raise ValueError(
            f"{text.strip()!r} has a unit, but {key} is counted in {unit}: only keys ending in "
            f"_gb take {', '.join(GB_PER_UNIT)}; give a plain number"
        )
    elif suffix not in GB_PER_UNIT:
        raise ValueError(
            f"{text.strip()!r}: unknown unit {suffix!r} (give one of {', '.join(GB_PER_UNIT)})"
        )
    else:
        value = float(number) * GB_PER_UNIT[suffix]
    if abs(value) == float("inf"):
        raise ValueError(f"{text.strip()!r} is too large")
    return value


PARAM_HINTS = (
    ("_gbps", "GB/s (1e9 bytes per second)"),
    ("_fail_prob", "a probability in [0, 1]"),
    ("_per_s", "a rate per second"),
    ("_ms", "milliseconds"),
    ("_s", "seconds"),
    ("bytes_per_token", "bytes per token"),
    ("state_bytes", "bytes"),
    ("_tokens", "tokens"),
    ("_attempts", "re-issues per request"),
)
"""What a bad value of a key with these endings should have been, for error messages."""


def param_hint(key: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    return next((hint for suffix, hint in PARAM_HINTS if leaf.endswith(suffix)), "")


# ---------------------------------------------------------------- metrics (summary keys)

METRIC_UNITS_BY_KEY = {
    "loop_length_mean": "discards",
    "loop_length_max": "discards",
    "requests": "requests",
    "loops": "loops",
    "events": "events",
    "instances": "servers",
    "load_imbalance": "ratio",
}
METRIC_UNITS_BY_SUFFIX = (
    ("_bytes", "bytes"),
    ("_tokens", "tokens"),
    ("_s", "s"),
    ("_rate", "ratio"),
    ("_pages", "pages"),
    ("_objects", "objects"),
    ("_slots", "slots"),
    ("_beliefs", "beliefs"),
)
METRIC_UNITS_BY_PREFIX = (
    ("prefetch_", "prefetches"),
    ("requests_", "requests"),
    ("loops_", "loops"),
    ("storage_", "objects"),
)
SINGULAR = {"prefetches": "prefetch"}
MISSING = "–"


def metric_unit(key: str) -> str:
    """'wasted_read_bytes' -> 'bytes'; a per-pool mean ('..._tokens_mean') takes its quantity's
    unit; anything unnamed is a plain 'count'."""
    if key in METRIC_UNITS_BY_KEY:
        return METRIC_UNITS_BY_KEY[key]
    stem = key.removesuffix("_mean")
    for suffix, unit in METRIC_UNITS_BY_SUFFIX:
        if stem.endswith(suffix):
            return unit
    for prefix, unit in METRIC_UNITS_BY_PREFIX:
        if key.startswith(prefix):
            return unit
    return "count"


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


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
    if metric_unit(key) == "bytes" and isinstance(value, int | float):
        return bytes_text(float(value))
    return number(value)


def brief(key: str, value: Any) -> str:
    """A value beside a label that already names what is counted: the unit only when the label
    cannot say it (seconds; bytes carry theirs)."""
    text = cell(key, value)
    return f"{text} s" if metric_unit(key) == "s" and text != MISSING else text


def metric_text(key: str, value: Any) -> str:
    """A value for a sentence: '1,402 pages', '0.2385 s', '12.26 GB', '0.9813'."""
    text = cell(key, value)
    unit = metric_unit(key)
    if text == MISSING or unit in ("bytes", "ratio", "count"):
        return text
    if unit == "s":
        return f"{text} s"
    if text == "1":
        unit = SINGULAR.get(unit, unit.removesuffix("s"))
    return f"{text} {unit}"
