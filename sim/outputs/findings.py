"""Findings: plain sentences computed from a result directory's numbers.

A reader of a report should not have to know which of seventy summary keys answer the three
questions the tool exists for (what looped, what healed, what it cost), nor compare columns by
eye. Each function turns one kind of result into those answers; the report only lays them out.
Every number in a sentence comes from the data passed in, never from a threshold of opinion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sim.core.stats import parse_target
from sim.core.units import brief, bytes_text, cell, is_missing, metric_text, metric_unit, number

LABELS = {
    "prefetch_discarded": "discarded prefetches",
    "discard_rate": "discard rate",
    "loops": "loops",
    "loop_length_mean": "mean loop length",
    "loop_length_max": "longest loop",
    "heal_rate": "heal rate",
    "time_to_heal_p50_s": "median time to heal",
    "wasted_read_bytes": "wasted storage reads",
    "rewrite_pages": "rewritten KV pages",
    "rewrite_bytes": "rewrite bytes",
    "recomputed_tokens": "recomputed tokens",
    "ttft_p99_s": "TTFT p99",
    "ttft_p50_s": "TTFT p50",
    "l3_loaded_rate": "share of prompt tokens restored from storage",
}
COMPARE_KEYS = (
    "prefetch_discarded",
    "loops",
    "loop_length_max",
    "heal_rate",
    "time_to_heal_p50_s",
    "wasted_read_bytes",
    "rewrite_pages",
    "recomputed_tokens",
    "ttft_p99_s",
)
"""What a comparison of variants is about: loops, healing, and their costs."""

SWEEP_KEYS = (
    "discard_rate",
    "loops",
    "loop_length_max",
    "heal_rate",
    "wasted_read_bytes",
    "rewrite_pages",
    "recomputed_tokens",
    "ttft_p99_s",
    "l3_loaded_rate",
)
"""The metrics a sweep report ranges over (the target's metric is added when it is not one)."""

Row = Mapping[Any, Any]
"""A record of points.csv or evaluations.csv (pandas types its keys as Hashable)."""

OVERLAP_KEYS = ("discard_rate", "heal_rate", "rewrite_pages", "wasted_read_bytes")
LISTED_POINTS = 6


def label(key: str) -> str:
    return LABELS.get(key, key)


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def percent(part: float, whole: float) -> str:
    return f"{part / whole * 100:.1f} %"


def _count(summary: Mapping[str, Any], key: str) -> int:
    value = summary.get(key)
    return 0 if value is None or is_missing(value) else int(value)


# --- a run ----------------------------------------------------------------------------------------


def run_findings(summary: Mapping[str, Any]) -> list[str]:
    """What looped, what healed, what it cost, and what storage restored, for one run."""
    sentences = [_looped(summary)]
    healed = _healed(summary)
    if healed:
        sentences.append(healed)
    sentences.append(_cost(summary))
    restored = _restored(summary)
    if restored:
        sentences.append(restored)
    outcomes = []
    if unfinished := _count(summary, "requests_unfinished"):
        outcomes.append(f"{unfinished:,} were still unfinished at the horizon")
    if rejected := _count(summary, "requests_rejected"):
        outcomes.append(f"{rejected:,} were rejected (they can never fit on the device)")
    if outcomes:
        sentences.append(f"Of {_count(summary, 'requests'):,} requests, {_join(outcomes)}.")
    cluster = _cluster(summary)
    if cluster:
        sentences.append(cluster)
    return sentences


def _looped(s: Mapping[str, Any]) -> str:
    issued, discarded = _count(s, "prefetch_issued"), _count(s, "prefetch_discarded")
    if not issued:
        return "No storage prefetch was issued after warm-up, so nothing could loop."
    if not discarded:
        return f"None of the {issued:,} issued prefetches was discarded: nothing looped."
    loops = _count(s, "loops")
    text = (
        f"{discarded:,} of the {issued:,} issued prefetches were discarded (discard rate "
        f"{number(s.get('discard_rate'))}), in {metric_text('loops', loops)}"
    )
    longest = _count(s, "loop_length_max")
    if loops and longest > 1:
        text += (
            f" of {number(s.get('loop_length_mean'))} discards on average; the longest was "
            f"discarded {longest:,} times in a row at the same endpoint."
        )
    elif loops:
        text += ", each a single discard: no endpoint was discarded twice in a row."
    else:
        text += ", all begun before the end of warm-up, so none is counted."
    return text


def _healed(s: Mapping[str, Any]) -> str | None:
    loops = _count(s, "loops")
    if not loops:
        return None
    if is_missing(s.get("loops_retried")):
        return f"The heal rate was {number(s.get('heal_rate'))}."
    retried, healed = _count(s, "loops_retried"), _count(s, "loops_healed")
    if not retried:
        return "No loop was retried (no later prefetch reached a looped endpoint): none could heal."
    text = (
        f"{healed:,} of the {retried:,} retried loops healed (heal rate {number(s['heal_rate'])})"
    )
    if not is_missing(s.get("time_to_heal_p50_s")):
        took = metric_text("time_to_heal_p50_s", s["time_to_heal_p50_s"])
        text += (
            f"; the median healed loop took {took} from its first discard to its healing success"
        )
    text += "."
    if loops > retried:
        text += f" {loops - retried:,} of the {loops:,} loops were never retried."
    return text


def _cost(s: Mapping[str, Any]) -> str:
    parts = []
    wasted = s.get("wasted_read_bytes")
    if not is_missing(wasted) and wasted:
        parts.append(f"{bytes_text(float(wasted))} of storage reads thrown away with the discards")
    rewrites = _count(s, "rewrite_pages")
    rewrite = f"{rewrites:,} KV pages rewritten after heals"
    if rewrites and not is_missing(s.get("rewrite_bytes")):
        rewrite += f" ({bytes_text(float(s['rewrite_bytes']))} of writes)"
    parts.append(rewrite)
    prompt, recomputed = _count(s, "prompt_tokens"), _count(s, "recomputed_tokens")
    if prompt:
        parts.append(
            f"{recomputed:,} of {prompt:,} prompt tokens recomputed ({percent(recomputed, prompt)})"
        )
    if not is_missing(s.get("ttft_p99_s")):
        ttft = f"a TTFT p99 of {metric_text('ttft_p99_s', s['ttft_p99_s'])}"
        if not is_missing(s.get("ttft_p50_s")):
            ttft += f" (p50 {metric_text('ttft_p50_s', s['ttft_p50_s'])})"
        parts.append(ttft)
    return f"What it cost: {_join(parts)}."


def _restored(s: Mapping[str, Any]) -> str | None:
    prompt = _count(s, "prompt_tokens")
    if not prompt or is_missing(s.get("l3_loaded_tokens")):
        return None
    loaded = _count(s, "l3_loaded_tokens")
    return (
        f"Storage restored {loaded:,} prompt tokens ({percent(loaded, prompt)} of them); the "
        f"device already held {_count(s, 'device_hit_tokens'):,}."
    )


def _cluster(s: Mapping[str, Any]) -> str | None:
    """What the servers of a cluster did to each other through the shared backend."""
    instances = _count(s, "instances")
    if instances <= 1:
        return None
    text = f"{instances:,} servers shared one storage backend"
    if not is_missing(s.get("load_imbalance")):
        text += (
            f"; the busiest received {number(s['load_imbalance'])} times the mean number of "
            "requests"
        )
    loops = _count(s, "loops")
    parts = [
        f"{_count(s, 'cross_instance_l3_hit_pages'):,} KV pages were read from objects another "
        "server had stored",
        f"{_count(s, 'cross_instance_rewrite_objects'):,} objects were put again that another "
        "server had already stored",
        f"{_count(s, 'loops_stale_by_other_instance'):,} of the {loops:,} loops missed an object "
        "another server's write had pushed out of storage",
    ]
    return f"{text}. Across servers, {_join(parts)}."


def _join(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


# --- a comparison ---------------------------------------------------------------------------------


def compare_findings(table: pd.DataFrame, column: str) -> list[str]:
    """How the variants (rows of comparison.csv, named in `column`) differ from the first one,
    metric by metric, and where they differ most."""
    rows = table.to_dict("records")
    names = [str(r[column]) for r in rows]
    if len(rows) < 2:
        return [f"Only one variant ({', '.join(names)}): nothing to compare."]
    base = names[0]
    sentences, same = [], []
    spreads: list[tuple[float, str]] = []
    for key in (k for k in COMPARE_KEYS if k in table.columns):
        values = [r[key] for r in rows]
        present = [float(v) for v in values if not is_missing(v)]
        if not present:
            continue
        if len(present) == len(values) and min(present) == max(present):
            same.append(f"{label(key)} ({metric_text(key, values[0])})")
            continue
        items = [f"{base} {brief(key, values[0])}"]
        for name, value in zip(names[1:], values[1:], strict=True):
            delta = _delta(key, values[0], value)
            items.append(f"{name} {brief(key, value)}" + (f" ({delta})" if delta else ""))
        sentences.append(f"{capital(label(key))}: {'; '.join(items)}.")
        if metric_unit(key) != "ratio" and min(present) > 0:
            spreads.append((max(present) / min(present), key))
    if spreads:
        ratio, key = max(spreads)
        low = min(range(len(rows)), key=lambda i: _sortable(rows[i][key]))
        high = max(range(len(rows)), key=lambda i: _sortable(rows[i][key], -np.inf))
        sentences.insert(
            0,
            f"The variants differ most in {label(key)}: {ratio:.3g}× from "
            f"{metric_text(key, rows[low][key])} under {names[low]} to "
            f"{metric_text(key, rows[high][key])} under {names[high]}.",
        )
    if same:
        sentences.append(f"The same under every variant: {_join(same)}.")
    return sentences


def _sortable(value: Any, missing: float = np.inf) -> float:
    return missing if is_missing(value) else float(value)


def _delta(key: str, base: Any, value: Any) -> str:
    """A change against the first variant: a difference for ratios, a factor or percentage for
    amounts."""
    if is_missing(base) or is_missing(value):
        return ""
    base, value = float(base), float(value)
    if value == base:
        return "the same"
    if metric_unit(key) == "ratio":
        return f"{value - base:+.3g}"
    if base == 0:
        return "none under the first"
    factor = value / base
    if factor >= 2 or factor <= 0.5:
        return f"{factor:.3g}×"
    return f"{(factor - 1) * 100:+.1f} %"


# --- a sweep --------------------------------------------------------------------------------------


def short(key: str) -> str:
    return key.split(".")[-1]


def setting(value: Any) -> str:
    """A swept value as the scenario file would say it (null for None)."""
    return "null" if is_missing(value) else number(value)


def where(row: Row, keys: Sequence[str]) -> str:
    return ", ".join(f"{short(k)}={setting(row[k])}" for k in keys) or "the only point"


def interval(key: str, row: Row) -> str:
    """'0.0958 (95 % CI 0.083 to 0.1086)'."""
    mean = cell(key, row["mean"])
    if (
        int(row.get("n") or 0) < 2
        or is_missing(row.get("ci_low"))
        or is_missing(row.get("ci_high"))
    ):
        return f"{mean} (one seed: no interval)"
    return f"{mean} (95 % CI {cell(key, row['ci_low'])} to {cell(key, row['ci_high'])})"


def sweep_metrics(target: str | None) -> list[str]:
    keys = list(SWEEP_KEYS)
    if target:
        metric = parse_target(target)[0]
        if metric not in keys:
            keys.append(metric)
    return keys


def sweep_findings(
    points: pd.DataFrame, grid: Mapping[str, list[Any]], meta: Mapping[str, Any]
) -> list[str]:
    """Size of the sweep, the range of each key metric across points (with 95 % intervals),
    whether the values of a categorical key can be told apart, the target, and failures."""
    keys = list(grid)
    n_points = int(points["point"].nunique()) if not points.empty else 0
    seeds = int(points["n"].max()) if not points.empty else 0
    failed = list(meta.get("failed") or [])
    runs = number(meta.get("tasks"))
    head = f"{plural(n_points, 'grid point')} × {plural(seeds, 'seed')} ({runs} runs"
    sentences = [head + (f", {len(failed):,} failed)." if failed else ").")]
    target = meta.get("target")
    for key in sweep_metrics(target):
        rows = points[(points["metric"] == key) & points["mean"].notna()]
        if rows.empty:
            if key in set(points["metric"]):
                sentences.append(f"{capital(label(key))}: no value at any point.")
            continue
        records = rows.to_dict("records")
        low = min(records, key=lambda r: r["mean"])
        high = max(records, key=lambda r: r["mean"])
        if low["mean"] == high["mean"]:
            everywhere = (
                "at every point"
                if len(records) == n_points
                else f"at the {len(records)} of {n_points} points with a value"
            )
            sentences.append(f"{capital(label(key))}: {brief(key, low['mean'])} {everywhere}.")
            continue
        sentences.append(
            f"{capital(label(key))}: from {interval(key, low)} at {where(low, keys)} "
            f"to {interval(key, high)} at {where(high, keys)}."
        )
    sentences += _overlaps(points, grid)
    if target:
        sentences.append(_target(points, target, keys))
    for fail in failed[:LISTED_POINTS]:
        sentences.append(
            f"Failed: point {fail.get('values')} seed {fail.get('seed')}: {fail.get('error')}."
        )
    return sentences


def _numeric(values: Sequence[Any]) -> bool:
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values if v is not None
    )


def _overlaps(points: pd.DataFrame, grid: Mapping[str, list[Any]]) -> list[str]:
    """For each categorical swept key (a heal rule, a hit query): at how many settings of the
    other keys the 95 % intervals of its values share a common value, i.e. the sweep cannot
    tell them apart there."""
    sentences = []
    for key, values in grid.items():
        if _numeric(values) or len(values) < 2:
            continue
        others = [k for k in grid if k != key]
        for metric in OVERLAP_KEYS:
            rows = points[(points["metric"] == metric) & points["mean"].notna()]
            if rows.empty or rows["n"].max() < 2:
                continue
            groups = rows.groupby(others, dropna=False, sort=False) if others else [((), rows)]
            together, apart, unknown = 0, [], 0
            for _, group in groups:
                if len(group) < 2:
                    continue
                if not _has_intervals(group):
                    unknown += 1
                elif group["ci_low"].max() <= group["ci_high"].min():
                    together += 1
                else:
                    apart.append(where(group.iloc[0].to_dict(), others))
            total = together + len(apart)
            if not total:
                if unknown:
                    sentences.append(
                        f"{capital(label(metric))} under {short(key)}: one seed (or one value) "
                        "at each setting, no interval, so the sweep cannot tell them apart."
                    )
                continue
            names = _join([setting(v) for v in values])
            over = f"settings of {_join([short(k) for k in others])}" if others else "points"
            text = (
                f"The 95 % intervals of {label(metric)} under {short(key)} {names} overlap at "
                f"{together} of {total} {over}"
            )
            if apart:
                text += f"; they are apart at {'; '.join(apart[:LISTED_POINTS])}"
            if unknown:
                text += f"; at {unknown} more a value has one seed: no interval"
            sentences.append(text + ".")
    return sentences


def _has_intervals(group: pd.DataFrame) -> bool:
    """Every row of the group has an interval (two seeds or more with a value): only then can
    intervals be said to overlap or to be apart."""
    return bool(
        (group["n"] >= 2).all() and group["ci_low"].notna().all() and group["ci_high"].notna().all()
    )


def _target(points: pd.DataFrame, target: str, keys: Sequence[str]) -> str:
    metric, op, bound = parse_target(target)
    rows = points[(points["metric"] == metric) & points["mean"].notna()].to_dict("records")
    meets = [r for r in rows if (r["ci_low"] >= bound if op == ">=" else r["ci_high"] <= bound)]
    text = f"The target {target} holds with 95 % confidence at {len(meets)} of {len(rows)} points"
    if meets and len(meets) < len(rows):
        listed = "; ".join(where(r, keys) for r in meets[:LISTED_POINTS])
        text += f": {listed}" + (" and more" if len(meets) > LISTED_POINTS else "")
    return text + "."


# --- a capacity answer ----------------------------------------------------------------------------


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
            f"{metric} mean {cell(metric, best['mean'])}, "
            f"95 % CI [{cell(metric, best['ci_low'])}, {cell(metric, best['ci_high'])}]."
        )
        failing = next((r for r in rows if _same(r["value"], answer.get("largest_failing"))), None)
        if failing is not None:
            gap = best["value"] - failing["value"]
            sentences.append(
                f"The largest value seen to fail, {quantity_text(param, failing['value'], gap)}, "
                f"has {metric} "
                f"mean {cell(metric, failing['mean'])}, 95 % CI [{cell(metric, failing['ci_low'])}"
                f", {cell(metric, failing['ci_high'])}]: the answer is resolved to within "
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


def param_value(value: Any) -> str:
    """A searched parameter's value to six significant digits, as the capacity command prints
    it (a bisection's answer needs more than a table's four)."""
    if is_missing(value):
        return "–"
    value = float(value)
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


def _same(a: Any, b: Any) -> bool:
    return not is_missing(a) and not is_missing(b) and bool(np.isclose(float(a), float(b)))
