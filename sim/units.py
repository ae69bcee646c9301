"""Units of scenario keys, read from their names, and numbers typed with a unit on the command line.

Keys carry their unit in their name (`capacity_gb`, `swa_pages`, `mamba_slots`, `entries`), so
the unit an answer is printed in is derived from the key, never listed per key. Only keys in GB
take a unit suffix on the command line (`512MB`, `2GiB`): the one size a user is likely to have
in another unit, converted here once, so the rest of the program sees plain GB.
"""

from __future__ import annotations

import re

from sim.sizes import BYTE_UNITS, GB

UNIT_SUFFIXES = (
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


def unit_of(key: str) -> str:
    """The unit of a dotted key's values ('' when its name says none)."""
    leaf = key.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in UNIT_SUFFIXES if leaf.endswith(suffix)), "")


def with_unit(value: float, key: str) -> str:
    """`value` as the answer prints it: 6 significant digits and the key's unit."""
    text = str(int(value)) if float(value).is_integer() else f"{value:.6g}"
    unit = unit_of(key)
    return f"{text}{unit}" if unit in ("", "/s") else f"{text} {unit}"


def takes_size_units(key: str) -> bool:
    return unit_of(key) == "GB"


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
        unit = unit_of(key) or "its own unit"
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
