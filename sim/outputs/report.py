"""One self-contained HTML page for a run, compare, sweep or capacity directory (each kind's
page in its module: report_run, report_compare, report_sweep, report_capacity).

The page is meant to be attached to a ticket or mailed and opened anywhere, offline, years later:
the CSS is inline, plots are base64 PNG data URIs, and a Content-Security-Policy forbids fetching
anything else, so what a reader sees cannot depend on the network. Plots already drawn in the
directory are embedded as they are; missing ones are drawn in memory by the same functions as
`hicache-sim plot`, so making a report writes nothing but the page. Every text from the
directory is HTML-escaped. A tiny inline script marks each image with its decoded width once the
page has loaded, which lets a headless browser prove that every image decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sim.outputs.files import refuse_output, replace_file
from sim.outputs.report_capacity import capacity_page
from sim.outputs.report_compare import compare_page
from sim.outputs.report_run import run_page
from sim.outputs.report_sweep import sweep_page
from sim.results.layout import detect


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


BUILDERS: dict[str, Callable[[Path], str]] = {
    "run": run_page,
    "compare": compare_page,
    "sweep": sweep_page,
    "capacity": capacity_page,
}
