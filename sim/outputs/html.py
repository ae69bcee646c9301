"""The HTML of a report page: its style, the escaping every text from a directory goes through,
and the pieces a page is made of (tables, figures as data URIs, sections, the page itself)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from sim.core.units import cell, is_missing, metric_unit

KIND_TITLES = {
    "run": "run",
    "compare": "comparison",
    "sweep": "sweep",
    "capacity": "capacity answer",
    "plan": "plan",
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
.plain { font-size: 1.02rem; max-width: 60rem; }
.warning { background: #fff8c5; border-left: 4px solid #bf8700; padding: .5rem .8rem;
  margin: .6rem 0; font-weight: 600; }
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


def breakable(text: str) -> Raw:
    """A dotted or snake_case name that may wrap after its separators in a narrow column."""
    escaped = esc(text)
    return Raw(escaped.replace("_", "_<wbr>").replace(".", ".<wbr>"))


def html_table(
    table_id: str,
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    numeric: range = range(0),
) -> str:
    """A table in a horizontally scrolling box: the first column names the row, the columns in
    `numeric` are right-aligned numbers."""
    head = "".join(f"<th>{breakable(h)}</th>" for h in header)
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


def png_figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def warning_box(text: str) -> str:
    """A warning the reader must not miss: an answer from runs that were overloaded."""
    return f'<p class="warning">Warning: {esc(text)}</p>'


def plain_paragraph(text: str) -> str:
    """The page's answer in plain words, first on the page."""
    return f'<p class="plain">{esc(text)}</p>'


def details(summary: str, text: str) -> str:
    return f"<details><summary>{esc(summary)}</summary><pre>{esc(text)}</pre></details>"


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    body: str

    def html(self) -> str:
        return f'<section id="{self.id}"><h2>{esc(self.title)}</h2>{self.body}</section>'


def section(section_id: str, title: str, *parts: str) -> Section:
    return Section(section_id, title, "".join(parts))


def bullets(sentences: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in sentences) + "</ul>"


def findings_section(
    sentences: Sequence[str], groups: Mapping[str, Sequence[str]] | None = None
) -> Section:
    parts = [bullets(sentences)]
    for name, group in (groups or {}).items():
        parts.append(f"<h3>{esc(name)}</h3>{bullets(group)}")
    return section("findings", "Findings", f'<div class="findings">{"".join(parts)}</div>')


def cell_with_interval(key: str, row: Mapping[Any, Any]) -> Raw:
    """The mean, and below it the half-width of its (symmetric) 95 % interval; the interval's
    ends are in the cell's tooltip."""
    mean = esc(cell(key, row["mean"]))
    if int(row.get("n") or 0) < 2 or is_missing(row.get("ci_high")):
        return Raw(mean)
    low, high = row["ci_low"], row["ci_high"]
    ends = f"95 % CI [{cell(key, low)}, {cell(key, high)}]"
    if abs((high - row["mean"]) - (row["mean"] - low)) > 1e-9 * max(1.0, abs(row["mean"])):
        # Truncated at the quantity's range: the interval is no longer symmetric.
        shown = f"[{cell(key, low)}, {cell(key, high)}]"
    else:
        shown = f"± {cell(key, (high - low) / 2)}"
    return Raw(f'<span title="{esc(ends)}">{mean}<span class="ci">{esc(shown)}</span></span>')


def unit_header(key: str) -> str:
    unit = metric_unit(key)
    return key if unit == "count" else f"{key} ({unit})"


def page(name: str, kind: str, directory: Path, sections: Sequence[Section | None]) -> str:
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


def existing_png(directory: Path, stem: str) -> bytes | None:
    """The directory's own `<stem>.png`, if it is one (what `hicache-sim plot` drew)."""
    path = directory / f"{stem}.png"
    if path.is_file():
        data = path.read_bytes()
        if data.startswith(PNG_MAGIC):
            return data
    return None


def render_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
