"""A capacity answer as a planner quotes it: with its unit, to the precision the search earned.

A bisection's answer is the smallest value seen to meet the target; the largest value seen to
fail lies below it, and the true threshold is somewhere between. Printing the answer to six
digits ("32.0938 GB") claims a precision the search never had, so it is rounded to one digit
finer than that gap ("32.1 GB, resolved to within 3.1 GB"). A page or slot count also says what
it holds in tokens and bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sim.core.units import is_missing, param_unit, size_text
from sim.scenario.sizes import size_keys


def decimals_for(resolution: float | None) -> int | None:
    """Decimal places that show a value one digit finer than `resolution` (None: unknown)."""
    if resolution is None or not math.isfinite(resolution) or resolution <= 0:
        return None
    return max(0, 1 - math.floor(math.log10(resolution)))


def quantity_text(param: str, value: Any, resolution: float | None = None) -> str:
    """`value` of scenario key `param` with the key's unit, rounded to `resolution` when given
    (six significant digits otherwise): '32.1 GB', '4,096 pages'."""
    if is_missing(value):
        return "–"
    number = float(value)
    places = decimals_for(resolution)
    if number.is_integer() and (places is None or places == 0 or param_unit(param) != "GB"):
        text = f"{int(number):,}"
    elif places is not None:
        text = f"{number:,.{places}f}"
    else:
        text = f"{number:.6g}"
    unit = param_unit(param)
    return f"{text} {unit}" if unit and unit != "/s" else f"{text}{unit}"


def answer_text(
    param: str,
    answer: Any,
    failing: Any = None,
    config: Mapping[str, Any] | None = None,
) -> str:
    """'32.1 GB (resolved to within 3.1 GB; 29.0 GB fails)': the answer rounded to the gap to the
    largest failing value, that gap, and for a page or slot key what the answer holds."""
    if is_missing(answer):
        return "none in range"
    gap = None if is_missing(failing) else float(answer) - float(failing)
    text = quantity_text(param, answer, gap)
    held = _held(param, float(answer), config)
    notes = []
    if held:
        notes.append(held)
    if gap is not None:
        notes.append(
            f"resolved to within {quantity_text(param, gap, gap)}; "
            f"{quantity_text(param, failing, gap)} fails"
        )
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _held(param: str, value: float, config: Mapping[str, Any] | None) -> str:
    """What a page, slot or GB count of `param` holds in the configuration's model."""
    if config is None or param_unit(param) == "GB":
        return ""
    for size in size_keys(dict(config)):
        if size.key != param:
            continue
        parts = []
        if size.unit_tokens is not None:
            parts.append(f"{value * size.unit_tokens:,.0f} tokens")
        parts.append(size_text(value * size.unit_bytes))
        return ", ".join(parts)
    return ""


def same_every_seed(stats: Mapping[Any, Any]) -> bool:
    """Two seeds or more and an interval of no width: every seed gave the same value, because
    what the seeds vary did not move the metric (a zero-width interval is then no precision)."""
    n, low, high = stats.get("n"), stats.get("ci_low"), stats.get("ci_high")
    return (
        isinstance(n, int | float)
        and n >= 2
        and isinstance(low, int | float)
        and isinstance(high, int | float)
        and not is_missing(low)
        and float(low) == float(high)
    )


SAME_NOTE = "every seed gave the same value"


def interval_text(metric: str, stats: Mapping[str, Any]) -> str:
    """'discard_rate mean 0.15, 95 % CI [0.1, 0.2]', or where every seed gave the same value,
    that, instead of an interval of no width that would read as precision."""
    mean = stats["mean"]
    if same_every_seed(stats):
        return (
            f"{metric} {mean:.4g} ({SAME_NOTE}: what the seeds vary did not move {metric}, so "
            "the interval has no width and measures no precision)"
        )
    return f"{metric} mean {mean:.4g}, 95 % CI [{stats['ci_low']:.4g}, {stats['ci_high']:.4g}]"
