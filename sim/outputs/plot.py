"""Plots from result directories (headless: the Agg backend, PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import yaml

COMPARE_PANELS = (
    ("discard_rate", "discard rate"),
    ("heal_rate", "heal rate"),
    ("loop_length_mean", "mean loop length (discards)"),
    ("rewrite_pages", "rewritten pages"),
    ("wasted_read_bytes", "wasted storage reads (GB)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
)


def plot_comparison(directory: Path) -> Path:
    """Bars of the key metrics per heal rule, and cumulative discards over time."""
    table = pd.read_csv(directory / "comparison.csv")
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), layout="constrained")
    flat = axes.ravel()
    colors = [f"C{i}" for i in range(len(table))]
    for ax, (key, label) in zip(flat, COMPARE_PANELS, strict=False):
        values = table[key].astype(float).fillna(0.0)
        if key == "wasted_read_bytes":
            values = values / 1e9
        ax.bar(table["heal"], values, color=colors)
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=20)
    ax = flat[len(COMPARE_PANELS)]
    for color, heal in zip(colors, table["heal"], strict=True):
        ts_path = directory / str(heal) / "timeseries.parquet"
        if ts_path.exists():
            ts = pd.read_parquet(ts_path)
            ax.plot(ts["t_s"], ts["discards"], label=str(heal), color=color)
    ax.set_title("cumulative discards (after warm-up)")
    ax.set_xlabel("simulated time (s)")
    ax.legend(fontsize=8)
    flat[-1].axis("off")
    config = directory / str(table["heal"].iloc[0]) / "config.resolved.yaml"
    name = yaml.safe_load(config.read_text())["name"] if config.exists() else directory.name
    fig.suptitle(f"{name}: heal rules compared on the same seed")
    out = directory / "comparison.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_run(directory: Path) -> Path:
    """A run's time series: discards, beliefs, device and storage occupancy."""
    ts = pd.read_parquet(directory / "timeseries.parquet")
    storage_cols = [c for c in ts.columns if c.startswith("storage_")]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), layout="constrained")
    axes[0, 0].plot(ts["t_s"], ts["discards"])
    axes[0, 0].set_title("cumulative discards (after warm-up)")
    axes[0, 1].plot(ts["t_s"], ts["existence_entries"], label="beliefs")
    axes[0, 1].plot(ts["t_s"], ts["healed_beliefs_pending"], label="dropped, not yet rewritten")
    axes[0, 1].set_title("existence cache")
    axes[0, 1].legend(fontsize=8)
    axes[1, 0].plot(ts["t_s"], ts["device_kv_pages"], label="device KV pages")
    axes[1, 0].plot(ts["t_s"], ts["device_swa_pages"], label="device SWA pages")
    axes[1, 0].plot(ts["t_s"], ts["host_pages"], label="host pages")
    axes[1, 0].legend(fontsize=8)
    axes[1, 0].set_title("device and host occupancy")
    for col in storage_cols:
        axes[1, 1].plot(ts["t_s"], ts[col] / 1e9, label=col.removeprefix("storage_"))
    axes[1, 1].set_title("storage occupancy (GB)")
    axes[1, 1].legend(fontsize=8)
    for ax in axes.ravel():
        ax.set_xlabel("simulated time (s)")
    out = directory / "timeseries.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_directory(directory: Path) -> list[Path]:
    if (directory / "comparison.csv").exists():
        return [plot_comparison(directory)]
    if (directory / "timeseries.parquet").exists():
        return [plot_run(directory)]
    raise FileNotFoundError(f"{directory}: neither comparison.csv nor timeseries.parquet found")
