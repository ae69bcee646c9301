"""Scenario loading: a document or a YAML file plus `--set` overrides turned into a `Scenario`.

The profiles a document names are layered under it, a model preset is expanded before anything
is validated (its derived pool specs become the defaults of `model:`), what SGLang derives from
them is filled in and size strings are converted; then the schema (`sim.scenario.schema`)
validates the whole. Every failure becomes a `ScenarioError` that names the file and the
offending key, every problem told at once. A sweep point or a capacity evaluation is a document
made here too (`point_document`), and so is a pickled scenario, rebuilt by validating its
document again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.core.documents import (
    apply_override,
    parse_override,
    read_document,
    resolve_paths,
    value_at,
)
from sim.core.safe_io import UnreadableFile, check_regular
from sim.core.spec import COMMAND_LINE_SET, ScenarioError
from sim.deployment.kv_dtype import fill_dsa_kv_cache
from sim.deployment.layering import layer_profiles
from sim.deployment.resolve import Sources, derive, has, leaves
from sim.model.presets import MODEL_PRESETS
from sim.scenario.errors import describe, mapping
from sim.scenario.model_section import expanded_model
from sim.scenario.schema import (
    Scenario,
    restores_pickles,
    scenario_model,
    schema_default,
    schema_refusal,
)
from sim.scenario.sections import MAX_TP_SIZE, list_every_storage_pool
from sim.scenario.sizes import normalize_sizes
from sim.workload.kinds import MAX_TRACE_FILE_BYTES

__all__ = [
    "ScenarioError",
    "apply_override",
    "build_scenario",
    "check_references",
    "load_scenario",
    "parse_override",
    "point_document",
    "read_document",
]


def build_scenario(doc: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a plain mapping; errors name `source` and every offending dotted key.

    The profiles the document names are layered under it and what SGLang derives from them is
    filled in (`sim.deployment.resolve`); size strings ('80GiB', '65536 tokens') are converted
    to each key's unit. Every problem is reported at once, each with the value it got, the unit
    it expects and, for a misspelt key or choice, the nearest known one.
    """
    written = copy.deepcopy(doc)
    profiled = layer_profiles(written)
    doc = copy.deepcopy(profiled.doc)
    dtype_problems = fill_dsa_kv_cache(doc, profiled.sources)
    model = expanded_model(doc.get("model"), _tp_size(doc))
    if isinstance(model, dict) and model is not doc.get("model"):
        doc["model"] = copy.deepcopy(model)
    _label_preset(model, written, profiled.sources)
    problems: list[tuple[str | None, str]] = [
        *profiled.problems,
        *dtype_problems,
        *((e.key, e.message) for e in normalize_sizes(doc, model)),
    ]
    derived = derive(doc, model, profiled.sources, schema_default, schema_refusal)
    problems += [(e.key, str(e).split(": ", 1)[1]) for e in derived]
    list_every_storage_pool(doc)
    known = {key for key, _ in problems}
    if derived:  # not sized, and the derivation has said why: what follows from the sizing
        known.update(key for key in SIZED_KEYS if not has(written, key))
    try:
        scenario = scenario_model().model_validate(doc)
    except RecursionError:
        raise ScenarioError(source, None, "nested too deeply") from None
    except ValidationError as exc:
        for err in exc.errors():
            key, message = describe(err, doc, scenario_model())
            if key not in known:
                problems.append((key, message))
    else:
        if not problems:
            scenario._sources = profiled.sources
            scenario._written = written
            return scenario
    problems = _without_follow_ons(problems, doc)
    if not problems:
        raise ScenarioError(source, None, "invalid scenario")
    (key, message), *more = problems
    raise ScenarioError(source, key, message, more)


def _tp_size(doc: dict[str, Any]) -> int:
    """The ranks a preset's pool specs are one of: `server.tp_size` when it is one the schema
    takes (a bad one is reported by the schema; the preset is then expanded at 1)."""
    tp = mapping(doc.get("server")).get("tp_size", 1)
    valid = isinstance(tp, int) and not isinstance(tp, bool) and 1 <= tp <= MAX_TP_SIZE
    return tp if valid else 1


SIZED_KEYS = (
    "device",
    "device.kv_pages",
    "device.swa_pages",
    "device.mamba_slots",
    "host.pages",
    "host.swa_pages",
)
"""What the device sizing fills in, directly or from the device pool (the `device` section is
required only for its `kv_pages`)."""


def _without_follow_ons(
    problems: list[tuple[str | None, str]], doc: dict[str, Any]
) -> list[tuple[str | None, str]]:
    """With an unknown `model.preset`, the preset is told once, first: a size written with a
    unit ('40GiB') cannot be converted (the model is unknown) and the schema refuses it as
    not a number, and the device is not sized from the GPU; those are the preset's fault,
    not one more error each."""
    preset = mapping(doc.get("model")).get("preset")
    if not isinstance(preset, str) or preset in MODEL_PRESETS:
        return problems
    kept = []
    for key, message in problems:
        value = value_at(doc, key) if key else None
        if key != "model.preset" and isinstance(value, str) and _is_size_key(key):
            continue
        if key in SIZED_KEYS and value is None:
            continue
        kept.append((key, message))
    return sorted(kept, key=lambda problem: problem[0] != "model.preset")


def _is_size_key(key: str | None) -> bool:
    return bool(key) and (
        str(key).startswith("device.")
        or key in ("host.pages", "host.swa_pages")
        or str(key).endswith(".capacity_gb")
    )


@restores_pickles
def _restore(doc: dict[str, Any], sources: dict[str, str], written: dict[str, Any]) -> Scenario:
    """A pickled scenario: its resolved document validated again, its provenance kept."""
    scenario = build_scenario(doc, "<pickled scenario>")
    scenario._sources = Sources(dict(sources))
    scenario._written = written
    return scenario


def _label_preset(model: Any, written: dict[str, Any], sources: Sources) -> None:
    """Mark the model values a preset brought (those the document does not write, and no rule
    derived for the GPU)."""
    name = model.get("preset") if isinstance(model, dict) else None
    if not isinstance(name, str) or name not in MODEL_PRESETS:
        return
    for key in leaves(model, "model"):
        if not has(written, key) and key not in sources.of:
            sources.of[key] = f"preset {name}"


def load_scenario(
    path: str | Path, overrides: list[str] | dict[str, Any] | None = None
) -> Scenario:
    """Load and validate a scenario YAML file, applying `--set` style overrides.

    A relative path is relative to where it was written: one in the file to the file's folder,
    one given as an override to the current directory (as any path on a command line is). The
    file's own paths are made absolute before the overrides are applied, so whatever is still
    relative afterwards came from an override.
    """
    path = Path(path)
    doc = read_document(path)
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else list((overrides or {}).items())
    )
    resolve_paths(doc, path.parent)
    for key, value in items:
        apply_override(doc, key, value)
    resolve_paths(doc, Path.cwd())
    try:
        return build_scenario(doc, str(path))
    except ScenarioError as exc:
        raise _labelled(exc, [key for key, _ in items], doc) from None


def _labelled(exc: ScenarioError, overridden: list[str], doc: dict[str, Any]) -> ScenarioError:
    """The same problems, each under the input it came from: a key set with `--set` is the
    command line's (`--set device.kv_pages: ...`), not the file's; and a trace file that is
    missing is told beside the schema's problems rather than after they are fixed."""
    problems = _under_set(exc.problems, overridden)
    trace = _missing_trace(doc)
    if trace and not any(k and k.endswith("workload.path") for k, _ in problems):
        problems.append(trace)
    (key, message), *more = problems
    return ScenarioError(exc.source, key, message, more)


def _under_set(
    problems: list[tuple[str | None, str]], overridden: list[str]
) -> list[tuple[str | None, str]]:
    labelled = []
    for key, message in problems:
        if key and any(
            key == o or key.startswith(f"{o}.") or o.startswith(f"{key}.") for o in overridden
        ):
            key = f"{COMMAND_LINE_SET} {key}"
        labelled.append((key, message))
    return labelled


def from_overrides(exc: ScenarioError, overrides: Iterable[str]) -> ScenarioError:
    """A problem found after loading (a sweep's target or grid point, checked as the sweep is
    planned) told under `--set` where an override wrote its key, as loading tells it."""
    problems = _under_set(exc.problems, [parse_override(o)[0] for o in overrides])
    (key, message), *more = problems
    return ScenarioError(exc.source, key, message, more)


def _missing_trace(doc: dict[str, Any]) -> tuple[str, str] | None:
    workload = mapping(doc.get("workload"))
    path = workload.get("path")
    if not isinstance(path, str):
        return None
    try:
        if Path(path).is_file():
            return None
    except OSError:
        return None
    return ("workload.path", f"trace file not found: {path}")


def check_references(scenario: Scenario, source: str) -> None:
    """Everything `validate` can check beyond the schema: referenced files exist and are read."""
    trace = scenario.trace_path()
    if trace is None:
        return
    try:
        found = trace.exists()
        check_regular(trace, limit=MAX_TRACE_FILE_BYTES)
    except OSError as exc:
        raise ScenarioError(
            source, "workload.path", f"cannot access trace: {exc.strerror}"
        ) from None
    except UnreadableFile as exc:
        raise ScenarioError(source, "workload.path", f"cannot read trace: {exc}") from None
    if not found:
        raise ScenarioError(source, "workload.path", f"trace file not found: {trace}")


def point_document(
    scenario: Scenario, values: Iterable[tuple[str, Any]], source: str
) -> dict[str, Any]:
    """What a sweep point or a capacity evaluation runs: the scenario as it was written, without
    its sweep, with these keys set, so that the profiles, the preset and every derived size
    follow the new values as they would in the file."""
    doc = scenario.written
    doc.pop("sweep", None)
    doc.pop("costs", None)
    for key, value in values:
        apply_override(doc, key, copy.deepcopy(value), source=source)
    return doc
