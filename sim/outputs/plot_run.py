"""The figures of a run: its time series (one server, or a cluster's servers apart) and the
restored share and storage bandwidth over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from sim.outputs.figures import save_figure
from sim.outputs.files import read_table
from sim.results.reading import (
    read_run,
)


def plot_run(directory: Path) -> Path:
    return save_figure(run_figure(directory), directory, "timeseries")[0]


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
