"""Statistics over seeds: the t confidence interval every figure carries, and the targets
(`METRIC>=VALUE`) that sweeps draw and capacity searches meet with it."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy import stats


def confidence(values: Iterable[float], level: float = 0.95) -> dict[str, float]:
    """Mean, standard deviation, count and a two-sided t interval over seeds (NaN spread and
    interval for fewer than two values)."""
    arr = np.asarray(list(values), dtype=float)
    n = arr.size
    mean = float(arr.mean()) if n else float("nan")
    if n < 2:
        # One seed says nothing about the spread: the interval is unavailable, not zero wide.
        nan = float("nan")
        return {"mean": mean, "std": nan, "n": n, "ci_low": nan, "ci_high": nan}
    std = float(arr.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * std / np.sqrt(n))
    return {"mean": mean, "std": std, "n": n, "ci_low": mean - half, "ci_high": mean + half}


def parse_target(text: str) -> tuple[str, str, float]:
    """'heal_rate>=0.9' -> ('heal_rate', '>=', 0.9); the bound must be a finite number (a NaN
    bound is never met, an infinite one always or never, whatever the runs say)."""
    for op in (">=", "<="):
        metric, sep, value = text.partition(op)
        if sep:
            try:
                bound = float(value)
            except ValueError:
                break
            if not math.isfinite(bound):
                raise ValueError(
                    f"the bound {value.strip()!r} in {text!r} is not a finite number "
                    f"(give e.g. {metric.strip() or 'heal_rate'}{op}0.9)"
                )
            return metric.strip(), op, bound
    raise ValueError(f"target {text!r} must look like METRIC>=VALUE or METRIC<=VALUE")
