"""One self-contained HTML page for a run, compare, sweep or capacity directory.

The page is meant to be attached to a ticket or mailed and opened anywhere, offline, years later:
the CSS is inline, plots are base64 PNG data URIs, and a Content-Security-Policy forbids fetching
anything else, so what a reader sees cannot depend on the network. Plots already drawn in the
directory are embedded as they are; missing ones are drawn in memory by the same functions as
`hicache-sim plot`, so making a report writes nothing but the page. Every text from the
directory is HTML-escaped. A tiny inline script marks each image with its decoded width once the
page has loaded, which lets a headless browser prove that every image decodes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sim.core.stats import confidence, parse_target
from sim.core.units import cell, metric_unit, number
from sim.outputs.answers import answer_text, quantity_text
from sim.outputs.card import deployment_card
from sim.outputs.files import refuse_output, replace_file
from sim.outputs.findings import (
    capacity_findings,
    compare_findings,
    interval,
    run_findings,
    setting,
    short,
    sweep_findings,
    sweep_metrics,
)
from sim.outputs.html import (
    Section,
    cell_with_interval,
    details,
    esc,
    existing_png,
    findings_section,
    html_table,
    page,
    png_figure,
    render_png,
    section,
    unit_header,
)
from sim.outputs.overload import config_overload, overload_warning, study_overload
from sim.outputs.plot import capacity_figure, comparison_figure, run_figure, sweep_figures
from sim.outputs.sizing import sizing_warnings
from sim.results.layout import TASKS, detect
from sim.results.reading import (
    RunDir,
    read_capacity,
    read_compare,
    read_config,
    read_run,
    read_sweep,
    task_records,
)


def write_report(directory: Path, out: Path | None = None) -> Path:
    """Write the page (default `directory/report.html`) through a temporary file renamed into
    place, so a reader never sees half a page. A symbolic link at the output path is refused
    rather than written through; the rename replaces a path, never follows one."""
    target = out if out is not None else directory / "report.html"
    _refuse_target(target)
    page = build_report(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    _refuse_target(target)
    return replace_file(target, lambda tmp: tmp.write_text(page, encoding="utf-8"))


def _refuse_target(target: Path) -> None:
    refuse_output(target, link_ok=False)


def build_report(directory: Path) -> str:
    """The page's HTML for whatever kind of result `directory` holds."""
    kind = detect(directory)
    return BUILDERS[kind](directory)


def _overloaded(summary: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """A finding first when the run's server could not keep up (sim.outputs.overload)."""
    line = overload_warning(config_overload(summary, config))
    return [f"Warning: {line}"] if line else []


def _study_overloaded(directory: Path, config: Mapping[str, Any], what: str) -> list[str]:
    line = study_overload(directory / TASKS, config, what)
    return [f"Warning: {line}"] if line else []


def header_comment(text: str | None) -> str:
    """The comment lines a YAML file opens with (a scenario's statement of what it models)."""
    lines = []
    for line in (text or "").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines).strip()


def _scenario(
    name: str,
    config_text: str | None,
    config_label: str = "Resolved configuration (config.resolved.yaml)",
    extra: Sequence[str] = (),
) -> Section:
    parts = [f"<p>Scenario <strong>{esc(name)}</strong>.</p>"]
    comment = header_comment(config_text)
    if comment:
        parts.append(f'<div class="comment">{esc(comment)}</div>')
    parts += extra
    if config_text:
        parts.append(details(config_label, config_text))
    return section("scenario", "Scenario", *parts)


def _deployment(
    config: Mapping[str, Any], varied: Mapping[str, str] | None = None
) -> Section | None:
    """The deployment card (sim.outputs.card) of a resolved configuration, first on the page;
    none for a directory written before sweeps and searches kept their configuration."""
    if not config:
        return None
    rows = deployment_card(config, varied)
    rows += [("warning", warning) for warning in sizing_warnings(config)]
    return section(
        "deployment",
        "Deployment",
        "<p>What was simulated (config.resolved.yaml: presets, profiles and derived sizes "
        "resolved).</p>",
        html_table("deployment", ["item", "value"], rows),
    )


def _provenance(meta: Mapping[str, Any], extra: Sequence[tuple[str, Any]] = ()) -> Section | None:
    """Command, time, seed, versions and machine of what wrote the directory."""
    rows: list[tuple[str, Any]] = []
    command = meta.get("command")
    if isinstance(command, list):
        rows.append(("command", shlex.join(str(c) for c in command)))
    for key in ("written_utc", "seed", "wall_s", "build"):
        if key in meta:
            rows.append((key, meta[key]))
    rows += extra
    versions = meta.get("versions")
    if isinstance(versions, dict):
        rows.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items())))
    machine = meta.get("machine")
    if isinstance(machine, dict):
        rows.append(("machine", " ".join(str(v) for v in machine.values())))
    if not rows:
        return None
    body = [(k, number(v) if isinstance(v, int | float) else str(v)) for k, v in rows]
    return section("provenance", "Provenance", html_table("provenance", ["item", "value"], body))


# --- the four kinds -------------------------------------------------------------------------------


def _run_page(directory: Path) -> str:
    run = read_run(directory)
    summary, name = run.summary, run.name
    instances = _instances(run)
    plots = None
    if run.has_timeseries:
        png = existing_png(directory, "timeseries") or render_png(run_figure(directory))
        caption = "Time series: cumulative discards, existence cache, device and storage occupancy"
        if instances is not None:
            caption = (
                "Time series per instance: cumulative discards, existence cache, host and device "
                "occupancy; the shared storage occupancy"
            )
        plots = section("plots", "Plots", png_figure(png, caption))
    rows = [[key, cell(key, value), metric_unit(key)] for key, value in summary.items()]
    return page(
        name,
        "run",
        directory,
        [
            _deployment(run.config),
            _scenario(name, run.config_text),
            findings_section([*_overloaded(summary, run.config), *run_findings(summary)]),
            plots,
            instances,
            section(
                "summary",
                "Summary",
                "<p>Every key of summary.json (warm-up excluded; docs/metrics.md).</p>",
                html_table("summary", ["key", "value", "unit"], rows, range(1, 2)),
            ),
            _provenance(run.meta),
        ],
    )


CLUSTER_KEYS = (
    "instances",
    "load_imbalance",
    "cross_instance_l3_hit_pages",
    "cross_instance_rewrite_objects",
    "loops_stale_by_other_instance",
    "read_transfer_bytes",
    "written_bytes",
)
"""The summary keys a cluster's run page shows first: its shape, what its servers did to each
other through the shared backend, and the backend's traffic."""

INSTANCE_COLUMNS = (
    "requests",
    "l3_loaded_rate",
    "prefetch_issued",
    "prefetch_discarded",
    "discard_rate",
    "loops",
    "heal_rate",
    "cross_instance_l3_hit_pages",
    "cross_instance_rewrite_objects",
    "loops_stale_by_other_instance",
    "read_transfer_bytes",
    "written_bytes",
    "ttft_p99_s",
)
"""The columns of instances.parquet a cluster's run page shows, one row per server."""


def _instances(run: RunDir) -> Section | None:
    """A cluster's servers: the cluster keys and a row per server (instances.parquet); none for
    a run of one server."""
    table = run.instances()
    if table is None or len(table) <= 1 or "instance" not in table.columns:
        return None
    summary = run.summary
    cluster = run.config.get("cluster")
    router = cluster.get("router") if isinstance(cluster, dict) else None
    policy = router.get("policy") if isinstance(router, dict) else None
    behind = f" behind a <code>{esc(policy)}</code> router" if isinstance(policy, str) else ""
    keys = [key for key in CLUSTER_KEYS if key in summary]
    cluster_rows = [[key, cell(key, summary[key]), metric_unit(key)] for key in keys]
    columns = [c for c in INSTANCE_COLUMNS if c in table.columns]
    header = ["instance", *(c if metric_unit(c) == c else unit_header(c) for c in columns)]
    rows = [
        [number(r["instance"]), *(cell(c, r[c]) for c in columns)]
        for r in table.sort_values("instance").to_dict("records")
    ]
    return section(
        "instances",
        "Instances",
        f"<p>{len(table):,} servers{behind} share one storage backend. The cluster's "
        "keys (of summary.json, over all servers):</p>",
        html_table("cluster", ["key", "value", "unit"], cluster_rows, range(1, 2)),
        "<h3>Per instance (instances.parquet)</h3>",
        "<p>Each server's summary keys computed on its own rows (warm-up excluded); "
        "instances.parquet has every key but the storage counters.</p>",
        html_table("instances", header, rows, range(0, len(header))),
    )


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {prefix: doc}
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _compare_page(directory: Path) -> str:
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
        f"{column}={v}": [*_overloaded(run.summary, run.config), *run_findings(run.summary)]
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
            _deployment(
                first.config if first is not None else {},
                {key: f"varies: {', '.join(variants)}" for key in differing},
            ),
            _scenario(name, first.config_text if first is not None else None, extra=extra),
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
            _provenance(first.meta if first is not None else {}),
        ],
    )


def _sweep_page(directory: Path) -> str:
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
            _deployment(read_config(directory)[1], swept),
            _scenario(
                name,
                yaml.safe_dump(meta, sort_keys=False),
                "Sweep provenance (sweep.json)",
                ["<h3>Grid</h3>", html_table("grid", ["key", "values"], grid_rows)],
            ),
            findings_section(
                [
                    *_study_overloaded(directory, read_config(directory)[1], "sweep"),
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
            _provenance(meta, provenance),
        ],
    )


def _sweep_caption(stem: str) -> str:
    if stem == "sweep_curves":
        return "Heal rate and discard rate against the first numeric swept key (95 % bands)"
    if stem == "loop_ccdf":
        return "Loop-length CCDF over all seeds and points"
    return f"{stem.removeprefix('heatmap_')} over the two numeric swept keys"


def _capacity_page(directory: Path) -> str:
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
    ]
    suffix = "" if metric_unit(metric) == "count" else f" ({metric_unit(metric)})"
    eval_rows = [
        [
            quantity_text(param, r["value"]),
            number(r["n"]),
            cell(metric, r["mean"]),
            cell(metric, r["ci_low"]),
            cell(metric, r["ci_high"]),
            "meets" if bool(r["meets"]) else "fails",
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
            _deployment(config, {param: f"sized by the search: {answered}"}),
            _scenario(
                name,
                yaml.safe_dump(answer, sort_keys=False),
                "Capacity answer (capacity.json)",
                ["<h3>Search</h3>", html_table("search", ["item", "value"], search_rows)],
            ),
            findings_section(
                [
                    *_study_overloaded(directory, config, "capacity search"),
                    *capacity_findings(answer, evaluations, config),
                ]
            ),
            section("plots", "Plots", png_figure(png, caption)),
            section("summary", "Summary", *summary),
        ],
    )


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


BUILDERS: dict[str, Callable[[Path], str]] = {
    "run": _run_page,
    "compare": _compare_page,
    "sweep": _sweep_page,
    "capacity": _capacity_page,
}
