"""Findings of a capacity search: the answer with its unit and interval, how sharply it was
resolved, and whether the evaluations contradict the monotonicity a bisection assumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from sim.core.stats import parse_target
from sim.core.units import cell, is_missing, number
from sim.outputs.answers import SAME_NOTE, same_every_seed
from sim.outputs.findings import Row


def capacity_findings(
    answer: Mapping[str, Any],
    evaluations: pd.DataFrame,
    config: Mapping[str, Any] | None = None,
) -> list[str]:
    """The answer with its unit and interval, how sharply the search resolved it, and whether
    the evaluations contradict the monotonicity a bisection assumes."""
    from sim.outputs.answers import answer_text, quantity_text

    param, target = answer["param"], answer["target"]
    metric, op, bound = parse_target(target)
    rows = sorted(evaluations.to_dict("records"), key=lambda r: r["value"])
    seeds = answer.get("seeds")
    sentences = []
    best = next((r for r in rows if _same(r["value"], answer.get("answer"))), None)
    if best is not None:
        sentences.append(
            f"The smallest {param} that meets {target} with 95 % confidence over {seeds} seeds "
            f"is {answer_text(param, best['value'], answer.get('largest_failing'), config)}: "
            f"{_spread(metric, best)}."
        )
        failing = next((r for r in rows if _same(r["value"], answer.get("largest_failing"))), None)
        if failing is not None:
            gap = best["value"] - failing["value"]
            sentences.append(
                f"The largest value seen to fail, {quantity_text(param, failing['value'], gap)}, "
                f"has {_spread(metric, failing)}: the answer is resolved to within "
                f"{quantity_text(param, gap, gap)}."
            )
    elif rows:
        closest = (
            max(rows, key=lambda r: r["ci_low"])
            if op == ">="
            else min(rows, key=lambda r: r["ci_high"])
        )
        side = "low end" if op == ">=" else "high end"
        sentences.append(
            f"No evaluated value of {param} meets {target} with 95 % confidence over {seeds} "
            f"seeds. The closest is {quantity_text(param, closest['value'])}: {metric} mean "
            f"{cell(metric, closest['mean'])}, whose interval's {side} is "
            f"{cell(metric, closest['ci_low'] if op == '>=' else closest['ci_high'])} "
            f"against the bound {number(bound)}."
        )
    if rows:
        errors = sum(int(r.get("errors") or 0) for r in rows)
        text = (
            f"{len(rows)} values were evaluated, from {quantity_text(param, rows[0]['value'])} "
            f"to {quantity_text(param, rows[-1]['value'])}"
        )
        sentences.append(text + (f"; {errors} runs failed." if errors else "."))
    inversions = [
        (low["value"], high["value"])
        for i, low in enumerate(rows)
        for high in rows[i + 1 :]
        if bool(low["meets"]) and not bool(high["meets"])
    ]
    if inversions:
        low, high = inversions[0]
        sentences.append(
            f"The evaluations are not monotone in {param}: {quantity_text(param, low)} meets the "
            f"target but the larger {quantity_text(param, high)} does not. A bisection assumes "
            "the metric improves as "
            f"{param} grows; scan the values (--values) to be sure of the smallest."
        )
    return sentences


def _spread(metric: str, row: Row) -> str:
    """'m mean 0.1, 95 % CI [0.05, 0.15]', or that every seed gave the same value (an interval
    of no width is no precision: what the seeds vary did not move the metric)."""
    if same_every_seed(row):
        return (
            f"{metric} {cell(metric, row['mean'])} ({SAME_NOTE}: what the seeds vary did not "
            "move it, so the interval has no width and measures no precision)"
        )
    return (
        f"{metric} mean {cell(metric, row['mean'])}, "
        f"95 % CI [{cell(metric, row['ci_low'])}, {cell(metric, row['ci_high'])}]"
    )


def param_value(value: Any) -> str:
    """A searched parameter's value to six significant digits, as the capacity command prints
    it (a bisection's answer needs more than a table's four)."""
    if is_missing(value):
        return "–"
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


def _same(a: Any, b: Any) -> bool:
    return not is_missing(a) and not is_missing(b) and bool(np.isclose(float(a), float(b)))
