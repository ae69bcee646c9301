"""Result directories: written whole into a temporary sibling, then renamed into place."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.deployment.resolve import leaves
from sim.model.pools import POOL_KINDS
from sim.outputs.files import read_table, replace_file
from sim.results.layout import CONFIG, META, SUMMARY
from sim.runner import RunResult
from sim.scenario import Scenario, scenario_document
from sim.sizes import annotate_yaml, size_notes

TABLES = ("requests", "prefetches", "writes", "timeseries", "instances")


def default_out(results_root: Path, scenario_name: str, kind: str) -> Path:
    """results/<scenario>/<kind>-<UTC time>[-n]: a new directory for every invocation."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = results_root / scenario_name / f"{kind}-{stamp}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("hicache-sim", "simpy", "numpy", "pandas", "pyarrow", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def meta(result_wall_s: float, seed: int) -> dict[str, Any]:
    return {
        "versions": versions(),
        "seed": seed,
        "wall_s": result_wall_s,
        "command": ["hicache-sim", *sys.argv[1:]],
        "written_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"system": platform.system(), "machine": platform.machine()},
    }


SOURCES_HEADER = """\
# Every value with where it came from: user (the scenario file or --set), default (the schema),
# a profile (sglang ERA, backend NAME, gpu NAME, calibration FILE, preset NAME), or what SGLang
# derives from them (derived: why) and its own switches (adjusted: why). Sizes also say what
# they are in the other units.
"""


def resolved_yaml(scenario: Scenario) -> str:
    """The resolved configuration as YAML, each value followed by where it came from and each
    size by what it is in the other units
    (`kv_pages: 20000  # 1,280,000 tokens, 22.89 GiB (24.58 GB); user`)."""
    doc = scenario_document(scenario)
    sizes = size_notes(doc)
    notes = {
        key: "; ".join(filter(None, (sizes.get(key), scenario.sources[key]))) for key in leaves(doc)
    }
    return SOURCES_HEADER + annotate_yaml(yaml.safe_dump(doc, sort_keys=False), notes)


def write_run(result: RunResult, directory: Path) -> None:
    """A run directory (summary.json, config.resolved.yaml, meta.json, one Parquet file per
    table; docs/metrics.md) written into `directory`, which must not exist yet."""
    directory.mkdir(parents=True)
    mark(directory)
    (directory / SUMMARY).write_text(json.dumps(result.summary, indent=2) + "\n")
    (directory / CONFIG).write_text(resolved_yaml(result.scenario))
    info = meta(result.summary["wall_s"], result.scenario.seed)
    info["sources"] = result.scenario.sources.of
    (directory / META).write_text(json.dumps(info, indent=2) + "\n")
    for name in (*TABLES, "storage_trace"):
        if name in result.tables:
            result.tables[name].to_parquet(directory / f"{name}.parquet", index=False)


class PoolNotInRun(LookupError):
    """`export-trace --pool` names a pool the run's model does not have."""


def export_libcachesim_csv(run_dir: Path, pool: str, out: Path) -> int:
    """Write one pool's storage accesses as a CSV that libCacheSim's CSV reader takes.

    Columns: `timestamp` (integer microseconds of simulated time), `obj_id` (the page or state
    key), `obj_size` (bytes). Returns the number of requests written.
    """
    trace_path = run_dir / "storage_trace.parquet"
    if not trace_path.exists():
        raise FileNotFoundError(f"{trace_path} not found: run with --storage-trace first")
    config = yaml.safe_load((run_dir / CONFIG).read_text())
    pools = [name for name in POOL_KINDS if config["model"].get(name)]
    if pool not in pools:
        raise PoolNotInRun(f"pool {pool!r} is not in this run (pools: {', '.join(pools)})")
    trace = read_table(trace_path)
    rows = trace[trace["pool"] == pool]
    frame = pd.DataFrame(
        {
            "timestamp": (rows["t_s"] * 1e6).round().astype("int64"),
            "obj_id": rows["key"].astype("int64"),
            "obj_size": rows["size_bytes"].astype("int64"),
        }
    )
    replace_file(out, lambda tmp: frame.to_csv(tmp, index=False))
    return len(frame)


MARKER = ".hicache-sim"
"""A file in every result directory this tool writes; `--force` replaces only such a
directory, so it can never delete a user's own folder."""


def mark(directory: Path) -> None:
    """Mark a directory as a result directory of this tool (replaceable with `--force`)."""
    (directory / MARKER).write_text("a result directory written by hicache-sim\n")


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
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent))
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
