"""Texts the plots draw: names taken from scenarios are drawn as written (a `$` in a label is no
mathtext), while the axes' tick labels, which matplotlib's formatters write as mathtext on a log
axis, are still parsed and read as numbers, not as raw TeX; a sweep's curves say why a panel has
no line, and lines that coincide stay visible."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from sim.outputs.figures import _tick_labels, save_figure
from sim.outputs.plot_capacity import _rounded


def test_tick_labels_stay_mathtext_and_names_are_drawn_as_written(tmp_path: Path) -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.bar(["$a$ rule", "b"], [10.0, 6773.0])
    ax.set_yscale("log")
    title = ax.set_title("rule $x$")
    save_figure(fig, tmp_path, "plot")
    fig.canvas.draw()
    assert not title.get_parse_math()
    numbers = [t for t in _tick_labels(fig) if t.get_text()]
    assert any("mathdefault" in t.get_text() for t in numbers)
    assert all(t.get_parse_math() for t in numbers)
    names = [t for t in ax.get_xticklabels() if t.get_text()]
    assert names and not any(t.get_parse_math() for t in names)
    assert (tmp_path / "plot.png").is_file() and (tmp_path / "plot.svg").is_file()


def test_a_capacity_answer_in_a_figure_is_rounded_to_three_digits() -> None:
    assert _rounded("storage.pools.swa.capacity_gb", 10.328125) == "10.3 GB"
    assert _rounded("cluster.instances", 4) == "4"


def _points(heal: list[float], discard: list[float], groups: int = 2) -> pd.DataFrame:
    rows = []
    for g in range(groups):
        for i, x in enumerate((1, 2, 4)):
            for metric, values in (("heal_rate", heal), ("discard_rate", discard)):
                mean = values[i]
                rows.append(
                    {"point": 3 * g + i, "x": x, "rule": f"r{g}", "metric": metric, "mean": mean,
                     "ci_low": mean, "ci_high": mean, "n": 2}
                )  # fmt: skip
    return pd.DataFrame(rows)


def test_sweep_curves_say_why_the_heal_rate_is_missing_and_keep_coinciding_lines_visible() -> None:
    from sim.outputs.plot_sweep import _curves

    nan = float("nan")
    fig = _curves(_points([nan] * 3, [0.0] * 3), "x", ["rule"])
    heal, discard = fig.axes[:2]
    assert not heal.lines, "no empty promise of a heal rate"
    said = " ".join(t.get_text() for t in heal.texts)
    assert "no discard at any point" in said and "heal rate undefined" in said
    first, second = discard.lines
    assert (first.get_linestyle(), first.get_marker()) != (
        second.get_linestyle(),
        second.get_marker(),
    )
    assert second.get_label() == "rule=r1 (same as rule=r0)"
    fig = _curves(_points([nan] * 3, [0.5] * 3), "x", ["rule"])
    assert "no loop was retried" in " ".join(t.get_text() for t in fig.axes[0].texts)
