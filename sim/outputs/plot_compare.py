"""The figure of a comparison: key metrics per variant, and cumulative discards over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from sim.outputs.figures import LINE_STYLES, MARKERS, save_figure
from sim.outputs.plot_run import cluster_total
from sim.results.layout import COMPARISON
from sim.results.reading import (
    read_compare,
    with_columns,
)

COMPARE_PANELS = (
    ("discard_rate", "discard rate"),
    ("heal_rate", "heal rate"),
    ("loop_length_mean", "mean loop length (discards)"),
    ("rewrite_pages", "rewritten pages"),
    ("wasted_read_bytes", "wasted storage reads (GB)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
)


def plot_comparison(directory: Path, label: str | None = None) -> Path:
    return save_figure(comparison_figure(directory, label), directory, "comparison")[0]


def comparison_figure(directory: Path, label: str | None = None) -> Figure:
    """Bars of the key metrics per variant, and cumulative discards over time.

    `label` is the column naming the variants (default: the first column of comparison.csv,
    `heal` for heal rules). Run directories and the labels as given are read from variants.json
    when there is one (a label such as `null` or `0.10` does not survive a CSV round trip);
    older compare directories name each run directory after its heal rule.
    """
    compared = read_compare(directory, label)
    panels = [key for key, _ in COMPARE_PANELS]
    table = with_columns(compared.table, directory / COMPARISON, panels, panels)
    label = compared.column
    labels = compared.labels
    fig = Figure(figsize=(16, 7), layout="constrained")
    cells = fig.add_gridspec(2, 4)
    # Six metric panels, and the discards over time across the last two cells (no empty slot).
    flat = [fig.add_subplot(cells[i // 4, i % 4]) for i in range(len(COMPARE_PANELS))]
    flat.append(fig.add_subplot(cells[1, 2:]))
    colors = [f"C{i % 10}" for i in range(len(table))]
    for ax, (key, title) in zip(flat, COMPARE_PANELS, strict=False):
        missing = bool(table[key].isna().all())
        values = table[key].astype(float).fillna(0.0)
        if missing:
            ax.set_ylim(0, 1)
            ax.text(0.5, 0.5, "no value under any variant", ha="center", transform=ax.transAxes)
        if key == "wasted_read_bytes":
            values = values / 1e9
        bars = ax.bar(range(len(labels)), values, color=colors, tick_label=labels)
        ax.bar_label(bars, labels=[_short(v) for v in values], fontsize=7)
        positive = values[values > 0]
        if len(positive) >= 2 and positive.max() / positive.min() >= 10:
            ax.set_yscale("log")
            title += " (log scale)"
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=20)
    ax = flat[len(COMPARE_PANELS)]
    drawn: list[tuple[np.ndarray, str]] = []
    runs = compared.runs()
    for i, (color, name) in enumerate(zip(colors, labels, strict=True)):
        run = runs.get(name)
        if run is not None and run.has_timeseries:
            ts = cluster_total(run.timeseries(), "discards")
            same = next(
                (first for values, first in drawn if np.array_equal(values, ts["discards"])), None
            )
            drawn.append((ts["discards"].to_numpy(), name))
            # Coinciding series stay visible: each its own line style and marker, and a note.
            ax.plot(
                ts["t_s"],
                ts["discards"],
                label=name if same is None else f"{name} (same as {same})",
                color=color,
                linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                marker=MARKERS[i % len(MARKERS)],
                markevery=max(1, len(ts) // 12),
                markersize=4,
            )
    ax.set_title("cumulative discards (after warm-up)")
    ax.set_xlabel("simulated time (s)")
    if ax.lines:
        ax.legend(fontsize=8)
    first = next(iter(runs.values()), None)
    name = first.name if first is not None else directory.name
    what = {"heal": "heal rules", "variant": "variants"}.get(label, label)
    fig.suptitle(f"{name}: {what} compared on the same seed")
    return fig


def _short(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
