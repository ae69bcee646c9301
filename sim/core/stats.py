"""Statistics over seeds: the t confidence interval every figure carries, and the targets
(`METRIC>=VALUE`) that sweeps draw and capacity searches meet with it.

The interval is Student's t over the per-seed values, truncated to the quantity's physical range
(`metric_range`: counts, bytes, tokens and durations are never negative, a rate lies in [0, 1]).
A t interval is symmetric and knows nothing of bounds, so with few seeds near a bound it reaches
past it ("-0.3 loops"); the truncated interval keeps the same coverage for every value the
quantity can take. A Wilson interval is not used for rates: each seed's rate is one observation
of a ratio of counts that vary together from seed to seed, not a Bernoulli trial, and pooling
the counts over seeds would hide that variation."""

from __future__ import annotations

import math
import string
from collections.abc import Iterable

import numpy as np
from scipy import stats

SIGNED_METRICS = frozenset({"device_change_tokens"})
"""Summary keys that may be negative (a change, not an amount)."""


def metric_range(key: str | None) -> tuple[float, float]:
    """The values a summary key can take: [0, 1] for a rate, [0, inf) for an amount, anything
    for a signed key (and for no key)."""
    if key is None or key in SIGNED_METRICS:
        return (-math.inf, math.inf)
    if key.endswith("_rate"):
        return (0.0, 1.0)
    return (0.0, math.inf)


def confidence(
    values: Iterable[float], level: float = 0.95, key: str | None = None
) -> dict[str, float]:
    """Mean, standard deviation, count and a two-sided t interval over seeds, truncated to the
    range of summary key `key` (NaN spread and interval for fewer than two values)."""
    arr = np.asarray(list(values), dtype=float)
    n = arr.size
    mean = float(arr.mean()) if n else float("nan")
    if n < 2:
        # One seed says nothing about the spread: the interval is unavailable, not zero wide.
        nan = float("nan")
        return {"mean": mean, "std": nan, "n": n, "ci_low": nan, "ci_high": nan}
    std = float(arr.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * std / np.sqrt(n))
    low, high = metric_range(key)
    ci_low, ci_high = max(mean - half, low), min(mean + half, high)
    return {"mean": mean, "std": std, "n": n, "ci_low": ci_low, "ci_high": ci_high}


def parse_target(text: str) -> tuple[str, str, float]:
    """'heal_rate>=0.9' -> ('heal_rate', '>=', 0.9); a rate's bound may be a percentage
    ('l3_loaded_rate>=23%' -> 0.23). The bound must be a finite number (a NaN bound is never
    met, an infinite one always or never, whatever the runs say)."""
    if "@" in text:
        raise ValueError(
            f"{text!r} is relative to a reference point (…@REFERENCE), which only "
            "`hicache-sim capacity --target` runs; give an absolute bound here"
        )
    metric, op, bound, percent = _parse(text)
    if percent and not metric.endswith("_rate"):
        raise ValueError(
            f"{text!r}: a percentage bound is for a rate (a key ending in _rate, such as "
            f"l3_loaded_rate>=23%); {metric} is not one, so give its value in its own unit, or "
            f"a share of a reference point with capacity's {metric}{op}95%@unbounded"
        )
    _check_reachable(text, metric, op, bound)
    return metric, op, bound


def _check_reachable(text: str, metric: str, op: str, bound: float) -> None:
    """A bound outside the metric's range is met by every run or by none, so the search would
    answer nothing useful: refuse it before the first run (a rate above 1 is likely a
    percentage written without its sign)."""
    low, high = metric_range(metric)
    if low <= bound <= high:
        return
    hint = ""
    if high == 1.0 and 1.0 < bound <= 100.0:
        hint = f"; for {bound:g} % write {metric}{op}{bound:g}% or {metric}{op}{bound / 100:g}"
    raise ValueError(
        f"{text!r}: {metric} lies between {low:g} and {high:g}, so a bound of {bound:g} is "
        f"{'never' if (op == '>=') == (bound > high) else 'always'} met{hint}"
    )


def parse_relative(text: str) -> tuple[str, str, float, str] | None:
    """'l3_loaded_rate>=95%@unbounded' -> ('l3_loaded_rate', '>=', 0.95, 'unbounded'): the
    metric must reach (or stay under) that share of its mean at the reference point; None for
    an absolute target. The share is a percentage or a plain factor (0.95)."""
    head, sep, reference = text.partition("@")
    if not sep:
        return None
    if not reference.strip():
        raise ValueError(
            f"{text!r} names no reference point after '@' (give e.g. "
            f"{head.strip()}@unbounded, or a value of the searched key such as @100GB)"
        )
    metric, op, share, percent = _parse(head)
    if share <= 0:
        raise ValueError(f"the share {share:g} in {text!r} must be above 0 (e.g. 95%)")
    if not percent and share > 1 and metric_range(metric)[1] == 1.0:
        raise ValueError(
            f"{text!r}: a factor of {share:g} of a rate without '%' is likely a percentage "
            f"without its sign; for {share:g} % write {metric}{op}{share:g}%@{reference.strip()} "
            f"or {metric}{op}{share / 100:g}@{reference.strip()}"
        )
    return metric, op, share, reference.strip()


def check_resolved(text: str, metric: str, op: str, share: float, mean: float) -> float:
    """A relative target's bound once its reference is measured (`share` x `mean`), refused as
    an absolute one outside the metric's range is (`l3_loaded_rate>=400%@unbounded` asks for a
    rate above 1 wherever the reference's rate is above 0.25)."""
    bound = share * mean
    low, high = metric_range(metric)
    if low <= bound <= high:
        return bound
    raise ValueError(
        f"{text!r} becomes {metric}{op}{bound:.6g} ({share:.4g} x the reference's mean "
        f"{mean:.4g}), but {metric} lies between {low:g} and {high:g}, so it is "
        f"{'never' if (op == '>=') == (bound > high) else 'always'} met; ask a smaller share"
    )


def _parse(text: str) -> tuple[str, str, float, bool]:
    for op in (">=", "<="):
        metric, sep, value = text.partition(op)
        if sep:
            raw = value.strip()
            percent = raw.endswith("%")
            try:
                bound = float(raw.removesuffix("%")) / (100 if percent else 1)
            except ValueError:
                number = raw.rstrip(string.ascii_letters).strip()
                if number and number != raw and _is_float(number):
                    raise ValueError(
                        f"the bound {raw!r} in {text!r} carries a unit ({raw[len(number) :]!r}): "
                        f"targets take the summary key's own unit, so write the number alone "
                        f"({metric.strip()}{op}{number})"
                    ) from None
                break
            if not math.isfinite(bound):
                raise ValueError(
                    f"the bound {value.strip()!r} in {text!r} is not a finite number "
                    f"(give e.g. {metric.strip() or 'heal_rate'}{op}0.9)"
                )
            return metric.strip(), op, bound, percent
    raise ValueError(
        f"target {text!r} must look like METRIC>=VALUE or METRIC<=VALUE (a rate also takes a "
        "percentage, l3_loaded_rate>=23%; capacity also takes a share of a reference point, "
        "l3_loaded_rate>=95%@unbounded)"
    )


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
