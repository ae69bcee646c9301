"""A plan's picture and page: cost against TTFT p99 and against the restored share, every
deployment with its 95 % interval, the Pareto frontier and the answer; and one HTML page with
the answer, the method, the evaluations and the frontier."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from sim.core.stats import parse_target
from sim.outputs.figures import save_figure
from sim.outputs.files import replace_file
from sim.outputs.html import details, html_table, page, png_figure, render_png, section

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


def write_plan_page(directory: Path, tables: dict[str, pd.DataFrame], doc: dict[str, Any]) -> Path:
    """report.html: the answer, the method and prices, every evaluation, the frontier."""
    evaluations, frontier = tables["evaluations.csv"], tables["frontier.csv"]
    axes = list(doc["axes"])
    answer = doc.get("answer")
    rows = [
        ["targets", " and ".join(doc["targets"])],
        ["seeds per deployment", doc["seeds"]],
        ["answer", doc["statement"]],
        ["method", doc["method"]],
        ["prices", json.dumps(doc["costs"])],
    ]
    if answer is not None:
        rows.insert(
            3,
            [
                "cost",
                f"${answer['cost_usd_per_hour']:,.2f} per hour, "
                f"${answer['cost_usd_per_month']:,.0f} per month",
            ],
        )
    metrics = [c.removesuffix("_mean") for c in evaluations.columns if c.endswith("_mean")]
    header = [*axes, "GPUs", "$ per hour", *(f"{m} mean [95 % CI]" for m in metrics), "meets all"]
    body = []
    for r in evaluations.sort_values("cost_usd_per_hour").to_dict("records"):
        body.append(
            [
                *(str(r[a]) for a in axes),
                r["gpus"],
                f"{r['cost_usd_per_hour']:,.2f}",
                *(_interval(r, m) for m in metrics),
                ("yes (answer)" if r["answer"] else "yes") if r["meets_all"] else "no",
            ]
        )
    front = [
        [
            r["metric"],
            *(str(r[a]) for a in axes),
            f"{r['cost_usd_per_hour']:,.2f}",
            _number(r["mean"]),
            "yes" if r["meets_all"] else "no",
        ]
        for r in frontier.to_dict("records")
    ]
    png = render_png(plot_figure(tables, doc))
    html = page(
        doc["scenario"],
        "plan",
        directory,
        [
            section("answer", "Answer", html_table("plan", ["item", "value"], rows)),
            section(
                "frontier",
                "Pareto frontier",
                png_figure(png, _title(doc)),
                html_table("frontier", ["metric", *axes, "$ per hour", "mean", "meets all"], front),
            ),
            section(
                "evaluations",
                "Evaluations",
                html_table("evaluations", header, body, range(len(axes), len(header))),
                details("plan.json", json.dumps(doc, indent=2)),
            ),
        ],
    )
    return replace_file(
        directory / "report.html", lambda tmp: tmp.write_text(html, encoding="utf-8")
    )


def plot_figure(tables: dict[str, pd.DataFrame], doc: dict[str, Any]) -> Figure:
    return frontier_figure(
        tables["evaluations.csv"], tables["frontier.csv"], doc["targets"], _title(doc)
    )


def _title(doc: dict[str, Any]) -> str:
    return "\n".join(
        textwrap.wrap(f"{doc['scenario']}: {doc['statement']}", 150, break_on_hyphens=False)
    )


def _interval(row: Mapping[Any, Any], metric: str) -> str:
    mean, low, high = (row[f"{metric}_{k}"] for k in ("mean", "ci_low", "ci_high"))
    if isinstance(low, float) and math.isnan(low):
        return _number(mean)
    return f"{_number(mean)} [{_number(low)}, {_number(high)}]"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)
