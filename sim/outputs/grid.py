"""What a plan's grid leaves open: its answer is the cheapest of the points evaluated, and a
cheaper deployment may lie between them.

Where the answer sits at the lowest value of an axis, or the next lower value on that axis
(the other axes as at the answer) fails a target, a value below the answer on that axis was
never tried and may meet every target for less. Those points are named, so that a planner adds
them rather than read "cheapest" as the cheapest there is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GridPoint = tuple[Mapping[str, Any], float, bool]
"""A deployment of the grid: its axis values, $ per hour, and whether it meets every target."""


def neighbours(points: Sequence[GridPoint], answer: Mapping[str, Any] | None) -> list[str]:
    """One line per numeric axis below whose answer value a cheaper deployment may lie: the
    value to add and why ('cluster.instances=3: between 2, which fails, and the answer's 4')."""
    if answer is None:
        return []
    lines = []
    for key, value in answer.items():
        if not _number(value):
            continue
        row = [p for p in points if all(p[0].get(k) == v for k, v in answer.items() if k != key)]
        lower = sorted(
            (p for p in row if _number(p[0].get(key)) and p[0][key] < value), key=_at(key)
        )
        if not lower:
            if _unpriced(points, key):
                continue
            below = value // 2 if isinstance(value, int) else value / 2
            if isinstance(value, int) and below < 1:
                continue
            lines.append(
                f"{key}={_text(below)}: below the answer's {_text(value)}, the grid's lowest "
                "value on this axis"
            )
            continue
        values, _, meets = lower[-1]
        if meets:
            continue
        between = _between(values[key], value)
        if between is not None:
            lines.append(
                f"{key}={_text(between)}: between {_text(values[key])}, which fails, and the "
                f"answer's {_text(value)}"
            )
    return lines


def plan_neighbours(points: Sequence[Any], answer: Any) -> list[str]:
    """`neighbours` of a plan's points (each with `values`, `cost_usd_per_hour` and
    `meets_all`) and its answer (one of them, or None)."""
    grid = [(p.values, p.cost_usd_per_hour, p.meets_all) for p in points]
    return neighbours(grid, None if answer is None else answer.values)


def neighbours_note(lines: Sequence[str]) -> str:
    """The sentence the statement ends with: the points worth adding, or that none is open."""
    if not lines:
        return ""
    return (
        f"; worth adding to the grid, where a cheaper deployment may meet them: {'; '.join(lines)}"
    )


def _between(low: Any, high: Any) -> Any:
    if isinstance(low, int) and isinstance(high, int):
        middle = (low + high) // 2
        return middle if low < middle < high else None
    return (low + high) / 2


def _unpriced(points: Sequence[GridPoint], key: str) -> bool:
    """Two points that differ only on `key` cost the same: a lower value buys nothing."""
    for i, (values, cost, _) in enumerate(points):
        for other, other_cost, _ in points[i + 1 :]:
            same = all(other.get(k) == v for k, v in values.items() if k != key)
            if same and other.get(key) != values.get(key):
                return cost == other_cost
    return False


def _at(key: str) -> Any:
    return lambda point: point[0][key]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
