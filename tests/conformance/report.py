"""The conformance table: cases run and held by release and property, printed at the end of a
run and, with `HICACHE_WRITE_CONFORMANCE=1`, written into docs/fidelity.md between its markers
(so the table there is always a run's output, never typed). The hooks that call these live in
tests/conftest.py, which every pytest process loads, the xdist controller included."""

from __future__ import annotations

from pathlib import Path

from tests.conformance import releases
from tests.conformance.tally import HELD, RUN

DOC = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"
START, END = "<!-- conformance table: start -->", "<!-- conformance table: end -->"


def table() -> str:
    """Markdown: one row a property, one column a release, `held / run` in each cell."""
    props = sorted({prop for _, prop in RUN})
    head = ["property", *releases.RELEASES]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for prop in props:
        cells = []
        for release in releases.RELEASES:
            run = RUN[release, prop]
            cells.append(f"{HELD[release, prop]:,} / {run:,}" if run else "—")
        lines.append(f"| {prop} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_doc() -> None:
    """Put the table between the markers in docs/fidelity.md."""
    text = DOC.read_text()
    before, _, rest = text.partition(START)
    _, _, after = rest.partition(END)
    DOC.write_text(f"{before}{START}\n{table()}\n{END}{after}")
