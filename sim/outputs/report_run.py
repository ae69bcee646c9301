"""The report page of a run directory (and a cluster's servers, one row each)."""

from __future__ import annotations

from pathlib import Path

from sim.core.units import cell, metric_unit, number
from sim.outputs.findings_run import run_findings
from sim.outputs.html import (
    Section,
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
from sim.outputs.plot_run import run_figure
from sim.outputs.report_parts import (
    deployment_section,
    overloaded,
    provenance_section,
    scenario_section,
)
from sim.results.reading import (
    RunDir,
    read_run,
)


def run_page(directory: Path) -> str:
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
            deployment_section(run.config),
            scenario_section(name, run.config_text),
            findings_section([*overloaded(summary, run.config), *run_findings(summary)]),
            plots,
            instances,
            section(
                "summary",
                "Summary",
                "<p>Every key of summary.json (warm-up excluded; docs/metrics.md).</p>",
                html_table("summary", ["key", "value", "unit"], rows, range(1, 2)),
            ),
            provenance_section(run.meta),
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
