"""A capacity question checked whole before anything runs: the key is a number in the schema,
the metric is one this model reports, the bound is finite, every value the scenario accepts, a
range that is a range.

A search can take hours, and a mistake found at its end costs all of them. Every refusal is a
`ScenarioError` naming the command-line option.
"""

from __future__ import annotations

import difflib
import math
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from sim.core.stats import parse_target
from sim.core.units import param_text
from sim.deployment.resolve import get
from sim.engine.metrics import is_summary_key, summary_keys
from sim.model.pools import POOL_KINDS
from sim.scenario.loading import build_scenario, point_document
from sim.scenario.schema import Scenario, ScenarioError, scenario_document


def _reference_text(param: str, value: float | None) -> str:
    return "unbounded (null)" if value is None else param_text(param, value)


def check_relative(
    scenario: Scenario, param: str, target: str
) -> tuple[str, str, float, float | None] | None:
    """A relative target (`METRIC>=95%@REFERENCE`) checked whole: its metric, its share and
    the reference value of `param` (`unbounded`, `null` or `none` for null, or a value such as
    100GB); None for an absolute target."""
    from sim.core.stats import parse_relative
    from sim.core.units import parse_quantity

    try:
        relative = parse_relative(target)
    except ValueError as exc:
        raise ScenarioError("--target", None, str(exc)) from None
    if relative is None:
        return None
    metric, op, share, reference = relative
    check_target(scenario, f"{metric}{op}0")
    value: float | None
    if reference.lower() in ("unbounded", "null", "none"):
        value = None
    else:
        try:
            value = parse_quantity(reference, param)
        except ValueError as exc:
            raise ScenarioError("--target", None, f"reference point {exc}") from None
    return metric, op, share, value


def check_value(scenario: Scenario, param: str, value: float | None, option: str) -> None:
    """Refuse, naming `option`, a value the scenario does not accept for the parameter."""
    doc = point_document(scenario, [(param, value)], option)
    try:
        build_scenario(doc, option)
    except ScenarioError as exc:
        where = "" if exc.key == param else f" ({exc.key})"
        raise ScenarioError(
            option,
            None,
            f"{param}={_reference_text(param, value)} is refused by the scenario"
            f"{where}: {exc.message}",
        ) from None


def check_param(scenario: Scenario, param: str) -> None:
    """Refuse a parameter that cannot be sized: the seed, the sweep section, a key the schema
    does not have, or one whose values are not numbers."""
    root = param.split(".")[0]
    if param == "seed":
        raise ScenarioError(
            "--param",
            None,
            "seed cannot be sized: it picks the random streams, and the replications are the "
            "--seeds seeds derived from it (size a numeric key such as device.swa_pages; set "
            "the replications with --seeds)",
        )
    if root == "sweep":
        raise ScenarioError(
            "--param",
            None,
            f"{param} is part of the sweep section, not of the simulated server (the "
            "replications are --seeds; size a key such as storage.pools.swa.capacity_gb)",
        )
    allowed = _leaf_types(scenario, param)
    pools = scenario.model.pools
    for kind in POOL_KINDS.values():
        sized = (f"storage.pools.{kind.name}.", f"model.{kind.name}.", f"device.{kind.device_key}.")
        if kind.name not in pools and f"{param}.".startswith(sized):
            raise ScenarioError(
                "--param",
                None,
                f"{param} belongs to the {kind.name} pool, and the model has no {kind.name} pool "
                f"(its pools: {', '.join(pools)})",
            )
    if not any(t in (int, float) for t in allowed):
        current = get(scenario_document(scenario), param)
        shown = "" if current is None else f" (its value is {current!r})"
        raise ScenarioError(
            "--param",
            None,
            f"{param} is not numeric{shown}: capacity sizes a number, such as "
            "storage.pools.swa.capacity_gb or device.swa_pages; to compare values that are not "
            f"numbers use: hicache-sim compare SCENARIO --vary {param}=A,B",
        )


def check_target(scenario: Scenario, target: str) -> tuple[str, str, float]:
    """Parse the target and refuse a metric this scenario's summary never has."""
    try:
        metric, op, bound = parse_target(target)
    except ValueError as exc:
        raise ScenarioError("--target", None, str(exc)) from None
    reported = summary_keys(scenario.model.pools)
    if metric in reported:
        return metric, op, bound
    if is_summary_key(metric):
        pools = ", ".join(scenario.model.pools)
        missing = [p for p in _pool_names(metric) if p not in scenario.model.pools]
        why = f"the model has no {missing[0]} pool" if missing else "this pool does not report it"
        raise ScenarioError(
            "--target",
            None,
            f"{metric} is never reported for this scenario: {why} (its pools: {pools}); "
            "give a metric of docs/metrics.md that this model reports",
        )
    close = difflib.get_close_matches(metric, sorted(reported), n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ScenarioError(
        "--target",
        None,
        f"unknown metric {metric!r} in {target!r} ({hint}docs/metrics.md lists every metric)",
    )


def check_range(low: float, high: float, tolerance: float | None) -> None:
    """Refuse a range that is not one and a resolution that would never end the bisection."""
    if low == high:
        raise ScenarioError(
            "--range",
            None,
            f"LOW and HIGH are both {low} (give a wider range, or --values {low} to evaluate "
            "one value)",
        )
    if low > high:
        raise ScenarioError(
            "--range", None, f"LOW {low} is above HIGH {high} (give --range {high} {low})"
        )
    if tolerance is not None and math.isinf(tolerance) and tolerance > 0:
        raise ScenarioError(
            "--tolerance",
            None,
            f"{tolerance:g} is not a finite number: a bisection to it would stop before its "
            f"first step (give a resolution such as --tolerance {_example_step(low, high)}, or "
            "leave it out: 1 for integer ends, 1/64 of the range otherwise)",
        )
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise ScenarioError(
            "--tolerance",
            None,
            f"{tolerance:g} is not a positive number, so the bisection would never end (give a "
            f"resolution above 0 such as --tolerance {_example_step(low, high)}, or leave it out: "
            "1 for integer ends, 1/64 of the range otherwise)",
        )


def _example_step(low: float, high: float) -> str:
    return f"{(high - low) / 64:.3g}"


def _pool_names(metric: str) -> list[str]:
    parts = metric.split("_")
    return [name for name in POOL_KINDS if name in parts[1:2]]


def _leaf_types(scenario: Scenario, param: str) -> list[Any]:
    """The value types the schema allows at a dotted key (None, Literal and str included as
    themselves), following the scenario's own workload kind; an unknown key is refused."""
    options: list[Any] = [type(scenario)]
    walked: list[str] = []
    for part in param.split("."):
        fields: dict[str, list[Any]] = {}
        for option in options:
            if isinstance(option, type) and issubclass(option, BaseModel):
                if option is type(scenario) and part == "workload":
                    fields[part] = [type(scenario.workload)]
                elif part in option.model_fields:
                    fields[part] = _flatten(option.model_fields[part].annotation)
            elif get_origin(option) is dict:
                keys, value = get_args(option)
                if get_origin(keys) is not Literal or part in get_args(keys):
                    fields[part] = _flatten(value)
        if part not in fields:
            known = sorted(
                name
                for option in options
                if isinstance(option, type) and issubclass(option, BaseModel)
                for name in option.model_fields
            )
            close = difflib.get_close_matches(part, known, n=1)
            hint = f" (did you mean {'.'.join([*walked, close[0]])}?)" if close else ""
            under = f" under {'.'.join(walked)}" if walked else ""
            raise ScenarioError(
                "--param", None, f"{param} is not a scenario key: no {part!r}{under}{hint}"
            )
        options = fields[part]
        walked.append(part)
    return options


def _flatten(annotation: Any) -> list[Any]:
    """`Annotated[int, ...] | None` -> [int, NoneType]: the alternatives of a field's type."""
    if get_origin(annotation) is Annotated:
        return _flatten(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [t for arg in get_args(annotation) for t in _flatten(arg)]
    return [annotation]
