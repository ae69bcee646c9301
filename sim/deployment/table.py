"""The profiles as the tables docs/deployments.md shows: one column a release (or backend), one
row a key, and under each table where every value was read. `python -m sim.deployment.table`
prints them and `python -m sim.deployment.table docs/deployments.md` writes them into the page's
marked blocks; a test keeps the page equal to this output, so it never drifts from the
registries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.deployment.compute import gpu_table, model_table, roofline_table
from sim.deployment.profiles import (
    SGLANG_RELEASES,
    STORAGE_BACKENDS,
    Setting,
    SGLangRelease,
    release_names,
)
from sim.deployment.resolve import show_value


def _cell(value: object) -> str:
    return f"`{show_value(value)}`"


def _rows(columns: Sequence[str], settings: Sequence[Iterable[Setting]]) -> list[str]:
    by_column = [{s.key: s for s in column} for column in settings]
    keys = list(dict.fromkeys(key for column in by_column for key in column))
    lines = ["| key | " + " | ".join(columns) + " |", "|" + " --- |" * (len(columns) + 1)]
    for key in keys:
        cells = [_cell(column[key].value) if key in column else "—" for column in by_column]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return lines


def _evidence(
    columns: Sequence[str], settings: Sequence[Iterable[Setting]], *, per_column: bool
) -> list[str]:
    """One line a key and value (and, `per_column`, evidence): which columns have it and where
    it was read. Releases cite the first release with the value; the later ones ship the same
    code."""
    seen: dict[tuple[str, str, str], tuple[list[str], str]] = {}
    for column, column_settings in zip(columns, settings, strict=True):
        for s in column_settings:
            group = (s.key, _cell(s.value), s.evidence if per_column else "")
            names, _ = seen.setdefault(group, ([], s.evidence))
            names.append(column)
    return [
        f"- `{key}` = {value} ({', '.join(names)}): {evidence}"
        for (key, value, _), (names, evidence) in seen.items()
    ]


def releases_table() -> str:
    versions = release_names()
    releases: list[SGLangRelease] = [SGLANG_RELEASES[name] for name in versions]
    settings = [r.settings for r in releases]
    lines = _rows(versions, settings)
    lines.append("")
    lines += _evidence(versions, settings, per_column=False)
    return "\n".join(lines)


def backends_table() -> str:
    """A column a backend as the newest release runs it (and the first release that registers
    it), then what older releases differ in."""
    names = list(STORAGE_BACKENDS)
    backends = [STORAGE_BACKENDS[name] for name in names]
    newest = [b.settings_for(None) for b in backends]
    lines = _rows(names, newest)
    lines.insert(2, "| first release | " + " | ".join(b.since for b in backends) + " |")
    lines.append("")
    lines += _evidence(names, newest, per_column=True)
    for backend in backends:
        for since, change in backend.changes:
            older = next(s for s in backend.settings if s.key == change.key)
            lines.append(
                f"- before {since}, {backend.name}'s `{older.key}` = {_cell(older.value)}: "
                f"{older.evidence}"
            )
    return "\n".join(lines)


TABLES = {
    "releases": releases_table,
    "backends": backends_table,
    "compute gpus": gpu_table,
    "compute models": model_table,
    "compute roofline": roofline_table,
}
"""The docs' generated blocks, by the name of their markers."""


def write_into(text: str) -> str:
    """`text` with every `<!-- NAME table: start -->` ... `end -->` block made anew."""
    for name, make in TABLES.items():
        start, end = f"<!-- {name} table: start -->", f"<!-- {name} table: end -->"
        before, found, rest = text.partition(start)
        if found:
            _, _, after = rest.partition(end)
            text = f"{before}{start}\n{make()}\n{end}{after}"
    return text


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if len(sys.argv) > 1:
        for doc in map(Path, sys.argv[1:]):
            doc.write_text(write_into(doc.read_text()))
    else:
        print(releases_table(), end="\n\n")
        print(backends_table())
