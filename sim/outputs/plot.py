"""Plots from result directories, as PNG and SVG.

Figures are built with matplotlib's object API (no pyplot), so plotting works headless and
never changes the backend of the caller (a notebook keeps its inline plots). Each `*_figure`
function only builds a figure; the `plot_*` functions save it beside the data, and the HTML
report renders the same figures in memory without writing into the result directory.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import LogFormatter, NullFormatter, ScalarFormatter

from sim.core.stats import parse_target
from sim.core.units import param_text, param_unit
from sim.outputs.files import read_table, replace_file
from sim.results.layout import COMPARISON, Kind, detect
from sim.results.reading import (
    read_capacity,
    read_compare,
    read_run,
    read_sweep,
    task_records,
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


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "x")


def plot_comparison(directory: Path, label: str | None = None) -> Path:
    return _save(comparison_figure(directory, label), directory, "comparison")[0]


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


def plot_run(directory: Path) -> Path:
    return _save(run_figure(directory), directory, "timeseries")[0]


def run_figure(directory: Path) -> Figure:
    """A run's time series: discards, beliefs, device and storage occupancy, each occupancy
    against its capacity (dashed, same colour) where the configuration bounds it. A cluster's
    per-server series are drawn per instance (`cluster_run_figure`)."""
    run = read_run(directory)
    ts, config = run.timeseries(), run.config
    if len(instances_of(ts)) > 1:
        return cluster_run_figure(directory, ts, config)
    storage_cols = [c for c in ts.columns if c.startswith("storage_")]
    fig = Figure(figsize=(16, 7), layout="constrained")
    grid = fig.subplots(2, 3)
    axes = grid[:, :2]
    axes[0, 0].plot(ts["t_s"], ts["discards"])
    axes[0, 0].set_title("cumulative discards (after warm-up)")
    if not ts["discards"].any():
        # A flat zero line on matplotlib's default -0.04..0.04 axis reads as noise.
        axes[0, 0].set_ylim(0, 1)
        axes[0, 0].text(
            0.5, 0.5, "no discard after warm-up", ha="center", transform=axes[0, 0].transAxes
        )
    else:
        axes[0, 0].set_ylim(bottom=0)
    axes[0, 1].plot(ts["t_s"], ts["existence_entries"], label="beliefs")
    axes[0, 1].plot(
        ts["t_s"], ts["stale_beliefs_recent_4096"], label="stale among the 4,096 most recent"
    )
    axes[0, 1].plot(ts["t_s"], ts["healed_beliefs_pending"], label="dropped, not yet rewritten")
    entries = (config.get("existence_cache") or {}).get("entries")
    if isinstance(entries, int):
        axes[0, 1].axhline(entries, color="C0", linestyle="--", linewidth=1, label="capacity")
    axes[0, 1].set_yscale("symlog", linthresh=10)
    axes[0, 1].set_ylim(bottom=0, top=max(axes[0, 1].get_ylim()[1], 10))
    axes[0, 1].set_title("existence cache")
    axes[0, 1].legend(fontsize=8)
    device = config.get("device") or {}
    series = [(c, c.removeprefix("device_")) for c in ts.columns if c.startswith("device_")]
    series.append(("host_pages", "host_pages"))
    for i, (col, key) in enumerate(series):
        pool, _, unit = key.partition("_")
        color = f"C{i}"
        # Occupancy over its capacity line: a full pool's line would hide under a dashed one.
        axes[1, 0].plot(ts["t_s"], ts[col], color=color, label=f"{pool} {unit}", zorder=3)
        bound = device.get(key) if col != "host_pages" else (config.get("host") or {}).get("pages")
        if isinstance(bound, int) and not isinstance(bound, bool):
            axes[1, 0].axhline(
                bound, color=color, linestyle=(0, (4, 4)), linewidth=2.5, alpha=0.45, zorder=1
            )
    axes[1, 0].set_yscale("symlog", linthresh=10)
    axes[1, 0].set_ylim(bottom=0, top=max(axes[1, 0].get_ylim()[1], 10))
    axes[1, 0].legend(fontsize=8, title="dashed: capacity", title_fontsize=8)
    axes[1, 0].set_title("device and host occupancy")
    pools = (config.get("storage") or {}).get("pools") or {}
    for i, col in enumerate(storage_cols):
        pool = col.removeprefix("storage_").removesuffix("_bytes")
        color = f"C{i}"
        axes[1, 1].plot(ts["t_s"], ts[col] / 1e9, color=color, label=pool)
        bound = (pools.get(pool) or {}).get("capacity_gb")
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            axes[1, 1].axhline(bound, color=color, linestyle="--", linewidth=1)
    axes[1, 1].set_title("storage occupancy (GB; dashed: capacity)")
    axes[1, 1].set_ylim(bottom=0)
    axes[1, 1].legend(fontsize=8)
    _flow_panels(directory, grid[0, 2], grid[1, 2], float(ts["t_s"].max() or 1.0))
    for ax in grid.ravel():
        ax.set_xlabel("simulated time (s)")
    fig.suptitle(f"{run.name}: time series")
    return fig


FLOW_BINS = 40
"""Time bins of the restored-share and storage-bandwidth panels."""


def _flow_panels(directory: Path, share_ax: Axes, bandwidth_ax: Axes, horizon_s: float) -> None:
    """The share of prompt tokens restored from storage, per time bin of admission, and the
    storage read and write bandwidth (GB/s), from the run's request, prefetch and write tables
    (a directory without them gets a note instead)."""
    edges = np.linspace(0.0, horizon_s, FLOW_BINS + 1)
    width = edges[1] - edges[0]
    mids = (edges[:-1] + edges[1:]) / 2

    def binned(frame: pd.DataFrame, t: str, value: str) -> np.ndarray:
        rows = frame[frame[t].notna()]
        sums, _ = np.histogram(rows[t].astype(float), bins=edges, weights=rows[value])
        return np.asarray(sums, dtype=float)

    requests = _table(directory, "requests", ("admitted_s", "prompt_tokens", "l3_loaded_tokens"))
    if requests is None:
        share_ax.text(0.5, 0.5, "no requests table", ha="center", transform=share_ax.transAxes)
    else:
        prompt = binned(requests, "admitted_s", "prompt_tokens")
        loaded = binned(requests, "admitted_s", "l3_loaded_tokens")
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(prompt > 0, loaded / prompt, np.nan)
        share_ax.plot(mids, share * 100, marker=".", color="C2")
        share_ax.set_ylim(0, max(5.0, float(np.nanmax(share, initial=0)) * 110))
    share_ax.set_title("% of prompt tokens restored from storage")
    reads = _table(directory, "prefetches", ("resolved_s", "read_bytes"))
    writes = _table(directory, "writes", ("t_s", "written_bytes"))
    if reads is not None:
        bandwidth_ax.plot(
            mids,
            binned(reads, "resolved_s", "read_bytes") / width / 1e9,
            color="C0",
            label="read (prefetches)",
        )
    if writes is not None:
        bandwidth_ax.plot(
            mids, binned(writes, "t_s", "written_bytes") / width / 1e9, color="C1", label="written"
        )
    if bandwidth_ax.lines:
        bandwidth_ax.legend(fontsize=8)
    bandwidth_ax.set_ylim(bottom=0)
    bandwidth_ax.set_title("storage bandwidth (GB/s, mean per bin)")


def _table(directory: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame | None:
    """A run's table with the columns a panel needs, or None (an older directory lacks it)."""
    path = directory / f"{name}.parquet"
    if not path.is_file():
        return None
    frame = read_table(path)
    if any(c not in frame.columns for c in columns):
        return None
    return frame


PER_INSTANCE_LEGEND_MAX = 10
"""Up to this many servers are told apart by colour and a legend; more by a colour scale."""


def instances_of(ts: pd.DataFrame) -> list[int]:
    """The servers a time series has rows for (a directory written before clusters has no
    `instance` column: one server, 0)."""
    if "instance" not in ts.columns:
        return [0]
    return sorted(int(i) for i in ts["instance"].unique())


def cluster_total(ts: pd.DataFrame, column: str) -> pd.DataFrame:
    """`t_s` and `column` summed over the servers at each sample time (one server's as is)."""
    if len(instances_of(ts)) <= 1:
        return ts[["t_s", column]]
    total = ts.groupby("t_s", sort=True)[column].sum()
    return pd.DataFrame({"t_s": total.index, column: total.to_numpy()})


def _is_bound(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def cluster_run_figure(directory: Path, ts: pd.DataFrame, config: dict[str, Any]) -> Figure:
    """A cluster's time series: each per-server series in a panel of its own with one line per
    instance (every server is configured alike: one dashed capacity line per panel), and the
    storage occupancy of the shared backend once."""
    instances = instances_of(ts)
    device = config.get("device") or {}
    panels: list[tuple[str, str, object]] = [
        ("discards", "cumulative discards (after warm-up)", None),
        (
            "existence_entries",
            "existence cache: beliefs",
            (config.get("existence_cache") or {}).get("entries"),
        ),
        ("stale_beliefs_recent_4096", "existence cache: stale among the 4,096 most recent", None),
        ("healed_beliefs_pending", "existence cache: dropped, not yet rewritten", None),
        ("host_pages", "host pages in use", (config.get("host") or {}).get("pages")),
    ]
    for col in ts.columns:
        if col.startswith("device_"):
            key = col.removeprefix("device_")
            pool, _, unit = key.partition("_")
            panels.append((col, f"device {pool} {unit}", device.get(key)))
    shown = len(panels) + 1
    rows = -(-shown // 3)
    fig = Figure(figsize=(15, 3.3 * rows + 0.5), layout="constrained")
    axes = fig.subplots(rows, 3, squeeze=False).ravel()
    many = len(instances) > PER_INSTANCE_LEGEND_MAX
    cmap = colormaps["viridis"]
    span = max(1, instances[-1] - instances[0])

    def color(instance: int) -> Any:
        return cmap((instance - instances[0]) / span) if many else f"C{instance % 10}"

    servers = {instance: ts[ts["instance"] == instance] for instance in instances}
    for ax, (col, title, bound) in zip(axes, panels, strict=False):
        for instance, rows_of in servers.items():
            ax.plot(
                rows_of["t_s"],
                rows_of[col],
                color=color(instance),
                linewidth=0.6 if many else 1.2,
                label=f"instance {instance}",
            )
        if _is_bound(bound):
            ax.axhline(bound, color="black", linestyle="--", linewidth=1)
            title += " (dashed: capacity)"
        if col != "discards":
            ax.set_yscale("symlog", linthresh=10)
            ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 10))
        ax.set_title(title, fontsize=10)
    ax = axes[len(panels)]
    shared = servers[instances[0]]
    pools = (config.get("storage") or {}).get("pools") or {}
    for i, col in enumerate(c for c in ts.columns if c.startswith("storage_")):
        pool = col.removeprefix("storage_").removesuffix("_bytes")
        ax.plot(shared["t_s"], shared[col] / 1e9, color=f"C{i}", label=pool)
        bound = (pools.get(pool) or {}).get("capacity_gb")
        if _is_bound(bound):
            ax.axhline(bound, color=f"C{i}", linestyle="--", linewidth=1)
    ax.set_title("shared storage occupancy (GB; dashed: capacity)", fontsize=10)
    ax.legend(fontsize=8, title="pool", title_fontsize=8)
    for ax in axes[shown:]:
        ax.axis("off")
    for ax in axes[:shown]:
        ax.set_xlabel("simulated time (s)")
    if many:
        scale = ScalarMappable(norm=Normalize(instances[0], instances[-1]), cmap=cmap)
        fig.colorbar(scale, ax=list(axes[:shown]), label="instance", shrink=0.6)
    else:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    policy = ((config.get("cluster") or {}).get("router") or {}).get("policy")
    router = f" behind a {policy} router" if isinstance(policy, str) else ""
    name = config.get("name", directory.name)
    fig.suptitle(f"{name}: time series of {len(instances)} instances{router}")
    return fig


def plot_capacity(directory: Path) -> list[Path]:
    return _save(capacity_figure(directory), directory, "capacity")


def capacity_figure(directory: Path) -> Figure:
    """A capacity search's evaluations: the metric's mean with its 95 % interval at every value
    tried, the target's bound, and the answer (the smallest value whose interval clears it)."""
    search = read_capacity(directory)
    meta = search.answer
    evals = search.evaluations.sort_values("value")
    metric, op, bound = parse_target(search.target)
    param, answer = search.param, meta.get("answer")
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(evals["value"], evals["mean"], color="0.7", linewidth=0.8, zorder=0)
    for meets, color, verdict in ((True, "C2", "meets"), (False, "C3", "fails")):
        part = evals[evals["meets"] == meets]
        if part.empty:
            continue
        below = (part["mean"] - part["ci_low"]).clip(lower=0)
        above = (part["ci_high"] - part["mean"]).clip(lower=0)
        ax.errorbar(
            part["value"],
            part["mean"],
            yerr=[below, above],
            fmt="o",
            color=color,
            capsize=3,
            label=f"{verdict} the target ({len(part)})",
        )
    ax.axhline(
        bound, color="black", linestyle="--", linewidth=1, label=f"target {metric} {op} {bound:g}"
    )
    if answer is not None:
        ax.axvline(answer, color="C2", linestyle=":", label=f"answer {_rounded(param, answer)}")
        at = evals[evals["value"] == answer]
        ax.plot(at["value"], at["mean"], marker="*", markersize=16, color="C2", linestyle="")
    _scale_x(ax, evals["value"].astype(float).tolist())
    unit = param_unit(param)
    ax.set_xlabel(f"{param} ({unit})" if unit else param)
    ax.set_ylabel(f"{metric} (mean, 95 % CI over {meta.get('seeds')} seeds)")
    found = "no value meets it" if answer is None else f"answer {_rounded(param, answer)}"
    ax.set_title(
        f"{meta.get('scenario', directory.name)}\nsmallest {param.split('.')[-1]} "
        f"with {search.target}: {found}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return fig


def plot_directory(directory: Path) -> list[Path]:
    """The plots of whatever kind of result `directory` holds."""
    kind = detect(directory)
    if kind is Kind.CAPACITY:
        return plot_capacity(directory)
    if kind is Kind.SWEEP:
        return plot_sweep(directory)
    if kind is Kind.COMPARE:
        return [plot_comparison(directory)]
    return [plot_run(directory)]


def _save(fig: Figure, directory: Path, stem: str) -> list[Path]:
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


def _rounded(key: str, value: float) -> str:
    """An answer as a figure's title shows it: three significant digits and the key's unit
    (the exact value is in capacity.json and the report)."""
    return param_text(key, float(f"{value:.3g}"))


def _short(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _numeric(values: list[object]) -> bool:
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values if v is not None
    )


def _scale_x(ax: Axes, xs: list[float]) -> None:
    """Log x when the swept values span two decades or more (symlog when zero is among them)."""
    positive = [x for x in xs if x > 0]
    if len(positive) >= 2 and max(positive) / min(positive) >= 100:
        if len(positive) < len(xs):
            ax.set_xscale("symlog", linthresh=min(positive))
        else:
            ax.set_xscale("log")


def plot_sweep(directory: Path, target: str | None = None) -> list[Path]:
    paths: list[Path] = []
    for stem, fig in sweep_figures(directory, target).items():
        paths += _save(fig, directory, stem)
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
    # A metric with no value at any point (no loop was retried: no heal rate) gets no empty panel.
    metrics = [
        m
        for m in ("heal_rate", "discard_rate")
        if points[points["metric"] == m]["mean"].notna().any()
    ] or ["heal_rate", "discard_rate"]
    fig = Figure(figsize=(6 * len(metrics), 4.5), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        data = points[points["metric"] == metric]
        keyed = data.groupby(groups, dropna=False, sort=False) if groups else [((), data)]
        for _, series in keyed:
            if series.empty:
                continue
            series = series.sort_values(x)
            xs = series[x].astype(float)
            ax.plot(xs, series["mean"], marker="o", label=_label(series.iloc[0], groups))
            ax.fill_between(xs, series["ci_low"], series["ci_high"], alpha=0.2)
        _scale_x(ax, points[x].astype(float).unique().tolist())
        ax.set_xlabel(x)
        ax.set_ylabel(f"{metric} (mean, 95 % CI over seeds)")
        ax.set_ylim(-0.02, 1.02)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, f"no {metric} at any point", ha="center", transform=ax.transAxes)
    fig.suptitle(f"heal rate and discard rate against {x}")
    return fig


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
