"""How a validation problem is told: the dotted key, what was wrong, the value got, the unit
the key expects and, for a misspelt key or choice, the nearest known one."""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import Any, get_args

from sim.cluster.routing import DEFAULT_ROUTER, ROUTERS
from sim.core.registry import Registry
from sim.core.spec import KeyedError
from sim.core.units import param_hint
from sim.scenario.sizes import expected, size_keys
from sim.workload.catalog import WORKLOAD_KINDS


def describe(err: Any, doc: dict[str, Any], schema: Any) -> tuple[str | None, str]:
    """A pydantic error as (dotted key, message with the value got, the unit and a guess)."""
    loc = err["loc"]
    ctx_error = err.get("ctx", {}).get("error")
    if isinstance(ctx_error, KeyedError):
        return ctx_error.key, str(ctx_error).split(": ", 1)[1]
    parts = [str(p) for i, p in enumerate(loc) if not _is_union_tag(p, loc[:i]) and p != "[key]"]
    key = ".".join(parts) if loc else None
    kind = err["type"]
    if kind == "extra_forbidden":
        guess = nearest(parts[-1] if parts else "", _known_keys(parts[:-1], doc, schema))
        owners = _tagged_owners(parts)
        if owners:
            return key, f"unknown key here: it is a key of {' and '.join(owners)}"
        return key, "unknown key" + (f"; did you mean {guess!r}?" if guess else "")
    if kind == "missing":
        return key, "required key is missing"
    message = "must be true or false" if kind in ("bool_type", "bool_parsing") else err["msg"]
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        key = f"{key}.{str(ctx.get('discriminator', '')).strip(chr(39))}"
        expected_tags = str(ctx.get("expected_tags", ""))
        message = f"must be one of {expected_tags.replace(chr(39), '')}"
        guess = nearest(str(ctx.get("tag")), re.findall(r"'([^']*)'", expected_tags))
        message += f"; did you mean {guess!r}?" if guess else ""
        return key, f"{message} (got {_brief_repr(ctx.get('tag'))})"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        guess = nearest(str(err.get("input")), choices)
        if guess:
            message += f"; did you mean {guess!r}?"
    hint = _unit_hint(key or "", doc)
    got = err.get("input")
    if kind not in ("model_type", "dict_type", "model_attributes_type") and not isinstance(
        got, dict
    ):
        message += f" (got {_brief_repr(got)}{'; expected ' + hint if hint else ''})"
    return key, message


def _brief_repr(value: Any) -> str:
    """A bad value, briefly: one built from nested YAML aliases can be astronomically large."""
    echo = reprlib.Repr()
    echo.maxlevel, echo.maxlist, echo.maxdict = 2, 4, 4
    echo.maxstring = echo.maxother = 60
    return echo.repr(value)


def _unit_hint(key: str, doc: dict[str, Any]) -> str:
    for size in size_keys(doc):
        if size.key == key:
            return expected(size)
    return param_hint(key)


def nearest(word: str, known: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _known_keys(path: list[str], doc: dict[str, Any], schema: Any) -> list[str]:
    """The keys the schema accepts at a dotted path (for 'did you mean')."""
    model: Any = schema
    node: Any = doc
    for part in path:
        model = field_model(model, part, node)
        node = node.get(part) if isinstance(node, dict) else None
        if model is None:
            return []
    fields = getattr(model, "model_fields", None)
    return list(fields) if fields else []


def field_model(model: Any, part: str, node: Any) -> Any:
    """The model class of one field (through Optional, unions and `dict[str, Model]`)."""
    fields = getattr(model, "model_fields", None)
    if fields is None:
        args = get_args(model)
        return args[1] if len(args) == 2 and args[0] is not None else None
    field = fields.get(part)
    if field is None:
        return None
    for registry, tag, default in _TAGGED.get(part, ()):
        name = mapping(mapping(node).get(part)).get(tag, default)
        return registry.get(name) if isinstance(name, str) else None
    candidates = [field.annotation, *get_args(field.annotation)]
    for candidate in candidates:
        if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
            return candidate
        if get_args(candidate) and getattr(candidate, "__origin__", None) is dict:
            return candidate
    return None


_TAGGED: dict[str, tuple[tuple[Registry[Any], str, str | None], ...]] = {
    "workload": ((WORKLOAD_KINDS, "kind", None),),
    "router": ((ROUTERS, "policy", DEFAULT_ROUTER),),
}
"""Parts that are a union of registered specs: (registry, tag field, default tag)."""


def _tagged_owners(parts: list[str]) -> list[str]:
    """For a key unknown inside a tagged part (`cluster.router.prefix_tokens` under
    cache_aware): the tags whose specs do have it."""
    if len(parts) < 2:
        return []
    return [
        f"{tag} {name}"
        for registry, tag, _ in _TAGGED.get(parts[-2], ())
        for name, spec in registry.items()
        if parts[-1] in spec.model_fields
    ]


def _is_union_tag(part: Any, before: tuple[Any, ...]) -> bool:
    """Pydantic inserts the discriminator value ('shared_prefix') into error locations, after
    the name of the tagged part."""
    return bool(before) and any(part in reg for reg, _, _ in _TAGGED.get(str(before[-1]), ()))


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
