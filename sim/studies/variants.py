"""The variants `compare` runs: parsed from `--heal`, `--vary` or `--variant`, checked whole before
anything runs.

Three spellings, one result, a `VariantSet`: the label column of comparison.csv and, per variant,
a label and the `KEY=VALUE` overrides it applies on top of the scenario and `--set`.

- `--vary KEY=A,B,...`: one key at several values; the column is the key, each label its value.
- `--heal A,B`: the same as `--vary heal=A,B` (the column stays `heal`, as it always was).
- `--variant LABEL:KEY=VALUE[;KEY=VALUE...]`, repeated: any keys per variant; the column is
  `variant`. A label with nothing after the colon runs the scenario as it is.

Values are YAML, as with `--set`; commas and semicolons inside brackets or quotes do not split
(`--vary storage.pools.swa.put_outage_s=[0,60],[0,120]`). Every variant runs on the same seed,
so the seed cannot be varied. Labels become run directory names through `run_dir_names`, which
keeps any label safe on disk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sim.core.documents import parse_override
from sim.core.spec import ScenarioError
from sim.results.layout import COMPARISON, VARIANTS

DEFAULT_HEALS = "none,keep_pages"
RESERVED_NAMES = frozenset({COMPARISON, "comparison.png", "comparison.svg", VARIANTS})
"""Files of a compare directory that a run directory must not be named like."""


@dataclass(frozen=True)
class Variant:
    label: str
    sets: tuple[str, ...]
    """`KEY=VALUE` overrides, as `--set` takes them."""

    def values(self) -> dict[str, Any]:
        return dict(parse_override(text) for text in self.sets)


@dataclass(frozen=True)
class VariantSet:
    option: str
    """The option the variants came from, for messages."""
    column: str
    """The first column of comparison.csv: the key, `heal`, or `variant`."""
    variants: tuple[Variant, ...]


def variant_set(heal: str | None, vary: tuple[str, ...], specs: tuple[str, ...]) -> VariantSet:
    """The variants of one `compare` invocation; without any option, `--heal none,keep_pages`."""
    given = [name for name, v in (("--heal", heal), ("--vary", vary), ("--variant", specs)) if v]
    if len(given) > 1:
        raise ScenarioError(
            given[1],
            None,
            f"cannot be combined with {given[0]} (give one of --heal, --vary, --variant; "
            "--variant sets several keys per variant)",
        )
    if specs:
        found = VariantSet("--variant", "variant", tuple(_spec(text) for text in specs))
    elif vary:
        if len(vary) > 1:
            raise ScenarioError(
                "--vary",
                None,
                f"given {len(vary)} times; it varies one key (to vary several, give one "
                "--variant 'LABEL:KEY=VALUE;KEY=VALUE' per variant)",
            )
        found = _vary(vary[0], "--vary")
    else:
        found = _vary(f"heal={heal or DEFAULT_HEALS}", "--heal")
    _check_labels(found)
    return found


def _vary(text: str, option: str) -> VariantSet:
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(option, None, f"{text!r} is not KEY=A,B,... (e.g. heal=none,exact)")
    _check_key(key, option)
    shown = repr(rest if option == "--heal" else text)
    pieces = split_outside_brackets(rest, ",")
    if not any(p.strip() for p in pieces):
        example = "--heal none,keep_pages" if option == "--heal" else f"--vary {key}=A,B"
        raise ScenarioError(option, None, f"no values in {shown} (give e.g. {example})")
    variants: list[Variant] = []
    seen: dict[tuple[bool, Any], str] = {}
    for piece in pieces:
        if not piece.strip():
            raise ScenarioError(option, None, f"an empty value in {shown} (null is no value)")
        _, value = _parse(f"{key}={piece}", option)
        label = value if isinstance(value, str) else json.dumps(value)
        same = seen.setdefault((isinstance(value, bool), _hashable(value)), label)
        if same != label:
            raise ScenarioError(
                option, None, f"{label!r} is the same value as {same!r}; give each value once"
            )
        variants.append(Variant(label, (f"{key}={piece.strip()}",)))
    column = "heal" if option == "--heal" else key
    return VariantSet(option, column, tuple(variants))


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value


def _spec(text: str) -> Variant:
    label, colon, rest = text.partition(":")
    if not colon or "=" in label:
        raise ScenarioError(
            "--variant",
            None,
            f"{text!r} has no label: give LABEL:KEY=VALUE[;KEY=VALUE...], e.g. "
            "'fast-reads:storage.read_gbps=40;storage.write_gbps=20'",
        )
    label = label.strip()
    if not label:
        raise ScenarioError("--variant", None, f"{text!r} has an empty label before the colon")
    sets: list[str] = []
    keys: set[str] = set()
    for piece in (p.strip() for p in split_outside_brackets(rest, ";")):
        if not piece:
            continue
        key, _ = _parse(piece, f"--variant {label}")
        _check_key(key, f"--variant {label}")
        if key in keys:
            raise ScenarioError(f"--variant {label}", None, f"sets {key} twice")
        keys.add(key)
        sets.append(piece)
    return Variant(label, tuple(sets))


def _parse(text: str, option: str) -> tuple[str, Any]:
    try:
        return parse_override(text)
    except ScenarioError as exc:
        raise ScenarioError(option, exc.key, exc.message) from None


def _check_key(key: str, option: str) -> None:
    if key == "seed":
        raise ScenarioError(
            option,
            None,
            "every variant runs on the same seed, so the seed cannot be varied (give it once "
            "with --seed)",
        )


def _check_labels(found: VariantSet) -> None:
    seen: set[str] = set()
    for variant in found.variants:
        if variant.label in seen:
            raise ScenarioError(
                found.option,
                None,
                f"{variant.label!r} is given twice; every variant needs its own label",
            )
        seen.add(variant.label)


def split_outside_brackets(text: str, sep: str) -> list[str]:
    """Split on `sep` where it is not inside [], {} or quotes (YAML flow values keep theirs)."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(0, depth - 1)
        elif char == sep and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    return pieces


def run_dir_names(labels: list[str]) -> list[str]:
    """A directory name per label: the label where it is a safe name (heal rules stay as they
    are), otherwise its unsafe characters replaced; unique, also on case-insensitive disks."""
    names: list[str] = []
    taken = {n.lower() for n in RESERVED_NAMES}
    for label in labels:
        base = re.sub(r"[^A-Za-z0-9_.=+-]", "_", label).lstrip(".-")[:80] or "variant"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name.lower())
        names.append(name)
    return names
