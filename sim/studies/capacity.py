"""Capacity answers: the smallest parameter value that meets a target with 95 % confidence.

"Meets" means the whole 95 % confidence interval over seeds is on the right side of the bound:
`METRIC>=V` needs the interval's low end >= V, `METRIC<=V` its high end <= V. The search assumes
the metric improves as the parameter grows (more capacity, more entries, more bandwidth): it
bisects a range, or scans an explicit list of values. Every evaluation is a set of seeded runs
kept in `tasks/`, so the evidence can be inspected and a rerun reuses it. The question is
checked whole before anything runs (`sim.studies.capacity_checks`); what each evaluation found
and the answer are `sim.studies.capacity_answer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.core.stats import check_resolved, confidence
from sim.core.units import param_text, param_unit
from sim.outputs.files import replace_file
from sim.outputs.overload import value_overload
from sim.outputs.progress import Progress
from sim.results.directories import MARKER, MARKER_TEXT
from sim.results.layout import CAPACITY, CONFIG, EVALUATIONS, TASKS
from sim.scenario.schema import Scenario, ScenarioError, SweepSpec
from sim.studies.capacity_answer import CapacityAnswer, Evaluation, interval_meets
from sim.studies.capacity_checks import (
    _reference_text,
    check_param,
    check_range,
    check_relative,
    check_target,
    check_value,
)
from sim.studies.grid import plan
from sim.studies.tasks import compute


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
        try:
            self.bound = check_resolved(
                self.requested_target, self.metric, self.op, self.share, stats["mean"]
            )
        except ValueError as exc:
            raise ScenarioError("--target", None, str(exc)) from None
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
