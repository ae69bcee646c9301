"""The figures of a sweep: heal and discard rate curves with 95 % bands, loop-length CCDFs,
and a heatmap of a two-key grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from sim.core.stats import parse_target
from sim.outputs.figures import LINE_STYLES, MARKERS, save_figure, scale_x
from sim.results.reading import (
    read_sweep,
    task_records,
)


def _numeric(values: list[object]) -> bool:
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values if v is not None
    )


def plot_sweep(directory: Path, target: str | None = None) -> list[Path]:
    paths: list[Path] = []
    for stem, fig in sweep_figures(directory, target).items():
        paths += save_figure(fig, directory, stem)
    return paths


def sweep_figures(directory: Path, target: str | None = None) -> dict[str, Figure]:
    """Heal-rate curves with 95 % bands, loop-length CCDFs, and a heatmap for 2-D grids, by
    file stem."""
    sweep = read_sweep(directory)
    grid, points = sweep.grid, sweep.points
    if points.empty or not grid:
        return {}
    target = target or sweep.target
    numeric = [k for k, v in grid.items() if _numeric(v) and len(v) > 1]
    groups = [k for k in grid if k not in numeric[:1]]
    figures: dict[str, Figure] = {}
    if numeric:
        figures["sweep_curves"] = _curves(points, numeric[0], groups)
    points_n = int(points["point"].nunique())
    by = list(grid) if points_n <= CCDF_CURVES else [k for k in grid if k not in numeric]
    figures["loop_ccdf"] = _loop_ccdf(
        directory, by or list(grid)[:1], [k for k in grid if k not in by]
    )
    if len(numeric) >= 2:
        figures.update(_heatmap(points, numeric[0], numeric[1], target))
    return figures


def _label(row: pd.Series, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={row[k]}" for k in keys) or "all"


def _curves(points: pd.DataFrame, x: str, groups: list[str]) -> Figure:
    """Heal rate and discard rate against `x`, a line per setting of the other keys. Each line
    has its own colour, line style and marker (lines that coincide stay visible, and the legend
    says which coincide); a panel with no value says why instead of promising one (with no
    discard at any point no loop formed, so the heal rate is undefined)."""
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    for ax, metric in zip(axes, ("heal_rate", "discard_rate"), strict=True):
        data = points[points["metric"] == metric]
        keyed = data.groupby(groups, dropna=False, sort=False) if groups else [((), data)]
        drawn: list[tuple[np.ndarray, np.ndarray, str]] = []
        for _, series in keyed:
            if series.empty or not series["mean"].notna().any():
                continue
            series = series.sort_values(x)
            xs = series[x].to_numpy(dtype=float)
            means = series["mean"].to_numpy(dtype=float)
            name = _label(series.iloc[0], groups)
            same = next(
                (first for a, b, first in drawn if _equal(a, xs) and _equal(b, means)), None
            )
            k = len(drawn)
            drawn.append((xs, means, name))
            ax.plot(
                xs,
                means,
                label=name if same is None else f"{name} (same as {same})",
                color=f"C{k % 10}",
                linestyle=LINE_STYLES[k % len(LINE_STYLES)],
                marker=MARKERS[k % len(MARKERS)],
                markersize=8 - 2 * (k % 3),
                fillstyle="none" if k % 2 else "full",
            )
            ax.fill_between(xs, series["ci_low"], series["ci_high"], alpha=0.2)
        scale_x(ax, points[x].astype(float).unique().tolist())
        ax.set_xlabel(x)
        ax.set_ylabel(f"{metric} (mean, 95 % CI over seeds)")
        ax.set_ylim(-0.02, 1.02)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(
                0.5, 0.5, _no_value(points, metric), ha="center", wrap=True, transform=ax.transAxes
            )
    fig.suptitle(f"heal rate and discard rate against {x}")
    return fig


def _no_value(points: pd.DataFrame, metric: str) -> str:
    """Why a panel has no line: no discard (so no loop, and no heal rate), or no retried loop."""
    discards = points[points["metric"] == "discard_rate"]["mean"]
    if metric == "discard_rate":
        return "no prefetch was issued at any point:\nno discard rate"
    if not (discards.fillna(0) > 0).any():
        return "no discard at any point, so no loop formed:\nheal rate undefined"
    return "no loop was retried at any point:\nheal rate undefined"


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


CCDF_CURVES = 8
"""Up to this many grid points get a loop-length curve each; more are pooled over the numeric
keys (the title says which)."""


def _loop_ccdf(directory: Path, by: list[str], pooled: list[str]) -> Figure:
    lengths: dict[str, list[int]] = {}
    for record in task_records(directory):
        label = ", ".join(f"{k.split('.')[-1]}={record['values'].get(k)}" for k in by)
        lengths.setdefault(label, []).extend(record.get("loop_lengths", []))
    fig = Figure(figsize=(6.5, 4.5), layout="constrained")
    ax = fig.subplots()
    for label, values in lengths.items():
        if not values:
            continue
        xs = np.sort(np.asarray(values))
        ccdf = 1.0 - np.arange(len(xs)) / len(xs)
        ax.step(xs, ccdf, where="post", label=f"{label} ({len(xs)} loops)")
    if not ax.lines:
        ax.text(0.5, 0.5, "no loops", ha="center", va="center", transform=ax.transAxes)
    if ax.lines:
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Loop lengths are whole discards: plain integer ticks, not 2×10⁰.
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        longest = max(max(v) for v in lengths.values() if v)
        ax.set_xticks([t for t in (1, 2, 3, 5, 10, 20, 50, 100, 200, 500) if t <= max(longest, 2)])
        ax.legend(fontsize=8)
    ax.set_xlabel("loop length (discards)")
    ax.set_ylabel("P(length ≥ x)")
    over = f", pooled over {', '.join(k.split('.')[-1] for k in pooled)}" if pooled else ""
    ax.set_title(f"loop-length CCDF over seeds{over}", fontsize=10)
    return fig


def _heatmap(points: pd.DataFrame, x: str, y: str, target: str | None) -> dict[str, Figure]:
    metric, op, bound = parse_target(target) if target else ("heal_rate", ">=", None)
    data = points[points["metric"] == metric]
    table = data.pivot_table(index=y, columns=x, values="mean", aggfunc="mean")
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    mesh = ax.imshow(table.to_numpy(), origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(table.columns)), [str(c) for c in table.columns])
    ax.set_yticks(range(len(table.index)), [str(i) for i in table.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    fig.colorbar(mesh, label=f"{metric} (mean over seeds and other keys)")
    if bound is not None and min(table.shape) >= 2:
        ax.contour(table.to_numpy(), levels=[bound], colors="white", linewidths=2)
        ax.set_title(f"{metric}; white line: target {metric} {op} {bound}")
    return {f"heatmap_{metric}": fig}
