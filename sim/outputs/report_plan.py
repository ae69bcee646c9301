"""A plan's HTML page: the answer in plain words, the deployment card, the prices as a table,
the frontier and every evaluation (the plan command writes it into its own directory)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from sim.outputs.answers import SAME_NOTE, same_every_seed
from sim.outputs.files import replace_file
from sim.outputs.html import (
    details,
    esc,
    html_table,
    page,
    plain_paragraph,
    png_figure,
    render_png,
    section,
    warning_box,
)
from sim.outputs.plain import plan_paragraph
from sim.outputs.plot_plan import plan_title, plot_figure
from sim.outputs.report_parts import deployment_section


def write_plan_page(
    directory: Path,
    tables: dict[str, pd.DataFrame],
    doc: dict[str, Any],
    config: Mapping[str, Any] | None = None,
) -> Path:
    """report.html: the answer (a plain paragraph first, then a warning where the answer's runs
    were overloaded, and the grid points worth adding), the deployment (`config`: the resolved
    scenario), the method and prices, every evaluation, the frontier."""
    evaluations, frontier = tables["evaluations.csv"], tables["frontier.csv"]
    axes = list(doc["axes"])
    answer = doc.get("answer")
    rows = [
        ["targets", " and ".join(doc["targets"])],
        ["seeds per deployment", doc["seeds"]],
        ["answer", doc["statement"]],
        ["method", doc["method"]],
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
    searched = {a: "searched: " + ", ".join(map(str, v)) for a, v in doc["axes"].items()}
    html = page(
        doc["scenario"],
        "plan",
        directory,
        [
            section("answer", "Answer", *_answer(doc, config or {}), _table("plan", rows)),
            deployment_section(config or {}, searched),
            section("prices", "Prices", *_prices(doc)),
            section(
                "frontier",
                "Pareto frontier",
                png_figure(png, plan_title(doc)),
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


def _answer(doc: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The plain paragraph, the overload warning, and the grid points worth adding."""
    parts = [plain_paragraph(plan_paragraph(doc, config))]
    overloaded = doc.get("overloaded")
    if isinstance(overloaded, Mapping):
        parts.append(warning_box(str(overloaded["statement"])))
    neighbours = doc.get("neighbours") or []
    if neighbours:
        parts.append(
            "<h3>Points worth adding</h3><p>The answer is the cheapest of the grid's points; a "
            "cheaper deployment may meet every target at these values, never tried:</p>"
        )
        parts.append(html_table("neighbours", ["point to add"], [[n] for n in neighbours]))
    return parts


def _table(table_id: str, rows: list[list[Any]]) -> str:
    return "<h3>Plan</h3>" + html_table(table_id, ["item", "value"], rows)


def _prices(doc: Mapping[str, Any]) -> list[str]:
    """costs: as a table, one price a row, and where the figures come from."""
    costs = doc.get("costs") or {}
    rows = [
        [f"GPU {gpu}", f"${price:,.4g} per GPU-hour"]
        for gpu, price in (costs.get("gpu_hour_usd") or {}).items()
    ]
    hours = doc.get("hours_per_month")
    rows += [
        [f"storage pool {pool}", f"${price:,.4g} per GB-month (${price / hours:,.4g} per GB-hour)"]
        for pool, price in (costs.get("storage_gb_month_usd") or {}).items()
        if isinstance(hours, int | float) and hours > 0
    ]
    parts = [
        "<p>The scenario's costs: section; a deployment costs its servers' GPUs (servers × "
        f"tensor-parallel size) and its storage pools' capacity, at {hours:g} hours a month.</p>",
        html_table("prices", ["item", "price"], rows),
    ]
    if costs.get("note"):
        parts.append(f"<p>Note: {esc(costs['note'])}</p>")
    return parts


def _interval(row: Mapping[Any, Any], metric: str) -> str:
    mean, low, high = (row[f"{metric}_{k}"] for k in ("mean", "ci_low", "ci_high"))
    if isinstance(low, float) and math.isnan(low):
        return _number(mean)
    if same_every_seed({"n": row.get("n"), "ci_low": low, "ci_high": high}):
        return f"{_number(mean)} ({SAME_NOTE})"
    return f"{_number(mean)} [{_number(low)}, {_number(high)}]"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else str(value)
