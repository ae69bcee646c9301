"""Writing one output file without ever writing through what is already at its path."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_file(path: Path, write: Callable[[Path], None]) -> Path:
    """Write into a temporary file beside `path`, then rename it over `path`.

    A rename replaces whatever entry is at `path`, a symbolic link included, instead of
    following it: a link planted in a result directory (`timeseries.png -> ~/notes`) is
    replaced by the plot, and its target is left alone. A reader never sees half a file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
