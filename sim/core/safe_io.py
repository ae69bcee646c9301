"""Reading input files without trusting what is at their path: a FIFO, a device such as
`/dev/zero` or a file of gigabytes is refused before it is read, and every read is bounded.

The tool reads scenario files, hardware calibration files, traces and the files of result
directories. Each of those is a regular file of a bounded size; anything else is bad input,
told as `UnreadableFile` (a `ValueError`), which the callers turn into exit 2 naming the file.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

MAX_DOCUMENT_BYTES = 16 * 2**20
"""A scenario, calibration or result JSON/YAML file larger than this is not one (the largest
shipped scenario is a few kB; a sweep's summary files are a few MB)."""


class UnreadableFile(ValueError):
    """A path that is not a regular file, or a file over its size bound."""


def open_regular(path: Path) -> io.BufferedReader:
    """`path` opened for reading, if it is a regular file: the open never blocks (a FIFO with no
    writer would), and a device, a FIFO, a socket or a folder is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise UnreadableFile(f"{path} is a folder, not a file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path} is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return io.BufferedReader(io.FileIO(fd, "rb"))
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnreadableFile(f"{path} is larger than {limit:,} bytes; no such input file is")
    return data


def read_text_bounded(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """`read_bounded` decoded as UTF-8 (UnicodeDecodeError for other bytes)."""
    return read_bounded(path, limit).decode("utf-8")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def symlinked_part(root: Path, relative: Path) -> Path | None:
    """The first of `root/relative`'s components below `root` (and `root` itself) that is a
    symbolic link, or None: writing through such a link writes outside `root`."""
    here = root
    if here.is_symlink():
        return here
    for part in relative.parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


MAX_TABLE_BYTES = 8 * 2**30
"""A result table (Parquet or CSV) larger than this is not one this tool wrote for a run."""


def check_regular(path: Path, limit: int = MAX_TABLE_BYTES) -> None:
    """Refuse, before a parser reads it, a path that is not a regular file (a link is followed:
    one to `/dev/zero` is a device) or is larger than `limit` bytes; a missing file is left for
    the reader to report."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFile(f"{path} is {_kind(info.st_mode)}, not a regular file")
    if info.st_size > limit:
        raise UnreadableFile(f"{path} is larger than {limit:,} bytes; no such input file is")
