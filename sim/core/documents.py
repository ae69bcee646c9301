"""Scenario documents: safe YAML with duplicate keys, self-referring aliases and binary data
refused, `--set dotted.key=value` overrides applied to the plain mapping before validation, and
defaults layered under what a document writes (a model preset's pool specs).

Every failure is a `ScenarioError` naming the file (or `--set`) and, where one is known, the
dotted key and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from sim.core.safe_io import UnreadableFile, read_text_bounded
from sim.core.spec import ScenarioError


def _check_document(
    node: yaml.Node | None,
    path: str = "",
    active: frozenset[int] = frozenset(),
    checked: set[int] | None = None,
) -> None:
    """Refuse, naming the dotted key: duplicate mapping keys (YAML would silently keep the
    last), aliases that contain themselves, and binary data (`!!binary` becomes bytes, which no
    scenario value is and which a value typed loosely, like a sweep grid's, would let through).

    An alias is the same node as its anchor, so each node is checked once (`checked`): a few
    lines of nested aliases ("billion laughs") stay linear in the text, not exponential."""
    checked = set() if checked is None else checked
    if id(node) in active:
        raise ScenarioError("", path or None, "a YAML alias refers to itself")
    if id(node) in checked:
        return
    checked.add(id(node))
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:binary":
        line = node.start_mark.line + 1
        raise ScenarioError("", path or None, f"binary data is not a scenario value (line {line})")
    active = active | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            dotted = f"{path}.{key}" if path else key
            if key in seen:
                line = key_node.start_mark.line + 1
                if key == "<<":
                    raise ScenarioError(
                        "",
                        dotted,
                        f"two merge keys in one mapping (line {line}): merge several "
                        "with one list, <<: [*a, *b]",
                    )
                raise ScenarioError("", dotted, f"duplicate key (line {line})")
            seen.add(key)
            _check_document(value_node, dotted, active, checked)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_document(item, f"{path}.{i}" if path else str(i), active, checked)


LOADER_ERRORS = (
    yaml.YAMLError,
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
)
"""What PyYAML can raise on hostile input besides its own errors (bad dates, tags on the wrong
kind of scalar, huge integers, deep nesting)."""


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader whose value errors (a bad date, a tag on the wrong scalar, a huge integer)
    become YAML errors that carry the line of the offending node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value ({type(exc).__name__}: {exc})", node.start_mark
            ) from None


MAX_ALIAS_EXPANSION = 100_000
"""Values that aliases may add to a document when expanded. Loading keeps an alias as a shared
reference, but validation, copies and messages walk the expanded tree: nine lines of nested
aliases would be 387 million values. A document written out is bounded by its file size."""


def _check_expansion(root: yaml.Node | None) -> None:
    """Refuse a document whose aliases expand it by more than MAX_ALIAS_EXPANSION values, counted
    without expanding (each node's expanded size is computed once)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a cycle is refused by _check_document
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        sizes[id(node)] = total
        return total

    if root is None:
        return
    expanded = size(root)
    if expanded - len(sizes) > MAX_ALIAS_EXPANSION:
        raise ScenarioError(
            "",
            None,
            f"YAML aliases expand this document to {expanded:,} values, over the "
            f"{MAX_ALIAS_EXPANSION:,} aliases may add (write the values out, or use fewer aliases)",
        )


def _safe_load(text: str) -> Any:
    """Safe YAML (no object-constructing tags), checked by `_check_document` and
    `_check_expansion`."""
    try:
        root = yaml.compose(text, Loader=_SafeLoader)
        _check_document(root)
        _check_expansion(root)
        return yaml.load(text, Loader=_SafeLoader)
    except RecursionError:
        raise yaml.YAMLError(f"nested too deeply (line {_deep_line(text)})") from None


def _deep_line(text: str, limit: int = 200) -> int:
    """The first line where brackets and indentation nest past `limit` levels (for messages)."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        indent = (len(line) - len(line.lstrip(" "))) // 2
        for char in line:
            depth += (char in "[{") - (char in "]}")
            if depth + indent > limit:
                return lineno
    return 1


def parse_override(text: str) -> tuple[str, Any]:
    """`dotted.key=value` with the value read as a YAML scalar or flow collection."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError("--set", text, "expected dotted.key=value")
    try:
        value = _safe_load(raw) if raw.strip() else None
    except ScenarioError as exc:
        where = key if exc.key is None else f"{key}.{exc.key}"
        raise ScenarioError("--set", where, exc.message) from None
    except LOADER_ERRORS as exc:
        raise ScenarioError("--set", key, f"value is not valid YAML: {_brief(exc)}") from None
    if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
        value = float(value)
    return key.strip(), value


_EXPONENT_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")
"""`1e9`, `2.5E-3`: numbers in YAML 1.2 and to every user, strings to PyYAML's YAML 1.1
(which wants `1.0e+9`); a `--set` value so written is read as the number it means."""


def value_at(doc: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key of a document (None where any part is missing)."""
    node: Any = doc
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def apply_override(doc: dict[str, Any], key: str, value: Any, source: str = "--set") -> None:
    """Set `doc[a][b][c] = value` for key `a.b.c`, creating mappings that do not exist yet."""
    parts = key.split(".")
    node = doc
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(source, ".".join(parts[: i + 1]), "is not a mapping")
        node = child
    node[parts[-1]] = value


def overlapping(keys: Iterable[str]) -> tuple[str, str] | None:
    """The first (ancestor, descendant) pair among dotted keys where one lies inside the other
    (`cluster` and `cluster.instances`), or None. Both set on one point, the later one writes
    into (or over) the other's value, so a point's label no longer says what it ran."""
    seen = set(keys)
    for key in sorted(seen):
        parts = key.split(".")
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) in seen:
                return ".".join(parts[:i]), key
    return None


def layered(defaults: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` over `defaults`, mapping by mapping: what `doc` writes wins (null included), a
    mapping on both sides is layered in turn, and keys only in `defaults` are kept. Neither
    argument is changed."""
    merged = dict(defaults)
    for key, value in doc.items():
        below = merged.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            value = layered(below, value)
        merged[key] = value
    return merged


def read_document(path: Path) -> dict[str, Any]:
    """Read a scenario file into a plain mapping, or raise a ScenarioError naming the file."""
    source = str(path)
    try:
        text = read_text_bounded(path)
    except UnreadableFile as exc:
        raise ScenarioError(source, None, f"cannot read file: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, None, f"cannot read file: {exc}") from None
    try:
        doc = _safe_load(text)
    except ScenarioError as exc:
        raise ScenarioError(source, exc.key, exc.message) from None
    except LOADER_ERRORS as exc:
        raise ScenarioError(source, None, f"not valid YAML: {_brief(exc)}") from None
    if doc is None:
        raise ScenarioError(source, None, "the file is empty")
    if not isinstance(doc, dict):
        raise ScenarioError(source, None, f"top level must be a mapping, not {type(doc).__name__}")
    return doc


def _brief(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) if isinstance(exc, yaml.YAMLError) else f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."


PATH_KEYS = (("workload", "path"), ("hardware", "calibration"))
"""The keys that name files: a trace, a calibration file."""


def resolve_paths(doc: dict[str, Any], base_dir: Path) -> None:
    """Make relative file paths (`workload.path`, `hardware.calibration`) relative to
    `base_dir`, in place (absolute paths stay)."""
    for section, key in PATH_KEYS:
        part = doc.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str):
            path = Path(part[key])
            if not path.is_absolute():
                part[key] = str(base_dir.resolve() / path)
