"""The report page of a sweep directory: the grid, its findings, curves and points."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.outputs.findings import setting, short
from sim.outputs.findings_sweep import sweep_findings, sweep_metrics
from sim.outputs.html import (
    cell_with_interval,
    existing_png,
    findings_section,
    html_table,
    page,
    png_figure,
    render_png,
    section,
    unit_header,
)
from sim.outputs.plot_sweep import sweep_figures
from sim.outputs.report_parts import (
    deployment_section,
    provenance_section,
    scenario_section,
    study_overloaded,
)
from sim.results.reading import (
    read_config,
    read_sweep,
)


def sweep_page(directory: Path) -> str:
    sweep = read_sweep(directory)
    meta, points, grid = sweep.meta, sweep.points, sweep.grid
    name = str(meta.get("scenario", directory.name))
    keys = list(grid)
    grid_rows = [[k, ", ".join(setting(v) for v in values)] for k, values in grid.items()]
    known = set(points["metric"]) if "metric" in points.columns else set()
    metrics = [m for m in sweep_metrics(sweep.target) if m in known]
    rows = []
    for _, group in points.groupby("point", sort=True) if not points.empty else []:
        by_metric = {r["metric"]: r for r in group.to_dict("records")}
        head = group.iloc[0]
        rows.append(
            [
                int(head["point"]),
                *(setting(head[k]) for k in keys),
                *(cell_with_interval(m, by_metric[m]) if m in by_metric else "–" for m in metrics),
            ]
        )
    header = ["point", *map(short, keys), *map(unit_header, metrics)]
    figures = [
        png_figure(existing_png(directory, stem) or render_png(figure), _sweep_caption(stem))
        for stem, figure in sweep_figures(directory).items()
    ]
    failed = len(meta.get("failed") or [])
    runs = f"{meta.get('tasks')} ({meta.get('computed')} computed, {meta.get('reused')} reused"
    provenance = [
        ("executor", f"{meta.get('executor')} ({meta.get('workers')} workers)"),
        ("runs", f"{runs}, {failed} failed)"),
        ("target", meta.get("target") or "none"),
    ]
    swept = {k: "swept: " + ", ".join(setting(v) for v in values) for k, values in grid.items()}
    return page(
        name,
        "sweep",
        directory,
        [
            deployment_section(read_config(directory)[1], swept),
            scenario_section(
                name,
                yaml.safe_dump(meta, sort_keys=False),
                "Sweep provenance (sweep.json)",
                ["<h3>Grid</h3>", html_table("grid", ["key", "values"], grid_rows)],
            ),
            findings_section(
                [
                    *study_overloaded(directory, read_config(directory)[1], "sweep"),
                    *sweep_findings(points, grid, meta),
                ]
            ),
            section("plots", "Plots", *figures) if figures else None,
            section(
                "summary",
                "Summary",
                "<p>Mean over seeds per grid point, ± the half-width of its 95 % Student-t "
                "interval, or the interval's ends where it is cut at the quantity's range (a "
                "count or size is never negative, a rate never above 1); hover for the ends; "
                "points.csv has every metric.</p>",
                html_table("summary", header, rows, range(1 + len(keys), len(header))),
            ),
            provenance_section(meta, provenance),
        ],
    )


def _sweep_caption(stem: str) -> str:
    if stem == "sweep_curves":
        return "Heal rate and discard rate against the first numeric swept key (95 % bands)"
    if stem == "loop_ccdf":
        return "Loop-length CCDF over all seeds and points"
    return f"{stem.removeprefix('heatmap_')} over the two numeric swept keys"
