"""Writing one output file without ever writing through what is already at its path."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from sim.core.spec import ScenarioError


def refuse_output(path: Path, link_ok: bool = True) -> None:
    """The rule of every writer: what is already at an output path is replaced only if it is a
    regular file (or, with `link_ok`, a symbolic link, which the rename replaces and never
    follows). A FIFO, a device (`/dev/null`), a socket or a folder is refused, naming the path,
    and left as it is. A link is replaced, never written through; `report` alone refuses one
    (`link_ok=False`), as it always has."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise ScenarioError(str(path), None, "lies under a file, not a folder") from None
    if stat.S_ISLNK(mode):
        if link_ok:
            return
        raise ScenarioError(str(path), None, "is a symbolic link; refusing to write through it")
    if not stat.S_ISREG(mode):
        raise ScenarioError(
            str(path), None, "exists and is not a regular file; refusing to replace it"
        )


def replace_file(path: Path, write: Callable[[Path], object]) -> Path:
    """Write into a temporary file beside `path`, then rename it over `path`.

    The temporary file ends in `.tmp`, so nothing that lists the folder's `*.json` or `*.png`
    mistakes it for a finished file (a writer names its format instead of relying on the
    suffix). A rename replaces whatever entry is at `path`, a symbolic link included, instead of
    following it: a link planted in a result directory (`timeseries.png -> ~/notes`) is
    replaced by the plot, and its target is left alone. A reader never sees half a file. The
    file is made readable by all (0644), as a plain write would be, not mkstemp's 0600.
    Anything at `path` but a regular file or a link is refused (`refuse_output`).
    """
    refuse_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class UnreadableTable(ValueError):
    """A file named like a result table that is not Parquet (junk, truncated, emptied)."""


def read_table(path: Path) -> pd.DataFrame:
    """A result directory's Parquet table. pyarrow answers a file that is not Parquet with an
    OSError (the magic bytes around no footer) or a ValueError (ArrowInvalid); either is
    UnreadableTable, while a missing file or a folder stays what it is."""
    from sim.core.safe_io import check_regular

    try:
        check_regular(path)
    except ValueError as exc:
        raise UnreadableTable(str(exc)) from None
    try:
        return pd.read_parquet(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        raise
    except (OSError, ValueError) as exc:
        raise UnreadableTable(
            f"{path.name}: not a readable Parquet file ({str(exc).strip()})"
        ) from None
