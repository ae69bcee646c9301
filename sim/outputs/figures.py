"""What every figure shares: saving beside the data, texts drawn as written, the x scale.

Figures are built with matplotlib's object API (no pyplot), so plotting works headless and
never changes the backend of the caller (a notebook keeps its inline plots). Each `*_figure`
function only builds a figure; the `plot_*` functions save it beside the data, and the HTML
report renders the same figures in memory without writing into the result directory.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import LogFormatter, ScalarFormatter

from sim.outputs.files import replace_file

LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "x")


def save_figure(fig: Figure, directory: Path, stem: str) -> list[Path]:
    """Every text drawn as it is written: labels come from scenario names, variant labels and
    swept keys, and matplotlib would read a `$...$` in them as mathtext (which raises on an
    unknown command)."""
    ticks = {id(label) for label in _tick_labels(fig)}
    for text in fig.findobj(Text):
        if id(text) not in ticks:
            text.set_parse_math(False)
    return [
        replace_file(directory / f"{stem}.{kind}", partial(fig.savefig, dpi=110, format=kind))
        for kind in ("png", "svg")
    ]


def _tick_labels(fig: Figure) -> list[Text]:
    """The tick labels the axes' number formatters write, as mathtext on a log axis
    (`$\\mathdefault{10^{3}}$`), which must stay parsed to read as numbers; labels set from
    names (a fixed or category formatter) are drawn as written like every other text."""
    labels: list[Text] = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for ticks, formatter in (
                (axis.get_major_ticks(), axis.get_major_formatter()),
                (axis.get_minor_ticks(), axis.get_minor_formatter()),
            ):
                if isinstance(formatter, ScalarFormatter | LogFormatter):
                    labels += [label for tick in ticks for label in (tick.label1, tick.label2)]
            labels.append(axis.get_offset_text())
    return labels


def scale_x(ax: Axes, xs: list[float]) -> None:
    """Log x when the swept values span two decades or more (symlog when zero is among them)."""
    positive = [x for x in xs if x > 0]
    if len(positive) >= 2 and max(positive) / min(positive) >= 100:
        if len(positive) < len(xs):
            ax.set_xscale("symlog", linthresh=min(positive))
        else:
            ax.set_xscale("log")
