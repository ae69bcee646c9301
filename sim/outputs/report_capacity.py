"""The report page of a capacity directory: the answer, the evaluations, and what the
answer's runs stored, moved and waited."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.core.stats import confidence, parse_target
from sim.core.units import cell, metric_unit, number
from sim.outputs.answers import SAME_NOTE, answer_text, quantity_text, same_every_seed
from sim.outputs.findings import interval
from sim.outputs.findings_capacity import capacity_findings
from sim.outputs.html import (
    esc,
    existing_png,
    findings_section,
    html_table,
    page,
    plain_paragraph,
    png_figure,
    render_png,
    section,
    warning_box,
)
from sim.outputs.plain import capacity_paragraph
from sim.outputs.plot_capacity import capacity_figure
from sim.outputs.report_parts import (
    deployment_section,
    scenario_section,
    study_overloaded,
)
from sim.results.layout import TASKS
from sim.results.reading import (
    read_capacity,
    read_config,
    task_records,
)


def capacity_page(directory: Path) -> str:
    search = read_capacity(directory)
    answer, evaluations = search.answer, search.evaluations
    param, target = search.param, search.target
    metric = parse_target(target)[0]
    name = str(answer.get("scenario", directory.name))
    found = answer.get("answer")
    failing = answer.get("largest_failing")
    config = read_config(directory)[1]
    answered = answer_text(param, found, failing, config)
    search_rows = [
        ["parameter", param],
        ["target", target],
        ["seeds per value", number(answer.get("seeds"))],
        *_relative_rows(answer, param),
        ["answer", answered],
        ["largest failing value", quantity_text(param, failing)],
        ["statement", answer.get("statement", "")],
        ["answer's runs overloaded", _overloaded_text(answer)],
    ]
    suffix = "" if metric_unit(metric) == "count" else f" ({metric_unit(metric)})"
    eval_rows = [
        [
            quantity_text(param, r["value"]),
            number(r["n"]),
            cell(metric, r["mean"]),
            cell(metric, r["ci_low"]),
            cell(metric, r["ci_high"]),
            ("meets" if bool(r["meets"]) else "fails")
            + (f" ({SAME_NOTE})" if same_every_seed(r) else ""),
            number(r["errors"]),
        ]
        for r in evaluations.sort_values("value").to_dict("records")
    ]
    eval_header = [param, "seeds", f"{metric} mean{suffix}", "CI low", "CI high", "verdict"]
    summary = [
        f"<h3>Evaluations of {esc(param)}</h3>",
        html_table("evaluations", [*eval_header, "failed runs"], eval_rows, range(0, 7)),
    ]
    at_answer = _at_answer(directory, param, found, metric)
    if at_answer:
        summary += [
            f"<h3>At the answer, {esc(param)} = {esc(quantity_text(param, found))}</h3>",
            "<p>What the sized pool stored and moved, what storage restored and what a request "
            "waited, as the mean over the answer's seeds with its 95 % interval (from the runs "
            "in tasks/); the loop keys follow where any run had a loop.</p>",
            html_table("at-answer", ["key", "mean (95 % CI)", "unit"], at_answer, range(1, 2)),
        ]
    png = existing_png(directory, "capacity") or render_png(capacity_figure(directory))
    caption = f"{metric} at each evaluated {param}: mean and 95 % interval against the target"
    return page(
        name,
        "capacity",
        directory,
        [
            section("answer", "Answer", *_answer(answer, evaluations, config)),
            deployment_section(config, {param: f"sized by the search: {answered}"}),
            scenario_section(
                name,
                yaml.safe_dump(answer, sort_keys=False),
                "Capacity answer (capacity.json)",
                ["<h3>Search</h3>", html_table("search", ["item", "value"], search_rows)],
            ),
            findings_section(
                [
                    *study_overloaded(directory, config, "capacity search"),
                    *capacity_findings(answer, evaluations, config),
                ]
            ),
            section("plots", "Plots", png_figure(png, caption)),
            section("summary", "Summary", *summary),
        ],
    )


def _answer(
    answer: Mapping[str, Any], evaluations: pd.DataFrame, config: Mapping[str, Any]
) -> list[str]:
    """The answer in plain words (sim.outputs.plain), and a warning where its runs were
    overloaded."""
    rows = evaluations.to_dict("records")
    parts = [plain_paragraph(capacity_paragraph(answer, rows, config))]
    overloaded = answer.get("overloaded")
    if isinstance(overloaded, Mapping):
        parts.append(warning_box(str(overloaded.get("statement", ""))))
    return parts


def _overloaded_text(answer: Mapping[str, Any]) -> str:
    overloaded = answer.get("overloaded")
    if isinstance(overloaded, Mapping):
        return f"yes: {overloaded.get('runs')} of {overloaded.get('of')} runs"
    return "no" if "overloaded" in answer else "not recorded (written before the check)"


def _relative_rows(answer: Mapping[str, Any], param: str) -> list[list[Any]]:
    """A relative target as asked, and the reference point whose mean made it absolute."""
    reference = answer.get("reference")
    if not isinstance(reference, dict) or not answer.get("requested_target"):
        return []
    value = reference.get("value")
    at = "unbounded (null)" if value is None else quantity_text(param, value)
    return [
        ["requested target", answer["requested_target"]],
        [
            "reference point",
            f"{param} = {at}: mean {number(reference.get('mean'))} over "
            f"{number(reference.get('n'))} seeds",
        ],
    ]


def _at_answer(directory: Path, param: str, value: Any, metric: str) -> list[list[Any]]:
    """Key metrics over the seeds of the answer's runs (kept in tasks/), mean and interval."""
    if value is None or not (directory / TASKS).is_dir():
        return []
    summaries = [
        record["summary"]
        for record in task_records(directory)
        if record["values"].get(param) == value
    ]
    if not summaries:
        return []
    rows = []
    keys = at_answer_keys(summaries)
    for key in keys + ([metric] if metric not in keys else []):
        values = [s[key] for s in summaries if s.get(key) is not None]
        if values:
            rows.append([key, interval(key, confidence(values, key=key)), metric_unit(key)])
    return rows


SIZED_KEYS = (
    "l3_loaded_rate",
    "read_transfer_bytes",
    "written_bytes",
    "ttft_p50_s",
    "ttft_p99_s",
)
"""What a capacity answer is about, after each pool's stored bytes: restored share, traffic,
and the time to first token."""
LOOP_KEYS = ("prefetch_discarded", "loops", "heal_rate", "wasted_read_bytes", "rewrite_pages")


def at_answer_keys(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each pool's stored bytes, then SIZED_KEYS, then the loop keys only where a run has a
    nonzero value (a table of zeros says nothing about what was sized)."""
    keys = sorted(
        {
            k
            for s in summaries
            for k in s
            if k.startswith("storage_") and k.endswith("_stored_bytes")
        }
    )
    keys += [k for k in SIZED_KEYS if any(k in s for s in summaries)]
    keys += [k for k in LOOP_KEYS if any(s.get(k) for s in summaries)]
    return keys
