"""The report page of a comparison directory: the variants side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.core.units import cell, metric_unit
from sim.outputs.findings_compare import compare_findings
from sim.outputs.findings_run import run_findings
from sim.outputs.html import (
    esc,
    existing_png,
    findings_section,
    html_table,
    page,
    png_figure,
    render_png,
    section,
)
from sim.outputs.plot_compare import comparison_figure
from sim.outputs.plot_run import run_figure
from sim.outputs.report_parts import (
    deployment_section,
    overloaded,
    provenance_section,
    scenario_section,
)
from sim.results.reading import (
    read_compare,
)


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {prefix: doc}
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def compare_page(directory: Path) -> str:
    compared = read_compare(directory)
    table, column = compared.table, compared.column
    variants = compared.labels
    runs = compared.runs()
    first = next(iter(runs.values()), None)
    name = first.name if first is not None else directory.name
    flat = [_flatten(run.config) for run in runs.values()]
    differing = sorted({k for f in flat for k in f if len({repr(g.get(k)) for g in flat}) > 1})
    extra = []
    if differing:
        extra.append(
            f"<p>The variants ({esc(', '.join(variants))}) differ only in "
            f"<code>{esc(', '.join(differing))}</code>; below is the first one's "
            "configuration.</p>"
        )
    png = existing_png(directory, "comparison") or render_png(comparison_figure(directory))
    figures = [png_figure(png, "Key metrics per variant, and cumulative discards over time")]
    for variant, run in runs.items():
        if run.has_timeseries:
            png = existing_png(run.path, "timeseries") or render_png(run_figure(run.path))
            figures.append(png_figure(png, f"{column}={variant}: time series"))
    per_variant = {
        f"{column}={v}": [*overloaded(run.summary, run.config), *run_findings(run.summary)]
        for v, run in runs.items()
    }
    records = table.to_dict("records")
    keys = [str(c) for c in table.columns if c != column]
    rows = [[key, *(cell(key, r[key]) for r in records), metric_unit(key)] for key in keys]
    return page(
        name,
        "compare",
        directory,
        [
            deployment_section(
                first.config if first is not None else {},
                {key: f"varies: {', '.join(variants)}" for key in differing},
            ),
            scenario_section(name, first.config_text if first is not None else None, extra=extra),
            findings_section(compare_findings(table, column), per_variant),
            section("plots", "Plots", *figures),
            section(
                "summary",
                "Summary",
                f"<p>comparison.csv: every summary key, one column per {esc(column)}.</p>",
                html_table(
                    "summary", ["key", *variants, "unit"], rows, range(1, len(variants) + 1)
                ),
            ),
            provenance_section(first.meta if first is not None else {}),
        ],
    )
