"""Intervals stay inside each quantity's physical range (a count, size or duration is never
negative, a rate lies in [0, 1]), and no comparison is claimed without an interval on each side."""

from __future__ import annotations

import math
import re

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.stats import confidence, metric_range
from sim.engine.metrics import summary_keys
from sim.outputs.findings import interval
from sim.outputs.findings_sweep import sweep_findings
from sim.studies.sweep import points_table

KEYS = sorted(summary_keys(("kv", "swa", "mamba")))


def values_in(key: str) -> st.SearchStrategy[list[float]]:
    low, high = metric_range(key)
    low = max(low, -1e12)
    high = min(high, 1e12)
    return st.lists(st.floats(low, high, allow_nan=False), min_size=0, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KEYS).flatmap(lambda k: st.tuples(st.just(k), values_in(k))))
def test_an_interval_never_leaves_its_quantity_s_range(case: tuple[str, list[float]]) -> None:
    key, values = case
    low, high = metric_range(key)
    stats = confidence(values, key=key)
    if len(values) < 2:
        assert math.isnan(stats["ci_low"]) and math.isnan(stats["ci_high"])
        return
    assert low <= stats["ci_low"] <= stats["ci_high"] <= high
    slack = 1e-9 * max(1.0, abs(stats["mean"]))
    assert stats["ci_low"] - slack <= stats["mean"] <= stats["ci_high"] + slack


def test_rates_and_counts_have_physical_ranges() -> None:
    assert metric_range("discard_rate") == (0.0, 1.0)
    assert metric_range("l3_loaded_rate") == (0.0, 1.0)
    assert metric_range("loops") == (0.0, math.inf)
    assert metric_range("wasted_read_bytes") == (0.0, math.inf)
    assert metric_range("device_change_tokens") == (-math.inf, math.inf)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.001, 0.01]),
            st.sampled_from(["none", "keep_pages"]),
            st.floats(0, 1),
            st.integers(0, 5),
            st.floats(0, 1e9),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_sweep_outputs_print_no_interval_outside_its_range(rows: list[tuple]) -> None:
    """Sweep points as `aggregate` makes them from per-seed runs, and the findings printed from
    them: every interval's ends lie in range, and 'apart' is said only of two intervals."""
    runs = pd.DataFrame(
        [
            {
                "point": 0 if fail == 0.001 else 1,
                "storage.pools.swa.put_fail_prob": fail,
                "heal": heal,
                "seed_index": i,
                "discard_rate": rate,
                "heal_rate": rate,
                "loops": loops,
                "wasted_read_bytes": wasted,
                "seed": i,
                "key": str(i),
                "error": None,
            }
            for i, (fail, heal, rate, loops, wasted) in enumerate(rows)
        ]
    )
    runs["point"] = runs.groupby(["storage.pools.swa.put_fail_prob", "heal"]).ngroup()
    points = points_table(runs, ["storage.pools.swa.put_fail_prob", "heal"])
    for record in points.to_dict("records"):
        low, high = metric_range(record["metric"])
        if not math.isnan(record["ci_low"]):
            assert low <= record["ci_low"] <= record["ci_high"] <= high, record
        text = interval(record["metric"], record)
        if record["metric"] != "device_change_tokens":
            assert not re.search(r"CI -|to -", text), text
    grid = {"storage.pools.swa.put_fail_prob": [0.001, 0.01], "heal": ["none", "keep_pages"]}
    for sentence in sweep_findings(points, grid, {"tasks": len(rows)}):
        if "apart at" in sentence:
            assert "95 % intervals" in sentence


def test_one_seed_is_never_called_apart() -> None:
    """Both heal rules at 1.0 from one seed: no interval, so neither 'overlap' nor 'apart'."""
    points = pd.DataFrame(
        [
            {
                "point": i,
                "heal": heal,
                "metric": "heal_rate",
                "mean": 1.0,
                "n": 1,
                "ci_low": math.nan,
                "ci_high": math.nan,
                "std": math.nan,
            }
            for i, heal in enumerate(["none", "keep_pages"])
        ]
    )
    sentences = sweep_findings(points, {"heal": ["none", "keep_pages"]}, {"tasks": 2})
    assert not any("apart" in s for s in sentences), sentences


def test_a_finding_cut_short_says_how_many_it_left_out() -> None:
    """Two heal rules apart at ten settings of another key: six are listed and the other four
    are counted, not dropped silently."""
    rows = [
        {"point": 2 * s + h, "entries": s, "heal": heal, "metric": "discard_rate",
         "mean": 0.1 + 0.5 * h, "n": 3, "ci_low": 0.05 + 0.5 * h, "ci_high": 0.15 + 0.5 * h,
         "std": 0.01}
        for s in range(10)
        for h, heal in enumerate(("none", "keep_pages"))
    ]  # fmt: skip
    grid = {"entries": list(range(10)), "heal": ["none", "keep_pages"]}
    (sentence,) = [s for s in sweep_findings(pd.DataFrame(rows), grid, {}) if "apart at" in s]
    assert sentence.count("entries=") == 6, sentence
    assert "and 4 more, not listed here (points.csv has every one)" in sentence
