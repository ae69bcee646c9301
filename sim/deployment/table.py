"""The profiles as the tables docs/deployments.md shows: one column a release (or backend), one
row a key, and under each table where every value was read. `python -m sim.deployment.table`
prints them and `python -m sim.deployment.table docs/deployments.md` writes them into the page's
marked blocks; a test keeps the page equal to this output, so it never drifts from the
registries.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from sim.core.safe_io import UnreadableFile, read_text_bounded
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


def published_runs_table() -> str:
    """docs/compute.md's published measurements, each rerun through the engine from its
    scenario: running scenarios belongs to the studies layer, so it is imported here, late."""
    from sim.studies.published_runs import published_table

    return published_table()


TABLES = {
    "releases": releases_table,
    "backends": backends_table,
    "compute gpus": gpu_table,
    "compute models": model_table,
    "compute roofline": roofline_table,
    "compute published": published_runs_table,
}
"""The docs' generated blocks, by the name of their markers."""


def write_into(text: str) -> str:
    """`text` with every `<!-- NAME table: start -->` ... `end -->` block made anew."""
    for name, make in TABLES.items():
        start, end = _markers(name)
        before, found, rest = text.partition(start)
        if found:
            _, _, after = rest.partition(end)
            text = f"{before}{start}\n{make()}\n{end}{after}"
    return text


class PageError(ValueError):
    """A page the tables cannot be written into: the message names why."""


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name} table: start -->", f"<!-- {name} table: end -->"


def check_markers(text: str) -> None:
    """Refuse a page whose blocks `write_into` would mangle: none at all (nothing to write), a
    start without its end or after it (the rest of the page would be dropped), or a block
    twice (the second would go stale)."""
    found = 0
    for name in TABLES:
        start, end = _markers(name)
        starts, ends = text.count(start), text.count(end)
        if starts > 1 or ends > 1:
            raise PageError(f"the {name} table's markers appear more than once")
        if starts != ends:
            missing = end if starts else start
            raise PageError(f"the {name} table has no {missing!r} to pair with the other marker")
        if starts and text.index(end) < text.index(start):
            raise PageError(f"the {name} table's end marker comes before its start marker")
        found += starts
    if not found:
        names = ", ".join(TABLES)
        raise PageError(f"holds none of the table markers ({names}); nothing to write into")


def read_page(path: Path) -> str:
    """A page's text, refused (PageError) unless it is a regular UTF-8 file reached without a
    symbolic link, with well-formed markers."""
    if path.is_symlink():
        raise PageError("is a symbolic link; the tables are never written through one")
    try:
        text = read_text_bounded(path)
    except FileNotFoundError:
        raise PageError("no such file") from None
    except UnreadableFile as exc:
        raise PageError(str(exc).removeprefix(f"{path} ")) from None
    except UnicodeDecodeError:
        raise PageError("is not UTF-8 text") from None
    except OSError as exc:
        raise PageError(f"cannot be read: {exc.strerror or exc}") from None
    check_markers(text)
    return text


def write_page(path: Path, text: str) -> None:
    """Into a temporary file beside `path`, then moved over it: a reader never sees half a
    page, and the page keeps its permissions."""
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: Sequence[str]) -> int:
    """Print the release and backend tables, or (pages named) write every table into each
    page; every page is checked before any is written, and a refused one exits 2."""
    if not argv:
        print(releases_table(), end="\n\n")
        print(backends_table())
        return 0
    pages: list[tuple[Path, str]] = []
    for name in argv:
        path = Path(name)
        try:
            pages.append((path, write_into(read_page(path))))
        except PageError as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            return 2
    for path, text in pages:
        write_page(path, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
