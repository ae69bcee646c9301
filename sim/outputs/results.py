"""Result directories: written whole into a temporary sibling, then renamed into place."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from sim.runner import RunResult
from sim.scenario import scenario_document

TABLES = ("requests", "prefetches", "writes", "timeseries")


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


def write_run(result: RunResult, directory: Path) -> None:
    """The run directory of DESIGN 4.3, into `directory` (which must not exist yet)."""
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    (directory / "config.resolved.yaml").write_text(
        yaml.safe_dump(scenario_document(result.scenario), sort_keys=False)
    )
    (directory / "meta.json").write_text(
        json.dumps(meta(result.summary["wall_s"], result.scenario.seed), indent=2) + "\n"
    )
    for name in TABLES:
        result.tables[name].to_parquet(directory / f"{name}.parquet", index=False)


def write_atomically(target: Path, fill: Callable[[Path], None], force: bool = False) -> Path:
    """Build the directory beside `target` and rename it into place only once it is complete."""
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(staging / "out")
        if target.exists():
            if not force:
                raise FileExistsError(f"{target} already exists (use --force to replace it)")
            shutil.rmtree(target)
        os.replace(staging / "out", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
