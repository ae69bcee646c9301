"""Capacity answers: the smallest parameter value that meets a target with 95 % confidence.

"Meets" means the whole 95 % confidence interval over seeds is on the right side of the bound:
`METRIC>=V` needs the interval's low end >= V, `METRIC<=V` its high end <= V. The search assumes
the metric improves as the parameter grows (more capacity, more entries, more bandwidth): it
bisects a range, or scans an explicit list of values. Every evaluation is a set of seeded runs
kept in `tasks/`, so the evidence can be inspected and a rerun reuses it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.outputs.metrics import is_summary_key
from sim.scenario import Scenario, ScenarioError, SweepSpec
from sim.sweep import compute, confidence, parse_target, plan


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

    def describe(self) -> str:
        if self.answer is None:
            return f"no value in range meets {self.target} with 95 % confidence"
        best = next(e for e in self.evaluations if e.value == self.answer)
        line = (
            f"{self.param} = {_fmt(self.answer)}: {self.target.split('>')[0].split('<')[0]} "
            f"mean {best.mean:.4g}, 95 % CI [{best.ci_low:.4g}, {best.ci_high:.4g}] over "
            f"{best.n} seeds"
        )
        if self.largest_failing is not None:
            line += f"; {_fmt(self.largest_failing)} does not meet it"
        return line


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


class CapacitySearch:
    """Evaluates parameter values on the scenario's seeds, caching runs in `out/tasks`."""

    def __init__(
        self,
        scenario: Scenario,
        source: str,
        param: str,
        target: str,
        seeds: int,
        out: Path,
        **compute_options: Any,
    ) -> None:
        try:
            self.metric, self.op, self.bound = parse_target(target)
        except ValueError as exc:
            raise ScenarioError("--target", "target", str(exc)) from None
        if not is_summary_key(self.metric):
            raise ScenarioError("--target", "target", f"unknown metric {self.metric!r}")
        self.scenario, self.source, self.param, self.target = scenario, source, param, target
        self.seeds, self.out, self.options = seeds, out, compute_options
        self.evaluations: dict[float, Evaluation] = {}

    def evaluate(self, value: float) -> Evaluation:
        if value in self.evaluations:
            return self.evaluations[value]
        sweep = SweepSpec(seeds=self.seeds, grid={self.param: [value]})
        tasks = plan(self.scenario.model_copy(update={"sweep": sweep}), self.source)
        records, _ = compute(tasks, self.out / "tasks", **self.options)
        summaries = [r["summary"] for r in records if r["error"] is None]
        values = [s[self.metric] for s in summaries if s.get(self.metric) is not None]
        stats = confidence(values)
        meets = bool(values) and (
            stats["ci_low"] >= self.bound if self.op == ">=" else stats["ci_high"] <= self.bound
        )
        evaluation = Evaluation(
            value=value,
            n=len(values),
            mean=stats["mean"],
            ci_low=stats["ci_low"],
            ci_high=stats["ci_high"],
            meets=meets,
            errors=len(records) - len(summaries),
        )
        self.evaluations[value] = evaluation
        return evaluation

    def scan(self, values: list[float]) -> CapacityAnswer:
        """Evaluate every value (no monotonicity needed to find the smallest that meets)."""
        for value in sorted(values):
            self.evaluate(value)
        return self._answer()

    def bisect(self, low: float, high: float, tolerance: float | None = None) -> CapacityAnswer:
        """Bisect [low, high]; integer ends make an integer search (one-unit resolution)."""
        integer = isinstance(low, int) and isinstance(high, int)
        step = tolerance if tolerance is not None else (1.0 if integer else (high - low) / 64)
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

    def _answer(self) -> CapacityAnswer:
        evals = sorted(self.evaluations.values(), key=lambda e: e.value)
        meeting = [e.value for e in evals if e.meets]
        answer = min(meeting) if meeting else None
        failing = [e.value for e in evals if not e.meets and (answer is None or e.value < answer)]
        return CapacityAnswer(
            self.param, self.target, answer, max(failing) if failing else None, evals
        )

    def save(self, answer: CapacityAnswer) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([asdict(e) for e in answer.evaluations]).to_csv(
            self.out / "evaluations.csv", index=False
        )
        (self.out / "capacity.json").write_text(
            json.dumps(
                {
                    "scenario": self.scenario.name,
                    "param": answer.param,
                    "target": answer.target,
                    "seeds": self.seeds,
                    "answer": answer.answer,
                    "largest_failing": answer.largest_failing,
                    "statement": answer.describe(),
                },
                indent=2,
            )
            + "\n"
        )
