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

import base64
import html
import io
import json
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from matplotlib.figure import Figure

from sim.outputs.files import read_table, replace_file
from sim.outputs.findings import (
    capacity_findings,
    compare_findings,
    interval,
    param_value,
    run_findings,
    setting,
    short,
    sweep_findings,
    sweep_metrics,
)
from sim.outputs.plot import capacity_figure, comparison_figure, run_figure, sweep_figures
from sim.results.layout import (
    CAPACITY,
    COMPARISON,
    CONFIG,
    EVALUATIONS,
    INSTANCES,
    META,
    POINTS,
    SUMMARY,
    SWEEP_META,
    TASKS,
    TIMESERIES,
    detect,
)
from sim.spec import ScenarioError
from sim.stats import confidence, parse_target
from sim.units import cell, is_missing, metric_unit, number

KIND_TITLES = {
    "run": "run",
    "compare": "comparison",
    "sweep": "sweep",
    "capacity": "capacity answer",
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DPI = 110
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1f24;
  margin: 0 auto; padding: 1.5rem 2rem 4rem; max-width: 1180px; }
h1 { font-size: 1.7rem; margin: 0 0 .2rem; }
h2 { font-size: 1.25rem; margin: 2rem 0 .6rem; padding-bottom: .2rem;
  border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
.sub { color: #57606a; margin: 0 0 1rem; }
nav a { margin-right: 1rem; }
.findings li { margin: .3rem 0; }
.comment { white-space: pre-wrap; background: #f6f8fa; border-left: 3px solid #8c959f;
  padding: .5rem .8rem; margin: .5rem 0; font-size: .92rem; }
details { margin: .6rem 0; }
summary { cursor: pointer; color: #0969da; }
pre { background: #f6f8fa; padding: .7rem; overflow: auto; max-height: 32rem; font-size: .85rem; }
.scroll { overflow-x: auto; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: .88rem; }
th, td { border: 1px solid #d0d7de; padding: .25rem .55rem; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
tbody tr:nth-child(even) td { background: #fafbfc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.key { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .84rem; }
td .ci { display: block; color: #57606a; font-size: .78rem; }
figure { margin: 1rem 0 1.8rem; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: .9rem; margin-top: .3rem; }
"""
SCRIPT = """
window.addEventListener("load", function () {
  for (const img of document.images) {
    img.setAttribute("data-decoded", String(img.naturalWidth));
  }
  document.body.setAttribute("data-report-loaded", "true");
});
"""


class Raw(str):
    """HTML that is already safe (built here from escaped parts), not to be escaped again."""


def esc(text: Any) -> str:
    return text if isinstance(text, Raw) else html.escape(str(text))


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
    if target.is_symlink():
        raise ScenarioError(str(target), None, "is a symbolic link; refusing to write through it")
    if target.exists() and not target.is_file():
        raise ScenarioError(str(target), None, "exists and is not a regular file")


def build_report(directory: Path) -> str:
    """The page's HTML for whatever kind of result `directory` holds."""
    kind = detect(directory)
    return BUILDERS[kind](directory)


# --- reading --------------------------------------------------------------------------------------


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def _csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def _parquet(path: Path) -> pd.DataFrame:
    try:
        return read_table(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def _config(run_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """A run directory's resolved configuration: its text and the parsed mapping."""
    path = run_dir / CONFIG
    if not path.is_file():
        return None, {}
    text = path.read_text(encoding="utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None
    return text, doc if isinstance(doc, dict) else {}


def header_comment(text: str | None) -> str:
    """The comment lines a YAML file opens with (a scenario's statement of what it models)."""
    lines = []
    for line in (text or "").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines).strip()


def _existing_png(directory: Path, stem: str) -> bytes | None:
    """The directory's own `<stem>.png`, if it is one (what `hicache-sim plot` drew)."""
    path = directory / f"{stem}.png"
    if path.is_file():
        data = path.read_bytes()
        if data.startswith(PNG_MAGIC):
            return data
    return None


def _render(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


# --- HTML pieces ----------------------------------------------------------------------------------


def _breakable(text: str) -> Raw:
    """A dotted or snake_case name that may wrap after its separators in a narrow column."""
    escaped = esc(text)
    return Raw(escaped.replace("_", "_<wbr>").replace(".", ".<wbr>"))


def _table(
    table_id: str,
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: range = range(0),
) -> str:
    """A table in a horizontally scrolling box: the first column names the row, the columns in
    `numeric` are right-aligned numbers."""
    head = "".join(f"<th>{_breakable(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            cls = "key" if i == 0 else ("num" if i in numeric else "")
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{esc(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def _details(summary: str, text: str) -> str:
    return f"<details><summary>{esc(summary)}</summary><pre>{esc(text)}</pre></details>"


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str

    def html(self) -> str:
        return f'<section id="{self.id}"><h2>{esc(self.title)}</h2>{self.body}</section>'


def _section(section_id: str, title: str, *parts: str) -> Section:
    return Section(section_id, title, "".join(parts))


def _list(sentences: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in sentences) + "</ul>"


def _findings(
    sentences: Sequence[str], groups: Mapping[str, Sequence[str]] | None = None
) -> Section:
    parts = [_list(sentences)]
    for name, group in (groups or {}).items():
        parts.append(f"<h3>{esc(name)}</h3>{_list(group)}")
    return _section("findings", "Findings", f'<div class="findings">{"".join(parts)}</div>')


def _cell_with_interval(key: str, row: Mapping[Any, Any]) -> Raw:
    """The mean, and below it the half-width of its (symmetric) 95 % interval; the interval's
    ends are in the cell's tooltip."""
    mean = esc(cell(key, row["mean"]))
    if int(row.get("n") or 0) < 2 or is_missing(row.get("ci_high")):
        return Raw(mean)
    half = cell(key, (row["ci_high"] - row["ci_low"]) / 2)
    ends = f"95 % CI [{cell(key, row['ci_low'])}, {cell(key, row['ci_high'])}]"
    return Raw(f'<span title="{esc(ends)}">{mean}<span class="ci">± {esc(half)}</span></span>')


def _unit_header(key: str) -> str:
    unit = metric_unit(key)
    return key if unit == "count" else f"{key} ({unit})"


def _page(name: str, kind: str, directory: Path, sections: Sequence[Section | None]) -> str:
    title = f"{name}: {KIND_TITLES[kind]} report"
    shown = [s for s in sections if s is not None]
    links = "".join(f'<a href="#{s.id}">{esc(s.title)}</a>' for s in shown)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body>"
        f"<header><h1>{esc(name)}</h1>"
        f'<p class="sub">{esc(KIND_TITLES[kind].capitalize())} report of {esc(directory.name)}'
        f" (hicache-sim)</p><nav>{links}</nav></header>\n"
        + "\n".join(s.html() for s in shown)
        + f"\n<script>{SCRIPT}</script></body></html>\n"
    )


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
        parts.append(_details(config_label, config_text))
    return _section("scenario", "Scenario", *parts)


def _provenance(meta: Mapping[str, Any], extra: Sequence[tuple[str, Any]] = ()) -> Section | None:
    """Command, time, seed, versions and machine of what wrote the directory."""
    rows: list[tuple[str, Any]] = []
    command = meta.get("command")
    if isinstance(command, list):
        rows.append(("command", shlex.join(str(c) for c in command)))
    for key in ("written_utc", "seed", "wall_s"):
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
    return _section("provenance", "Provenance", _table("provenance", ["item", "value"], body))


# --- the four kinds -------------------------------------------------------------------------------


def _run_page(directory: Path) -> str:
    summary = _json(directory / SUMMARY)
    config_text, config = _config(directory)
    meta = _json(directory / META) if (directory / META).is_file() else {}
    name = str(config.get("name", directory.name))
    instances = _instances(directory, summary, config)
    plots = None
    if (directory / TIMESERIES).is_file():
        png = _existing_png(directory, "timeseries") or _render(run_figure(directory))
        caption = "Time series: cumulative discards, existence cache, device and storage occupancy"
        if instances is not None:
            caption = (
                "Time series per instance: cumulative discards, existence cache, host and device "
                "occupancy; the shared storage occupancy"
            )
        plots = _section("plots", "Plots", _figure(png, caption))
    rows = [[key, cell(key, value), metric_unit(key)] for key, value in summary.items()]
    return _page(
        name,
        "run",
        directory,
        [
            _scenario(name, config_text),
            _findings(run_findings(summary)),
            plots,
            instances,
            _section(
                "summary",
                "Summary",
                "<p>Every key of summary.json (warm-up excluded; docs/metrics.md).</p>",
                _table("summary", ["key", "value", "unit"], rows, range(1, 2)),
            ),
            _provenance(meta),
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


def _instances(
    directory: Path, summary: Mapping[str, Any], config: Mapping[str, Any]
) -> Section | None:
    """A cluster's servers: the cluster keys and a row per server (instances.parquet); none for
    a run of one server."""
    path = directory / INSTANCES
    if not path.is_file():
        return None
    table = _parquet(path)
    if len(table) <= 1 or "instance" not in table.columns:
        return None
    cluster = config.get("cluster")
    router = cluster.get("router") if isinstance(cluster, dict) else None
    policy = router.get("policy") if isinstance(router, dict) else None
    behind = f" behind a <code>{esc(policy)}</code> router" if isinstance(policy, str) else ""
    keys = [key for key in CLUSTER_KEYS if key in summary]
    cluster_rows = [[key, cell(key, summary[key]), metric_unit(key)] for key in keys]
    columns = [c for c in INSTANCE_COLUMNS if c in table.columns]
    header = ["instance", *(c if metric_unit(c) == c else _unit_header(c) for c in columns)]
    rows = [
        [number(r["instance"]), *(cell(c, r[c]) for c in columns)]
        for r in table.sort_values("instance").to_dict("records")
    ]
    return _section(
        "instances",
        "Instances",
        f"<p>{len(table):,} servers{behind} share one storage backend. The cluster's "
        "keys (of summary.json, over all servers):</p>",
        _table("cluster", ["key", "value", "unit"], cluster_rows, range(1, 2)),
        "<h3>Per instance (instances.parquet)</h3>",
        "<p>Each server's summary keys computed on its own rows (warm-up excluded); "
        "instances.parquet has every key but the storage counters.</p>",
        _table("instances", header, rows, range(0, len(header))),
    )


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {prefix: doc}
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _compare_page(directory: Path) -> str:
    table = _csv(directory / COMPARISON)
    if table.empty:
        raise ScenarioError(str(directory / COMPARISON), None, "has no variant")
    column = str(table.columns[0])
    variants = [str(v) for v in table[column]]
    runs = {
        v: directory / v
        for v in variants
        if Path(v).name == v and (directory / v / SUMMARY).is_file()
    }
    configs = {v: _config(run_dir) for v, run_dir in runs.items()}
    first_text, first = next(iter(configs.values()), (None, {}))
    name = str(first.get("name", directory.name))
    flat = [_flatten(doc) for _, doc in configs.values()]
    differing = sorted({k for f in flat for k in f if len({repr(g.get(k)) for g in flat}) > 1})
    extra = []
    if differing:
        extra.append(
            f"<p>The variants ({esc(', '.join(variants))}) differ only in "
            f"<code>{esc(', '.join(differing))}</code>; below is the first one's "
            "configuration.</p>"
        )
    png = _existing_png(directory, "comparison") or _render(comparison_figure(directory))
    figures = [_figure(png, "Key metrics per variant, and cumulative discards over time")]
    for variant, run_dir in runs.items():
        if (run_dir / TIMESERIES).is_file():
            png = _existing_png(run_dir, "timeseries") or _render(run_figure(run_dir))
            figures.append(_figure(png, f"{column}={variant}: time series"))
    per_variant = {
        f"{column}={v}": run_findings(_json(run_dir / SUMMARY)) for v, run_dir in runs.items()
    }
    records = table.to_dict("records")
    keys = [str(c) for c in table.columns if c != column]
    rows = [[key, *(cell(key, r[key]) for r in records), metric_unit(key)] for key in keys]
    meta_path = directory / variants[0] / META
    return _page(
        name,
        "compare",
        directory,
        [
            _scenario(name, first_text, extra=extra),
            _findings(compare_findings(table, column), per_variant),
            _section("plots", "Plots", *figures),
            _section(
                "summary",
                "Summary",
                f"<p>comparison.csv: every summary key, one column per {esc(column)}.</p>",
                _table("summary", ["key", *variants, "unit"], rows, range(1, 1 + len(variants))),
            ),
            _provenance(_json(meta_path) if meta_path.is_file() else {}),
        ],
    )


def _sweep_page(directory: Path) -> str:
    meta = _json(directory / SWEEP_META)
    points = _csv(directory / POINTS)
    grid: dict[str, list[Any]] = meta.get("grid") or {}
    name = str(meta.get("scenario", directory.name))
    keys = list(grid)
    grid_rows = [[k, ", ".join(setting(v) for v in values)] for k, values in grid.items()]
    known = set(points["metric"]) if "metric" in points.columns else set()
    metrics = [m for m in sweep_metrics(meta.get("target")) if m in known]
    rows = []
    for _, group in points.groupby("point", sort=True) if not points.empty else []:
        by_metric = {r["metric"]: r for r in group.to_dict("records")}
        head = group.iloc[0]
        rows.append(
            [
                int(head["point"]),
                *(setting(head[k]) for k in keys),
                *(_cell_with_interval(m, by_metric[m]) if m in by_metric else "–" for m in metrics),
            ]
        )
    header = ["point", *map(short, keys), *map(_unit_header, metrics)]
    figures = [
        _figure(_existing_png(directory, stem) or _render(figure), _sweep_caption(stem))
        for stem, figure in sweep_figures(directory).items()
    ]
    failed = len(meta.get("failed") or [])
    runs = f"{meta.get('tasks')} ({meta.get('computed')} computed, {meta.get('reused')} reused"
    provenance = [
        ("executor", f"{meta.get('executor')} ({meta.get('workers')} workers)"),
        ("runs", f"{runs}, {failed} failed)"),
        ("target", meta.get("target") or "none"),
    ]
    return _page(
        name,
        "sweep",
        directory,
        [
            _scenario(
                name,
                yaml.safe_dump(meta, sort_keys=False),
                "Sweep provenance (sweep.json)",
                ["<h3>Grid</h3>", _table("grid", ["key", "values"], grid_rows)],
            ),
            _findings(sweep_findings(points, grid, meta)),
            _section("plots", "Plots", *figures) if figures else None,
            _section(
                "summary",
                "Summary",
                "<p>Mean over seeds per grid point, ± the half-width of its 95 % Student-t "
                "interval (hover for the ends; points.csv has every metric).</p>",
                _table("summary", header, rows, range(1 + len(keys), len(header))),
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
    answer = _json(directory / CAPACITY)
    evaluations = _csv(directory / EVALUATIONS)
    for key in ("param", "target"):
        if key not in answer:
            raise ScenarioError(str(directory / CAPACITY), key, "missing")
    param, target = answer["param"], answer["target"]
    metric = parse_target(target)[0]
    name = str(answer.get("scenario", directory.name))
    found = answer.get("answer")
    search_rows = [
        ["parameter", param],
        ["target", target],
        ["seeds per value", number(answer.get("seeds"))],
        ["answer", param_value(found) if found is not None else "none in range"],
        ["largest failing value", param_value(answer.get("largest_failing"))],
        ["statement", answer.get("statement", "")],
    ]
    suffix = "" if metric_unit(metric) == "count" else f" ({metric_unit(metric)})"
    eval_rows = [
        [
            param_value(r["value"]),
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
        _table("evaluations", [*eval_header, "failed runs"], eval_rows, range(0, 7)),
    ]
    at_answer = _at_answer(directory, param, found)
    if at_answer:
        summary += [
            f"<h3>At the answer, {esc(param)} = {esc(param_value(found))}</h3>",
            "<p>Mean over its seeds with the 95 % interval (from the runs in tasks/).</p>",
            _table("at-answer", ["key", "mean (95 % CI)", "unit"], at_answer, range(1, 2)),
        ]
    png = _existing_png(directory, "capacity") or _render(capacity_figure(directory))
    caption = f"{metric} at each evaluated {param}: mean and 95 % interval against the target"
    return _page(
        name,
        "capacity",
        directory,
        [
            _scenario(
                name,
                yaml.safe_dump(answer, sort_keys=False),
                "Capacity answer (capacity.json)",
                ["<h3>Search</h3>", _table("search", ["item", "value"], search_rows)],
            ),
            _findings(capacity_findings(answer, evaluations)),
            _section("plots", "Plots", _figure(png, caption)),
            _section("summary", "Summary", *summary),
        ],
    )


def _at_answer(directory: Path, param: str, value: Any) -> list[list[Any]]:
    """Key metrics over the seeds of the answer's runs (kept in tasks/), mean and interval."""
    if value is None or not (directory / TASKS).is_dir():
        return []
    summaries = []
    for path in sorted((directory / TASKS).glob("*.json")):
        record = _json(path)
        if record.get("summary") and record.get("values", {}).get(param) == value:
            summaries.append(record["summary"])
    if not summaries:
        return []
    rows = []
    for key in sweep_metrics(None):
        values = [s[key] for s in summaries if s.get(key) is not None]
        if values:
            rows.append([key, interval(key, confidence(values)), metric_unit(key)])
    return rows


BUILDERS: dict[str, Callable[[Path], str]] = {
    "run": _run_page,
    "compare": _compare_page,
    "sweep": _sweep_page,
    "capacity": _capacity_page,
}
