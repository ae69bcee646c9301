"""A plan's picture: cost against TTFT p99 and against the restored share, every deployment
with its 95 % interval, the Pareto frontier and the answer."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from sim.core.stats import parse_target
from sim.outputs.figures import save_figure

PLOTTED = (("ttft_p99_s", "TTFT p99 (s)"), ("l3_loaded_rate", "restored from storage (share)"))


def frontier_figure(
    evaluations: pd.DataFrame, frontier: pd.DataFrame, targets: Sequence[str], title: str
) -> Figure:
    """One panel per frontier metric: each deployment's mean and 95 % interval against its
    $ per hour (green: meets every target), the frontier as a line, the answer as a star."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    axes = fig.subplots(1, len(PLOTTED))
    bounds = [parse_target(t) for t in targets]
    for ax, (metric, label) in zip(axes, PLOTTED, strict=True):
        mean, low, high = (evaluations[f"{metric}_{k}"] for k in ("mean", "ci_low", "ci_high"))
        for meets, color, verdict in ((True, "C2", "meets every target"), (False, "C3", "fails")):
            part = evaluations["meets_all"].astype(bool) == meets
            if not part.any():
                continue
            ax.errorbar(
                evaluations["cost_usd_per_hour"][part],
                mean[part],
                yerr=[(mean - low)[part].clip(lower=0), (high - mean)[part].clip(lower=0)],
                fmt="o",
                color=color,
                capsize=3,
                label=f"{verdict} ({int(part.sum())})",
            )
        line = frontier[frontier["metric"] == metric]
        ax.step(
            line["cost_usd_per_hour"],
            line["mean"],
            where="post",
            color="0.4",
            linewidth=1,
            label="Pareto frontier",
        )
        best = evaluations[evaluations["answer"].astype(bool)]
        if not best.empty:
            ax.plot(
                best["cost_usd_per_hour"],
                best[f"{metric}_mean"],
                marker="*",
                markersize=16,
                color="C2",
                linestyle="",
                label="cheapest meeting every target",
            )
        for name, op, bound in bounds:
            if name == metric:
                ax.axhline(
                    bound,
                    color="black",
                    linestyle="--",
                    linewidth=1,
                    label=f"{name} {op} {bound:g}",
                )
        ax.ticklabel_format(axis="x", useOffset=False)
        ax.set_xlabel("deployment cost ($ per hour)")
        ax.set_ylabel(f"{label}, mean and 95 % CI")
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_plan(directory: Path, tables: dict[str, pd.DataFrame], doc: dict[str, Any]) -> list[Path]:
    """frontier.png and frontier.svg."""
    return save_figure(plot_figure(tables, doc), directory, "frontier")


def plot_figure(tables: dict[str, pd.DataFrame], doc: dict[str, Any]) -> Figure:
    return frontier_figure(
        tables["evaluations.csv"], tables["frontier.csv"], doc["targets"], plan_title(doc)
    )


def plan_title(doc: dict[str, Any]) -> str:
    """The scenario and the answer, wrapped (the points worth adding are on the page)."""
    statement = str(doc["statement"]).split("; worth adding")[0]
    return "\n".join(textwrap.wrap(f"{doc['scenario']}: {statement}", 150, break_on_hyphens=False))
