"""A sweep's grid planned into tasks: variants × grid × seeds, each a resolved scenario document.

Every task is a fully resolved scenario document, keyed by a hash of it, so a task's result is
a pure function of it and a rerun can find the tasks it already ran (`sim.studies.tasks`). The
seeds are the same at every point (common random numbers), and every value is validated here,
before anything runs: a bad value is a `ScenarioError` naming the point.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.core.documents import resolve_paths
from sim.core.stats import parse_target
from sim.scenario.loading import build_scenario, point_document
from sim.scenario.schema import Scenario, ScenarioError, scenario_document

VARIANT = "variant"
"""The column of `sweep.variants`: each point's variant label."""


@dataclass(frozen=True)
class Task:
    """One (grid point, seed) of a sweep, with its resolved scenario document."""

    point: int
    values: tuple[tuple[str, Any], ...]
    seed_index: int
    seed: int
    doc: dict[str, Any]
    key: str


def sweep_seeds(root_seed: int, n: int) -> list[int]:
    """Replication seeds: children of the scenario's seed, the same at every grid point (CRN)."""
    children = np.random.SeedSequence(root_seed).spawn(n)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


MAX_SWEEP_RUNS = 100_000
"""Runs one sweep may plan: planning costs about 170 µs and 4 KB a run before anything runs,
and a larger sweep is better split (each part resumable on its own)."""


def plan(scenario: Scenario, source: str, seeds: int | None = None) -> list[Task]:
    """Expand the variants × grid × seeds into validated tasks; a bad value is a
    ScenarioError. A point is the scenario as written with the variant's keys, then the grid's,
    set on it."""
    if scenario.sweep is None:
        raise ScenarioError(source, "sweep", "the scenario has no sweep section")
    check_sweep_target(scenario, source)
    axes: dict[str, list[Any]] = {}
    variants = scenario.sweep.variants
    if variants:
        axes[VARIANT] = list(variants)
    axes.update(scenario.sweep.grid)
    replications = seeds or scenario.sweep.seeds
    runs = math.prod(len(values) for values in axes.values()) * replications
    if runs > MAX_SWEEP_RUNS:
        raise ScenarioError(
            source,
            "sweep",
            f"{runs:,} runs ({replications:,} seeds × the grid's points) is over the "
            f"{MAX_SWEEP_RUNS:,} a sweep may plan; split it, or use fewer seeds or values",
        )
    seed_list = sweep_seeds(scenario.seed, replications)
    keys = list(axes)
    tasks = []
    for point, combo in enumerate(itertools.product(*(axes[k] for k in keys))):
        values = tuple(zip(keys, combo, strict=True))
        label = dict(values).get(VARIANT)
        keyed = [*(variants[label].items() if label else ()), *values[1 if label else 0 :]]
        where = f"sweep.variants.{label}" if label else "sweep.grid"
        for seed_index, seed in enumerate(seed_list):
            doc = point_document(scenario, keyed, f"{source}: sweep")
            doc["seed"] = seed
            resolve_paths(doc, Path(source).parent)
            try:
                resolved = scenario_document(build_scenario(doc, source))
            except ScenarioError as exc:
                raise ScenarioError(
                    source, f"{where}.{exc.key}", f"{exc.message} (point {dict(values)})"
                ) from None
            digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
            tasks.append(Task(point, values, seed_index, seed, resolved, digest[:20]))
    return tasks


def check_sweep_target(scenario: Scenario, source: str) -> None:
    """Refuse a `sweep.target` whose metric this model never reports (it would be drawn as
    holding 'at 0 of 0 points') or whose bound is not a finite number."""
    from sim.engine.metrics import summary_keys

    target = scenario.sweep.target if scenario.sweep is not None else None
    if target is None:
        return
    try:
        metric, _, _ = parse_target(target)
    except ValueError as exc:
        raise ScenarioError(source, "sweep.target", str(exc)) from None
    reported = summary_keys(scenario.model.pools)
    if metric not in reported:
        close = difflib.get_close_matches(metric, sorted(reported), n=2)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ScenarioError(
            source,
            "sweep.target",
            f"unknown metric {metric!r}: this model never reports it ({hint}docs/metrics.md "
            "lists every metric)",
        )


def grid_of(tasks: list[Task]) -> dict[str, list[Any]]:
    """The swept keys and their values, in grid order, recovered from the tasks."""
    grid: dict[str, list[Any]] = {}
    for task in tasks:
        for key, value in task.values:
            values = grid.setdefault(key, [])
            if value not in values:
                values.append(value)
    return grid
