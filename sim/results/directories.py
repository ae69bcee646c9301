"""Result directories on disk: where a new one goes, how it is written whole (built in a
staging sibling, marked, renamed into place), what may be replaced, and the lock a sweep holds
on its directory while it writes."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sim.core.safe_io import check_regular, read_text_bounded
from sim.core.spec import ScenarioError
from sim.results.layout import (
    CAPACITY,
    COMPARISON,
    CONFIG,
    EVALUATIONS,
    RUNS,
    SUMMARY,
    SWEEP_META,
    TASKS,
    VARIANTS,
)


def default_out(results_root: Path, scenario_name: str, kind: str) -> Path:
    """results/<scenario>/<kind>-<UTC time>[-n]: a new directory for every invocation."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = results_root / scenario_name / f"{kind}-{stamp}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


MARKER = ".hicache-sim"
"""A file in every result directory this tool writes; `--force` replaces only such a
directory, so it can never delete a user's own folder."""


MARKER_TEXT = "a result directory written by hicache-sim\n"


def mark(directory: Path) -> None:
    """Mark a directory as a result directory of this tool (replaceable with `--force`)."""
    (directory / MARKER).write_text(MARKER_TEXT)


def check_replaceable(target: Path) -> None:
    """Refuse (FileExistsError, exit 2) to replace anything but a result directory of this
    tool: a symlink (its target is not ours to delete), the working directory or one of its
    parents, or a directory without the marker."""
    if target.is_symlink():
        raise FileExistsError(f"{target} is a symbolic link; refusing to replace it")
    resolved = target.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise FileExistsError(f"{target} is the working directory or a parent of it")
    if not (resolved / MARKER).is_file():
        raise FileExistsError(
            f"{target} exists and was not written by hicache-sim (no {MARKER} marker in it); "
            "refusing to replace it: choose another --out"
        )


STAGING_PREFIX = ".hicache-sim-staging-"
STAGING_OWNER = "owner"
"""In a staging directory: the host and pid of the process writing it, so that a later write
can tell a directory left by a killed process from one that is still being written."""


def remove_stale_staging(parent: Path) -> list[Path]:
    """Remove the staging directories in `parent` whose writer is gone (killed before it could
    clean up); one of a live process, of another host, or without an owner is left alone."""
    removed = []
    for path in parent.glob(f"{STAGING_PREFIX}*"):
        if path.is_dir() and not path.is_symlink() and _owner_gone(path / STAGING_OWNER):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_gone(owner: Path) -> bool:
    try:
        host, pid_text = owner.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def write_atomically(target: Path, fill: Callable[[Path], None], force: bool = False) -> Path:
    """Build the directory beside `target` and rename it into place only once it is complete;
    with `force`, an existing result directory of this tool is replaced (nothing else)."""
    if target.is_symlink():
        check_replaceable(target)
    target = target.resolve()
    with only_writer(target):
        return _write_staged(target, fill, force)


def _write_staged(target: Path, fill: Callable[[Path], None], force: bool) -> Path:
    remove_stale_staging(target.parent)
    try:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent))
    except OSError as exc:
        raise ScenarioError(
            "--out", None, f"cannot write in {target.parent}: {exc.strerror}"
        ) from None
    (staging / STAGING_OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    try:
        fill(staging / "out")
        mark(staging / "out")
        if target.exists():
            if not force:
                raise FileExistsError(f"{target} already exists (use --force to replace it)")
            check_replaceable(target)
            shutil.rmtree(target)
        os.replace(staging / "out", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def check_path(option: str, path: Path) -> None:
    """A path every file system here can hold and every output file can name: UTF-8, and no
    component longer than 255 bytes."""
    try:
        parts = [part.encode("utf-8") for part in path.parts]
    except UnicodeEncodeError:
        raise ScenarioError(option, None, f"{path!s:.80} is not a valid UTF-8 path") from None
    if any(len(part) > 255 for part in parts):
        raise ScenarioError(option, None, "a folder or file name is at most 255 bytes")


def refuse_existing(out: Path | None, force: bool) -> None:
    """Before anything runs: an existing `--out` needs `--force`, and `--force` replaces only
    a result directory this tool wrote (never a symlink, the working directory or a parent)."""
    if out is not None:
        check_path("--out", out)
    if out is None or not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise FileExistsError(f"{out} already exists (use --force to replace it)")
    check_replaceable(out)


def check_sweep_out(target: Path, name: str, planned: set[str] | None = None) -> None:
    """A sweep extends or resumes only a sweep directory of the same scenario; it never mixes
    its tables into another scenario's sweep, a run directory or a folder of the user's, never
    writes through a symbolic link planted at its hidden `.<out>.partial` or at `tasks/`, and
    never drops the runs of a finished sweep: its new plan (`planned`, the task keys) must hold
    every run the directory's runs.parquet has."""
    check_path("--out", target)
    if target.is_symlink():
        raise ScenarioError("--out", None, f"{target} is a symbolic link; choose another --out")
    staging = target.with_name(f".{target.name}.partial")
    if len(staging.name.encode("utf-8", "surrogateescape")) > 255:
        raise ScenarioError(
            "--out",
            None,
            "a sweep's folder name is at most 246 bytes (it is built in a hidden "
            f"'.NAME.partial' beside it, and a name is at most 255 bytes): {target.name[:40]}...",
        )
    for directory in (staging, target):
        for path in (directory, directory / TASKS):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise ScenarioError(
                    "--out",
                    None,
                    f"{path} is a symbolic link or not a folder, and a sweep into {target} "
                    "writes there; remove it or choose another --out",
                )
    if not target.exists():
        return
    meta_path = target / SWEEP_META
    if not meta_path.is_file():
        raise ScenarioError(
            "--out", None, f"{target} exists and is not a sweep directory; choose another --out"
        )
    try:
        other = json.loads(meta_path.read_text()).get("scenario")
    except (OSError, ValueError, AttributeError):
        other = None
    if other != name:
        raise ScenarioError(
            "--out",
            None,
            f"{target} holds a sweep of scenario {other!r}, not {name!r}; choose another --out",
        )
    dropped = _finished_keys(target) - planned if planned is not None else set()
    if dropped:
        raise ScenarioError(
            "--out",
            None,
            f"{target} holds a finished sweep with {len(dropped):,} runs this sweep does not "
            "plan (another grid, --set, --seeds or scenario file); rerunning into it would "
            "replace its tables: choose another --out, or rerun the command that made it",
        )


def _finished_keys(target: Path) -> set[str]:
    """The task keys of a finished sweep's runs.parquet (none when it is missing or damaged:
    the tables are rebuilt from tasks/ then, which loses nothing)."""
    import pyarrow.parquet as pq

    path = target / RUNS
    try:
        check_regular(path)
        keys = pq.read_table(path, columns=["key"]).column("key").to_pylist()
    except (OSError, ValueError, KeyError):
        return set()
    return {key for key in keys if isinstance(key, str)}


OTHER_KINDS = (SUMMARY, SWEEP_META, COMPARISON, VARIANTS)
"""Files that make a directory a run, a sweep or a comparison (never a capacity search)."""


@dataclass(frozen=True)
class StudyKind:
    """A resumable search's result directory (a capacity search, a plan): its answer file names
    the scenario, and what an interrupted search leaves holds only `tasks/`."""

    noun: str
    """What the directory holds, as the messages say it ("capacity search", "plan")."""
    folder: str
    """What the directory is called ("capacity", "plan")."""
    answer: str
    """The file holding the answer and the scenario's name."""
    entries: frozenset[str]
    """Every file name the search writes beside its plots, reports and temporary files."""


CAPACITY_KIND = StudyKind(
    "capacity search",
    "capacity",
    CAPACITY,
    frozenset((TASKS, MARKER, CAPACITY, EVALUATIONS, CONFIG)),
)


def check_capacity_out(
    target: Path, name: str, force: bool, runs_differ: RunsDiffer | None = None
) -> bool:
    """A capacity search's `--out` (see `check_study_out`)."""
    return check_study_out(target, name, force, CAPACITY_KIND, runs_differ)


RunsDiffer = Callable[[Path], str | None]
"""Why a directory's runs are not this command's (`sim.studies.resume.foreign`), or None."""


def check_study_out(
    target: Path, name: str, force: bool, kind: StudyKind, runs_differ: RunsDiffer | None = None
) -> bool:
    """A search resumes into an existing `--out` only if it is a directory of the same kind
    and scenario whose runs are all runs this search would make (`runs_differ`, the rule of
    sim.studies.resume); anything else needs `--force`, which replaces only a result directory
    of this tool (never a folder of the user's, a symbolic link, the working directory or a
    parent of it). True when `target` is to be replaced: nothing is deleted here, the new search is
    built aside and replaces it only once complete (`replaced_at_end`)."""
    check_path("--out", target)
    if target.is_symlink():
        raise ScenarioError("--out", None, f"{target} is a symbolic link; choose another --out")
    if not target.exists():
        return False
    why = _not_study_of(target, name, kind)
    if why is None and runs_differ is not None:
        why = runs_differ(target)
        if why is not None and not force:
            raise ScenarioError(
                "--out",
                None,
                f"{target} {why}; resuming would mix them into this {kind.noun}'s answer: "
                "choose another --out, rerun the command that made it, or --force to replace it",
            )
    if why is None:
        return False
    if not force:
        raise ScenarioError(
            "--out",
            None,
            f"{target} exists and {why}; choose another --out (or --force to replace a result "
            "directory of hicache-sim)",
        )
    try:
        check_replaceable(target)
    except FileExistsError as exc:
        raise ScenarioError("--out", None, str(exc)) from None
    return True


@contextmanager
def replaced_at_end(target: Path, replace: bool) -> Iterator[Path]:
    """Where a search writes: `target` itself, or (`replace`: `--force` over another result)
    a staging sibling that replaces `target` only when the block ends normally, as `run
    --force` does; an interrupted or failed search leaves the old result as it was and its own
    runs nowhere. A search refused part way (a relative target whose reference makes it
    unreachable) into a `target` it created leaves no `target` behind."""
    if not replace:
        fresh = not target.exists() and not target.is_symlink()
        try:
            yield target
        except ScenarioError:
            if fresh:  # a refusal mid-search writes nothing, as one before it does
                shutil.rmtree(target, ignore_errors=True)
            raise
        return
    remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent))
    try:
        (staging / STAGING_OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        yield staging / "out"
        if target.exists() or target.is_symlink():
            check_replaceable(target)
            shutil.rmtree(target)
        os.replace(staging / "out", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _not_study_of(target: Path, name: str, kind: StudyKind) -> str | None:
    """Why `target` is not a `kind` directory of scenario `name` (None: it is one)."""
    if not target.is_dir():
        return "is not a folder"
    other = next((other for other in OTHER_KINDS if (target / other).exists()), None)
    if other is not None:
        return f"is not a {kind.folder} directory (it holds {other})"
    answer = target / kind.answer
    if answer.is_symlink():
        return f"holds a symbolic link at {kind.answer}"
    if answer.is_file():
        try:
            scenario = json.loads(read_text_bounded(answer)).get("scenario")
        except (OSError, ValueError, AttributeError):
            return f"holds an unreadable {kind.answer}"
        if scenario != name:
            return f"holds a {kind.noun} of scenario {scenario!r}, not {name!r}"
        return None
    strange = [p.name for p in target.iterdir() if not _study_entry(p.name, kind)]
    if strange or not (target / TASKS).is_dir():
        return f"is not a {kind.folder} directory" + (
            f" (it holds {strange[0]})" if strange else ""
        )
    return None


def _study_entry(name: str, kind: StudyKind) -> bool:
    """A file the search writes: its tables, answer, marker, resolved configuration, plots and
    report."""
    return name in kind.entries or name.endswith((".png", ".svg", ".html", ".tmp"))


def _lock_name(name: str) -> str:
    """`.<name>.lock`, or a digest of the name where that would be over 255 bytes."""
    lock = f".{name}.lock"
    if len(lock.encode("utf-8", "surrogateescape")) <= 255:
        return lock
    return f".{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.lock"


def _open_lock(lock_path: Path) -> io.FileIO:
    """The lock file, opened without truncating it, without following a link planted at its
    path (a link there would have the lock truncate or create a file elsewhere) and without
    blocking (a FIFO there would wait forever for a reader); anything but a regular file is
    refused, naming the path, and left as it is."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(lock_path, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _not_a_lock(lock_path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_a_lock(lock_path)
        os.set_blocking(fd, True)
        return io.FileIO(fd, "w")
    except BaseException:
        os.close(fd)
        raise


def _not_a_lock(lock_path: Path) -> ScenarioError:
    return ScenarioError(
        "--out",
        None,
        f"{lock_path} (the lock beside --out) is a symbolic link or not a regular file; "
        "remove it or choose another --out",
    )


@contextmanager
def only_writer(target: Path) -> Iterator[None]:
    """Hold a lock beside the sweep directory while writing it: a second sweep into the same
    `--out` is refused at once instead of duplicating the work and failing at the end."""
    lock_path = target.parent / _lock_name(target.name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = _open_lock(lock_path)
    except OSError as exc:
        raise ScenarioError(
            "--out", None, f"cannot write in {target.parent}: {exc.strerror or exc}"
        ) from None
    with handle as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ScenarioError(
                "--out",
                None,
                f"another sweep is writing {target} (or a capacity search, or a run into it); "
                "wait for it or choose another --out",
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock_path.unlink(missing_ok=True)
