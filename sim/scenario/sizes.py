"""Sizes with units: a capacity planner thinks in bytes and tokens, the model in pages, slots
and GB.

Every key that sizes something accepts its own unit (a number) or a string with a unit: bytes
(`B`, `kB`, `MB`, `GB`, `TB`, powers of 1000; `KiB`, `MiB`, `GiB`, `TiB`, powers of 1024) or
`tokens`. The string is converted once, while a scenario document is read, using the object
sizes of the model it describes; the resolved configuration then holds plain numbers, and
`size_notes` says what each of them is in the other units (written beside them as comments).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sim.core.units import BYTE_UNITS, GB, size_text
from sim.model.pools import DEFAULT_PAGE_SIZE, KV, POOL_KINDS, Pool, Residency

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)\s*$")


@dataclass(frozen=True)
class SizeKey:
    """A dotted key that sizes something, in what unit, and what one unit holds."""

    key: str
    unit: str
    """`pages`, `slots` or `GB`."""
    unit_bytes: int
    """Bytes one unit holds (GB: 10**9)."""
    unit_tokens: float | None
    """Tokens one unit holds, exactly (a GB holds a fraction of a page); None when tokens do not
    size it (Mamba states)."""


def size_keys(doc: dict[str, Any], model: dict[str, Any] | None = None) -> Iterator[SizeKey]:
    """The size keys of a scenario document whose model section (or `model`: that section with
    a preset expanded) describes its pools."""
    model = doc.get("model") if model is None else model
    if not isinstance(model, dict):
        return
    pools = _pools(model)
    if KV not in pools:
        return
    page_size = _page_size(model)
    for name, pool in pools.items():
        per_page = pool.residency is Residency.PAGE_VALUES
        unit_tokens = page_size if per_page else None
        kind = POOL_KINDS[name]
        if kind.device_key is not None:
            unit_bytes = pool.object_bytes + (
                sum(p.object_bytes for p in pools.values() if p.rides_on_kv) if name == KV else 0
            )
            yield SizeKey(f"device.{kind.device_key}", kind.residency.unit, unit_bytes, unit_tokens)
        gb_tokens = None if not per_page else GB * page_size / pool.object_bytes
        yield SizeKey(f"storage.pools.{name}.capacity_gb", "GB", GB, gb_tokens)
    host_page_bytes = sum(p.object_bytes for p in pools.values() if p.residency.per_page)
    yield SizeKey("host.pages", "pages", host_page_bytes, page_size)


def _page_size(model: dict[str, Any]) -> int:
    page = model.get("page_size", DEFAULT_PAGE_SIZE)
    return page if isinstance(page, int) and not isinstance(page, bool) and page > 0 else 64


def _pools(model: dict[str, Any]) -> dict[str, Pool]:
    """The pools a raw model section describes well enough to size (others are left to the
    schema's own errors)."""
    page_size = _page_size(model)
    out: dict[str, Pool] = {}
    for name, kind in POOL_KINDS.items():
        raw = model.get(name)
        if not isinstance(raw, dict):
            continue
        try:
            spec = kind.spec.model_validate(raw)
            out[name] = Pool.of(kind, spec, page_size)
        except Exception:
            continue
    return out


class SizeError(ValueError):
    """A size string that cannot be read or converted; names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


def normalize_sizes(doc: dict[str, Any], model: dict[str, Any] | None = None) -> list[SizeError]:
    """Convert every size string of the document to its key's unit, in place; returns the
    strings that could not be converted (left as they are for the schema to refuse too)."""
    errors: list[SizeError] = []
    for size in list(size_keys(doc, model)):
        parent, leaf = _parent(doc, size.key)
        if parent is None or not isinstance(parent.get(leaf), str):
            continue
        try:
            parent[leaf] = convert(parent[leaf], size)
        except SizeError as exc:
            errors.append(exc)
    return errors


def _parent(doc: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    *path, leaf = key.split(".")
    node: Any = doc
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def convert(text: str, size: SizeKey) -> int | float:
    """`text` ('80GiB', '65536 tokens', '12 pages') in the key's own unit: whole pages and
    slots rounded down, GB as a float."""
    match = _SIZE.match(text)
    hint = expected(size)
    if match is None:
        raise SizeError(size.key, f"{text!r} is not a size: expected {hint}")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit in BYTE_UNITS and match.group(2).endswith("b"):
        raise SizeError(
            size.key,
            f"{text!r}: a lowercase b is a bit ({match.group(2)!r} reads as bits); sizes are "
            f"in bytes, with a capital B: expected {hint}",
        )
    if unit in BYTE_UNITS:
        amount = number * BYTE_UNITS[unit] / size.unit_bytes
    elif unit in ("token", "tokens"):
        if size.unit_tokens is None:
            raise SizeError(
                size.key, f"{text!r}: a {size.unit} is not sized in tokens; expected {hint}"
            )
        amount = number / size.unit_tokens
    elif unit.rstrip("s") == size.unit.rstrip("s").lower():
        amount = number
    else:
        raise SizeError(size.key, f"{text!r}: unknown unit {match.group(2)!r}; expected {hint}")
    if size.unit == "GB":
        return amount
    if not math.isfinite(amount) or amount >= 2**53:
        raise SizeError(size.key, f"{text!r} is too large")
    return int(amount)


def expected(size: SizeKey) -> str:
    """What a size key accepts, for messages."""
    own = "GB (1e9 bytes) as a number" if size.unit == "GB" else f"{size.unit} (a whole number)"
    tokens = "" if size.unit_tokens is None else " or tokens"
    units = "bytes (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    return f"{own}, or a number with a unit: {units}{tokens}, e.g. '8GiB'"


def size_notes(doc: dict[str, Any]) -> dict[str, str]:
    """For each size key with a value, what it is in the other units (for the resolved
    configuration's comments)."""
    notes: dict[str, str] = {}
    for size in size_keys(doc):
        parent, leaf = _parent(doc, size.key)
        value = None if parent is None else parent.get(leaf)
        if not isinstance(value, int | float) or isinstance(value, bool) or value >= 2**63:
            continue
        parts = []
        if size.unit_tokens is not None and size.unit != "GB":
            parts.append(f"{int(value) * size.unit_tokens:,} tokens")
        elif size.unit_tokens is not None:
            parts.append(f"{value * size.unit_tokens:,.0f} tokens")
        parts.append(size_text(value * size.unit_bytes))
        notes[size.key] = ", ".join(parts)
    return notes


def annotate_yaml(text: str, notes: dict[str, str]) -> str:
    """Append `# note` to the lines of a block-style YAML mapping whose dotted key has one (a
    key whose value is a block list is noted on its own line)."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        key, sep, _ = stripped.partition(":")
        if sep and key and not stripped.startswith(("-", "#")):
            while stack and stack[-1][0] >= indent:
                stack.pop()
            dotted = ".".join([*(k for _, k in stack), key])
            if dotted in notes:
                line = f"{line}  # {notes[dotted]}"
            stack.append((indent, key))
        out.append(line)
    return "\n".join(out) + "\n"
