"""Texts the plots draw: names taken from scenarios are drawn as written (a `$` in a label is no
mathtext), while the axes' tick labels, which matplotlib's formatters write as mathtext on a log
axis, are still parsed and read as numbers, not as raw TeX."""

from __future__ import annotations

from pathlib import Path

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
