"""Plans: the cheapest deployment that meets every target with 95 % confidence.

A plan is a grid of deployments (server count, storage pool sizes, any other scenario key)
evaluated on the same seeds, each priced from the scenario's `costs:` section. A deployment
meets a target as a capacity answer does: the end of its two-sided 95 % Student-t interval over
seeds on the target's side (`ci_low >= V` for `>=`, `ci_high <= V` for `<=`; each end is a
one-sided 97.5 % bound). The answer is the cheapest deployment meeting every target; with every
point evaluated, no cheaper evaluated point meets them all. Searched on one increasing axis this
is `capacity --values` over the same values: the same runs, intervals and answer.

The grid runs as a sweep does (`sim.studies.grid.plan` and `sim.studies.tasks.compute`):
seeded runs saved in `tasks/` one by one, on any executor, reused by a rerun into the same
directory. Prices are not part of a run, so a repriced plan reuses every run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from sim.core.documents import overlapping, parse_override
from sim.core.stats import confidence
from sim.core.units import parse_quantity
from sim.outputs.answers import interval_text
from sim.outputs.files import replace_file
from sim.outputs.grid import neighbours_note, plan_neighbours
from sim.outputs.overload import point_overload
from sim.results.directories import (
    MARKER,
    MARKER_TEXT,
    RunsDiffer,
    StudyKind,
    check_study_out,
)
from sim.results.layout import PLAN, TASKS
from sim.scenario.loading import build_scenario, point_document
from sim.scenario.schema import Scenario, ScenarioError, SweepSpec
from sim.studies.capacity_answer import interval_meets
from sim.studies.capacity_checks import check_target
from sim.studies.grid import Task, plan
from sim.studies.tasks import compute

EVALUATIONS = "evaluations.csv"
FRONTIER = "frontier.csv"
HOURS_PER_MONTH = 730.0
"""365 × 24 / 12: a GB-month price per hour."""
FRONTIER_METRICS = {"ttft_p99_s": "<=", "l3_loaded_rate": ">="}
"""The Pareto frontiers drawn: cost against TTFT p99 (lower is better) and against the share of
prompt tokens restored from storage (higher is better)."""
LEVEL = 0.95


@dataclass(frozen=True)
class Target:
    text: str
    metric: str
    op: str
    bound: float

    def met(self, stats: dict[str, float]) -> bool:
        return interval_meets(stats, self.op, self.bound)


@dataclass
class Point:
    """One deployment of the grid: its axis values, price and the metrics over its seeds."""

    point: int
    values: dict[str, Any]
    gpus: int
    cost_usd_per_hour: float
    n: int
    errors: int
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    meets: dict[str, bool] = field(default_factory=dict)

    @property
    def meets_all(self) -> bool:
        return bool(self.meets) and all(self.meets.values())


@dataclass
class PlanAnswer:
    targets: list[Target]
    points: list[Point]
    answer: Point | None

    def describe(self) -> str:
        if self.answer is None:
            return (
                f"no evaluated deployment meets {' and '.join(t.text for t in self.targets)} "
                "with 95 % confidence"
            )
        best = self.answer
        where = ", ".join(f"{k}={_text(v)}" for k, v in best.values.items())
        parts = [interval_text(t.metric, best.stats[t.metric]) for t in self.targets]
        return (
            f"cheapest of the {len(self.points):,} grid points to meet every target: {where} at "
            f"${best.cost_usd_per_hour:,.2f}/hour ({best.gpus} GPU{'' if best.gpus == 1 else 's'})"
            f": {'; '.join(parts)} over "
            f"{best.n} seeds{neighbours_note(plan_neighbours(self.points, best))}"
        )


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """`KEY=A,B,C` -> (KEY, values): numbers as numbers (a `_gb` key also takes 512MB, 2TB),
    anything else as a YAML scalar (`null`, `h200`)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ScenarioError(
            "--axis", None, f"{text!r} is not KEY=A,B,... (e.g. cluster.instances=1,2,4)"
        )
    values: list[Any] = []
    for item in raw.split(","):
        if not item.strip():
            raise ScenarioError("--axis", key, f"an empty value in {raw!r} (give e.g. 1,2,4)")
        try:
            values.append(parse_quantity(item, key))
        except ValueError:
            values.append(parse_override(f"{key}={item}")[1])
    if len(set(map(repr, values))) != len(values):
        raise ScenarioError("--axis", key, f"a value is repeated in {raw!r}")
    return key, values


class PlanSearch:
    """Checks a plan whole (axes, targets, prices at every point) before the first run, then
    evaluates its grid on `seeds` seeds into `out/tasks`."""

    def __init__(
        self,
        scenario: Scenario,
        source: str,
        axes: list[tuple[str, list[Any]]],
        targets: list[str],
        seeds: int,
        out: Path,
        **compute_options: Any,
    ) -> None:
        if scenario.costs is None:
            raise ScenarioError(
                source,
                "costs",
                "a plan needs prices and has no defaults: add a costs: section with "
                "gpu_hour_usd (by GPU preset) and storage_gb_month_usd (by storage pool), "
                "e.g. costs: {gpu_hour_usd: {h200: 3.5}, storage_gb_month_usd: {kv: 0.05}}",
            )
        if not axes:
            raise ScenarioError(
                "--axis", None, "give at least one axis (e.g. --axis cluster.instances=1,2,4)"
            )
        if not targets:
            raise ScenarioError(
                "--target", None, "give at least one target (e.g. --target 'ttft_p99_s<=2')"
            )
        keys = [key for key, _ in axes]
        for key in keys:
            root = key.split(".")[0]
            if keys.count(key) > 1:
                raise ScenarioError("--axis", key, "given twice; give its values once")
            if root in ("sweep", "costs", "seed", "name"):
                raise ScenarioError(
                    "--axis",
                    key,
                    "is not part of a deployment (the replications are --seeds; prices are "
                    "the costs: section)",
                )
        pair = overlapping(keys)
        if pair is not None:
            raise ScenarioError(
                "--axis",
                pair[1],
                f"lies inside {pair[0]}, which another axis sets; give one of the two",
            )
        self.targets = []
        for text in targets:
            metric, op, bound = check_target(scenario, text)
            self.targets.append(Target(text, metric, op, bound))
        self.scenario, self.source, self.axes = scenario, source, axes
        self.seeds, self.out, self.options = seeds, out, compute_options
        for key, values in axes:
            for value in values:
                self._check_value(key, value)
        sweep = SweepSpec(seeds=seeds, grid={key: values for key, values in axes})
        try:
            self.tasks = plan(scenario.model_copy(update={"sweep": sweep}), source)
        except ScenarioError as exc:
            raise ScenarioError("--axis", None, str(exc)) from None
        self.first = _firsts(self.tasks)
        self.prices = {p: price(scenario, source, task) for p, task in self.first.items()}

    def _points(self) -> list[int]:
        return list(self.first)

    def _check_value(self, key: str, value: Any) -> None:
        doc = point_document(self.scenario, [(key, value)], "--axis")
        try:
            build_scenario(doc, "--axis")
        except ScenarioError as exc:
            where = "" if exc.key == key else f" ({exc.key})"
            raise ScenarioError(
                "--axis",
                None,
                f"{key}={_text(value)} is refused by the scenario{where}: {exc.message}",
            ) from None

    @property
    def runs(self) -> int:
        return len(self.tasks)

    def run(self) -> PlanAnswer:
        records, _ = compute(self.tasks, self.out / TASKS, **self.options)
        by_point: dict[int, list[dict[str, Any]]] = {}
        for task, record in zip(self.tasks, records, strict=True):
            by_point.setdefault(task.point, []).append(record)
        metrics = list(dict.fromkeys([*(t.metric for t in self.targets), *FRONTIER_METRICS]))
        points = []
        for p in self._points():
            task = self.first[p]
            ok = [r["summary"] for r in by_point[p] if r.get("error") is None and r.get("summary")]
            gpus, cost = self.prices[p]
            point = Point(p, dict(task.values), gpus, cost, len(ok), len(by_point[p]) - len(ok))
            for metric in metrics:
                values = [s[metric] for s in ok if s.get(metric) is not None]
                point.stats[metric] = confidence(values, LEVEL, key=metric)
            for target in self.targets:
                measured = point.stats[target.metric]["n"] > 0
                point.meets[target.text] = measured and target.met(point.stats[target.metric])
            points.append(point)
        meeting = [p for p in points if p.meets_all]
        answer = min(meeting, key=lambda p: (p.cost_usd_per_hour, p.point)) if meeting else None
        return PlanAnswer(self.targets, points, answer)

    def save(self, answer: PlanAnswer) -> dict[str, pd.DataFrame]:
        """evaluations.csv, frontier.csv and plan.json, each replaced through a temporary
        file, and the directory marked as this tool's."""
        self.out.mkdir(parents=True, exist_ok=True)
        tables = {EVALUATIONS: evaluations_table(answer), FRONTIER: frontier_table(answer)}
        for name, frame in tables.items():
            replace_file(self.out / name, partial(_write_csv, frame))
        replace_file(self.out / MARKER, lambda tmp: tmp.write_text(MARKER_TEXT))
        doc = self.document(answer)
        replace_file(self.out / PLAN, lambda tmp: tmp.write_text(json.dumps(doc, indent=2) + "\n"))
        return tables

    def document(self, answer: PlanAnswer) -> dict[str, Any]:
        costs = self.scenario.costs
        best = answer.answer
        return {
            "scenario": self.scenario.name,
            "axes": {key: values for key, values in self.axes},
            "targets": [t.text for t in self.targets],
            "seeds": self.seeds,
            "method": (
                "every grid point evaluated on the same seeds; a target is met when the end of "
                "the two-sided 95 % Student-t interval over seeds is on its side (ci_low >= V, "
                "ci_high <= V); the answer is the cheapest point meeting every target"
            ),
            "costs": costs.model_dump(mode="json") if costs is not None else None,
            "hours_per_month": HOURS_PER_MONTH,
            "answer": None if best is None else _point_json(best),
            "statement": answer.describe(),
            "neighbours": plan_neighbours(answer.points, best),
            "overloaded": point_overload(self.out / TASKS, self.scenario, best),
        }


def price(scenario: Scenario, source: str, task: Task) -> tuple[int, float]:
    """(GPUs, $ per hour) of the deployment a task runs: servers × tp_size GPUs at the GPU
    preset's hourly price, plus each storage pool's capacity at its GB-month price. A price
    the costs section lacks, or a pool with no size (unbounded), is bad input naming the key."""
    costs = scenario.costs
    assert costs is not None
    doc = task.doc
    where = ", ".join(f"{k}={_text(v)}" for k, v in task.values) or "the scenario"
    gpu = doc["hardware"]["gpu"]
    if gpu in (None, "custom"):
        raise ScenarioError(
            source,
            "hardware.gpu",
            f"a plan prices a server by its GPU preset, and {where} names none (give "
            "hardware.gpu, e.g. h200, with its price in costs.gpu_hour_usd)",
        )
    if gpu not in costs.gpu_hour_usd:
        raise ScenarioError(
            source,
            f"costs.gpu_hour_usd.{gpu}",
            f"no price for the {gpu} GPUs of {where} (give $ per GPU-hour; no default is assumed)",
        )
    gpus = int(doc["cluster"]["instances"]) * int(doc["server"]["tp_size"])
    hourly = gpus * costs.gpu_hour_usd[gpu]
    for pool, spec in doc["storage"]["pools"].items():
        if pool not in costs.storage_gb_month_usd:
            raise ScenarioError(
                source,
                f"costs.storage_gb_month_usd.{pool}",
                f"no price for the {pool} storage pool (give $ per GB-month; no default is "
                "assumed)",
            )
        capacity = spec.get("capacity_gb")
        if capacity is None:
            raise ScenarioError(
                source,
                f"storage.pools.{pool}.capacity_gb",
                f"is unbounded at {where}, and an unbounded pool has no price: give it a size, "
                f"or search it with --axis storage.pools.{pool}.capacity_gb=A,B,...",
            )
        hourly += capacity * costs.storage_gb_month_usd[pool] / HOURS_PER_MONTH
    if not math.isfinite(hourly * HOURS_PER_MONTH):
        raise ScenarioError(
            source, "costs", f"the price of {where} overflows: give prices of a finite product"
        )
    return gpus, hourly


def evaluations_table(answer: PlanAnswer) -> pd.DataFrame:
    """One row per deployment: its axis values, GPUs, $ per hour, seeds with a summary, failed
    runs, each metric's mean and 95 % interval, each target's verdict, and whether it is the
    answer."""
    rows = []
    for p in answer.points:
        row: dict[str, Any] = {"point": p.point, **p.values}
        row.update(gpus=p.gpus, cost_usd_per_hour=p.cost_usd_per_hour, n=p.n, errors=p.errors)
        for metric, stats in p.stats.items():
            row.update({f"{metric}_{k}": stats[k] for k in ("mean", "ci_low", "ci_high")})
        row.update({f"meets {t}": m for t, m in p.meets.items()})
        row.update(meets_all=p.meets_all, answer=p is answer.answer)
        rows.append(row)
    return pd.DataFrame(rows)


def frontier_table(answer: PlanAnswer) -> pd.DataFrame:
    """Per frontier metric, the deployments no other beats on both cost and the metric's mean
    (cheaper or as cheap, and better or as good, one of them strictly), cheapest first."""
    rows = []
    for metric, op in FRONTIER_METRICS.items():
        for p in pareto(answer.points, metric, op):
            stats = p.stats[metric]
            rows.append(
                {
                    "metric": metric,
                    "point": p.point,
                    **p.values,
                    "cost_usd_per_hour": p.cost_usd_per_hour,
                    "mean": stats["mean"],
                    "ci_low": stats["ci_low"],
                    "ci_high": stats["ci_high"],
                    "meets_all": p.meets_all,
                }
            )
    return pd.DataFrame(rows)


def pareto(points: list[Point], metric: str, op: str) -> list[Point]:
    """The points on the cost/metric frontier, cheapest first (NaN means left out)."""
    sign = 1.0 if op == ">=" else -1.0
    scored = [
        (p.cost_usd_per_hour, sign * p.stats[metric]["mean"], p)
        for p in points
        if not math.isnan(p.stats[metric]["mean"])
    ]
    scored.sort(key=lambda s: (s[0], -s[1], s[2].point))
    frontier, best = [], -math.inf
    for _, score, p in scored:
        if score > best:
            frontier.append(p)
            best = score
    return frontier


PLAN_KIND = StudyKind("plan", "plan", PLAN, frozenset((TASKS, MARKER, PLAN, EVALUATIONS, FRONTIER)))


def check_plan_out(
    target: Path, name: str, force: bool, runs_differ: RunsDiffer | None = None
) -> bool:
    """A plan's `--out`: it resumes only into a plan of the same scenario (an interrupted one
    holds only `tasks/`) whose runs are all this plan's (sim.studies.resume); anything else needs
    `--force` (True: replace it once complete)."""
    return check_study_out(target, name, force, PLAN_KIND, runs_differ)


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False)


def _firsts(tasks: list[Task]) -> dict[int, Task]:
    """Each point's first task, by point in order: one pass (a scan per point was quadratic,
    436 s before the first run of a 50,000-point plan)."""
    first: dict[int, Task] = {}
    for task in tasks:
        first.setdefault(task.point, task)
    return dict(sorted(first.items()))


def _point_json(p: Point) -> dict[str, Any]:
    return {
        "point": p.point,
        "values": p.values,
        "gpus": p.gpus,
        "cost_usd_per_hour": p.cost_usd_per_hour,
        "cost_usd_per_month": p.cost_usd_per_hour * HOURS_PER_MONTH,
        "seeds": p.n,
        "metrics": p.stats,
        "meets": p.meets,
    }


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
