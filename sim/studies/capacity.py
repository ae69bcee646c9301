"""Capacity answers: the smallest parameter value that meets a target with 95 % confidence.

"Meets" means the whole 95 % confidence interval over seeds is on the right side of the bound:
`METRIC>=V` needs the interval's low end >= V, `METRIC<=V` its high end <= V. The search assumes
the metric improves as the parameter grows (more capacity, more entries, more bandwidth): it
bisects a range, or scans an explicit list of values. Every evaluation is a set of seeded runs
kept in `tasks/`, so the evidence can be inspected and a rerun reuses it.

A question is checked whole before anything runs (the key is a number in the schema, the metric
is one this model reports, the bound is finite, every value the scenario accepts, a range
that is a range): a search can take hours, and a mistake found at its end costs all of them.
"""

from __future__ import annotations

import difflib
import json
import math
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pandas as pd
from pydantic import BaseModel

from sim.core.stats import confidence, parse_target
from sim.core.units import param_text, param_unit
from sim.deployment.resolve import get
from sim.engine.metrics import is_summary_key, summary_keys
from sim.model.pools import POOL_KINDS
from sim.outputs.files import replace_file
from sim.outputs.overload import value_overload
from sim.outputs.progress import Progress
from sim.results.directories import MARKER, MARKER_TEXT
from sim.results.layout import CAPACITY, CONFIG, EVALUATIONS, TASKS
from sim.scenario.loading import build_scenario, point_document
from sim.scenario.schema import Scenario, ScenarioError, SweepSpec, scenario_document
from sim.studies.sweep import compute, plan


@dataclass
class Evaluation:
    value: float
    n: int
    mean: float
    ci_low: float
    ci_high: float
    meets: bool
    errors: int


@dataclass
class CapacityAnswer:
    param: str
    target: str
    answer: float | None
    largest_failing: float | None
    evaluations: list[Evaluation]

    def describe(self, given: dict[float, str] | None = None) -> str:
        """The answer as a sentence; `given` maps values to how the user wrote them ('8GiB'),
        which is said first, the key's unit beside it."""
        if self.answer is None:
            return f"no value in range meets {self.target} with 95 % confidence"
        from sim.outputs.answers import interval_text, quantity_text

        best = next(e for e in self.evaluations if e.value == self.answer)
        gap = None if self.largest_failing is None else self.answer - self.largest_failing
        shown = quantity_text(self.param, self.answer, gap)
        written = (given or {}).get(float(self.answer))
        if written:
            shown = f"{written} ({shown})"
        line = (
            f"{self.param} = {shown}: "
            f"{interval_text(self.target.split('>')[0].split('<')[0], asdict(best))} "
            f"over {best.n} seeds"
        )
        if self.largest_failing is not None:
            line += (
                f"; {quantity_text(self.param, self.largest_failing, gap)} does not meet it "
                f"(resolved to within {quantity_text(self.param, gap, gap)})"
            )
        return line


class CapacitySearch:
    """Evaluates parameter values on the scenario's seeds, caching runs in `out/tasks`.

    The constructor checks the parameter and the target; `scan` and `bisect` check their values
    before the first run. Every refusal is a ScenarioError naming the command-line option.
    """

    def __init__(
        self,
        scenario: Scenario,
        source: str,
        param: str,
        target: str,
        seeds: int,
        out: Path,
        *,
        progress: bool = True,
        **compute_options: Any,
    ) -> None:
        check_param(scenario, param)
        self.scenario, self.source, self.param = scenario, source, param
        self.requested_target = target
        self.reference: Reference | None = None
        relative = check_relative(scenario, param, target)
        self.relative = relative is not None
        if relative is None:
            self.metric, self.op, self.bound = check_target(scenario, target)
            self.target = target
        else:
            self.metric, self.op, self.share, self.reference_value = relative
            self.bound = math.nan
            self.target = target
        self.seeds, self.out, self.options = seeds, out, compute_options
        self.progress = progress
        self.evaluations: dict[float, Evaluation] = {}
        self._bar: Progress | None = None
        self.given: dict[float, str] = {}
        """Values as the user wrote them ('512MiB'), echoed beside the key's own unit."""

    def shown(self, value: float) -> str:
        """A value as written and, where that differs, in the key's unit: '512MiB (0.537 GB)'."""
        own = param_text(self.param, value)
        given = self.given.get(float(value))
        return (
            f"{given} ({own})" if given and given.replace(" ", "") != own.replace(" ", "") else own
        )

    def resolve_reference(self) -> None:
        """For a relative target, run the reference point on the same seeds and turn the share
        into an absolute bound (`l3_loaded_rate>=95%@unbounded` -> 0.95 x its mean there)."""
        if not self.relative or self.reference is not None:
            return
        self.check_value(self.reference_value, "--target")
        values, errors = self._values(self.reference_value)
        stats = confidence(values, key=self.metric)
        if not values or not math.isfinite(stats["mean"]):
            raise ScenarioError(
                "--target",
                None,
                f"{self.metric} has no value at the reference point "
                f"{self.param}={_reference_text(self.param, self.reference_value)} "
                f"({errors} of {self.seeds} runs failed): no bound can be taken from it",
            )
        self.bound = self.share * stats["mean"]
        self.target = f"{self.metric}{self.op}{self.bound:.6g}"
        self.reference = Reference(
            self.reference_value, len(values), stats["mean"], stats["ci_low"], stats["ci_high"]
        )
        if self._bar is not None:
            self._bar.update(self.reference.describe(self))

    def _values(self, value: float | None) -> tuple[list[float], int]:
        sweep = SweepSpec(seeds=self.seeds, grid={self.param: [value]})
        tasks = plan(self.scenario.model_copy(update={"sweep": sweep}), self.source)
        records, _ = compute(tasks, self.out / TASKS, progress=False, **self.options)
        summaries = [r["summary"] for r in records if r["error"] is None]
        values = [s[self.metric] for s in summaries if s.get(self.metric) is not None]
        return values, len(records) - len(summaries)

    def evaluate(self, value: float) -> Evaluation:
        if value in self.evaluations:
            return self.evaluations[value]
        values, errors = self._values(value)
        stats = confidence(values, key=self.metric)
        meets = bool(values) and interval_meets(stats, self.op, self.bound)
        evaluation = Evaluation(
            value=value,
            n=len(values),
            mean=stats["mean"],
            ci_low=stats["ci_low"],
            ci_high=stats["ci_high"],
            meets=meets,
            errors=errors,
        )
        self.evaluations[value] = evaluation
        if self._bar is not None:
            verdict = "meets" if meets else "fails"
            self._bar.update(
                f"{self.param}={self.shown(value)}: {self.metric} mean "
                f"{evaluation.mean:.4g} CI [{evaluation.ci_low:.4g}, {evaluation.ci_high:.4g}] "
                f"n={evaluation.n} {verdict}"
            )
        return evaluation

    def scan(self, values: list[float]) -> CapacityAnswer:
        """Evaluate every value (no monotonicity needed to find the smallest that meets)."""
        if not values:
            raise ScenarioError("--values", None, "no values given (give e.g. --values 1,2,4)")
        for value in values:
            self.check_value(value, "--values")
        ordered = sorted(set(values))
        with self._progress(len(ordered) + self._reference_runs()):
            self.resolve_reference()
            for value in ordered:
                self.evaluate(value)
        return self._answer()

    def bisect(self, low: float, high: float, tolerance: float | None = None) -> CapacityAnswer:
        """Bisect [low, high]; integer ends make an integer search (one-unit resolution)."""
        check_range(low, high, tolerance)
        for value in (low, high):
            self.check_value(value, "--range")
        integer = isinstance(low, int) and isinstance(high, int)
        step = tolerance if tolerance is not None else (1.0 if integer else (high - low) / 64)
        planned = 2 + max(0, math.ceil(math.log2((high - low) / step)))
        with self._progress(planned + self._reference_runs()):
            self.resolve_reference()
            if not self.evaluate(high).meets or self.evaluate(low).meets:
                return self._answer()
            while high - low > step:
                mid = (low + high) / 2
                if integer:
                    mid = math.floor(mid)
                if mid in (low, high):
                    break
                if self.evaluate(mid).meets:
                    high = mid
                else:
                    low = mid
        return self._answer()

    def _reference_runs(self) -> int:
        return 1 if self.relative else 0

    def check_value(self, value: float | None, option: str) -> None:
        """Refuse, naming `option`, a value the scenario does not accept for the parameter."""
        check_value(self.scenario, self.param, value, option)

    @contextmanager
    def _progress(self, planned: int) -> Iterator[None]:
        """One bar for the whole search, in evaluations done of evaluations planned (a bisection
        an end decides stops early, and the bar closes at what was done); on a stderr that is
        not a terminal, one line per finished evaluation with an estimate of the time left."""
        bar = Progress(planned, "capacity", "evaluation", enabled=self.progress)
        self._bar = bar
        try:
            yield
        finally:
            self._bar = None
            bar.close(finished=True)

    def _answer(self) -> CapacityAnswer:
        evals = sorted(self.evaluations.values(), key=lambda e: e.value)
        meeting = [e.value for e in evals if e.meets]
        answer = min(meeting) if meeting else None
        failing = [e.value for e in evals if not e.meets and (answer is None or e.value < answer)]
        return CapacityAnswer(
            self.param, self.target, answer, max(failing) if failing else None, evals
        )

    def save(self, answer: CapacityAnswer) -> None:
        """Each file replaced through a temporary one (never written through a link planted at
        its path), and the directory marked as this tool's; the resolved configuration is kept
        for the report's deployment card."""
        from sim.outputs.results import resolved_yaml

        self.out.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame([asdict(e) for e in answer.evaluations])
        replace_file(self.out / EVALUATIONS, lambda tmp: frame.to_csv(tmp, index=False))
        replace_file(self.out / MARKER, lambda tmp: tmp.write_text(MARKER_TEXT))
        config = resolved_yaml(self.scenario)
        replace_file(self.out / CONFIG, lambda tmp: tmp.write_text(config))
        replace_file(
            self.out / CAPACITY,
            lambda tmp: tmp.write_text(self._answer_json(answer)),
        )

    def _answer_json(self, answer: CapacityAnswer) -> str:
        return (
            json.dumps(
                {
                    "scenario": self.scenario.name,
                    "param": answer.param,
                    "unit": param_unit(answer.param),
                    "target": answer.target,
                    **self._relative(),
                    "seeds": self.seeds,
                    "answer": answer.answer,
                    "largest_failing": answer.largest_failing,
                    "statement": answer.describe(self.given),
                    "overloaded": value_overload(self.out / TASKS, self.scenario, answer),
                },
                indent=2,
            )
            + "\n"
        )

    def _relative(self) -> dict[str, Any]:
        """The requested relative target and its reference point, for capacity.json."""
        if self.reference is None:
            return {}
        return {
            "requested_target": self.requested_target,
            "reference": asdict(self.reference),
        }


@dataclass
class Reference:
    """The reference point of a relative target, evaluated on the search's seeds."""

    value: float | None
    n: int
    mean: float
    ci_low: float
    ci_high: float

    def describe(self, search: CapacitySearch) -> str:
        return (
            f"reference {search.param}={_reference_text(search.param, self.value)}: "
            f"{search.metric} mean {self.mean:.4g} over {self.n} seeds, so "
            f"{search.requested_target} is {search.target}"
        )


def _reference_text(param: str, value: float | None) -> str:
    return "unbounded (null)" if value is None else param_text(param, value)


def interval_meets(stats: dict[str, float], op: str, bound: float) -> bool:
    """A target is met with 95 % confidence when the seeds' interval lies on its side of the
    bound (`ci_low >= bound` for `>=`, `ci_high <= bound` for `<=`); capacity and plan share it
    so that they agree."""
    if op == ">=":
        return bool(stats["ci_low"] >= bound)
    return bool(stats["ci_high"] <= bound)


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
