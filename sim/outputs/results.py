"""A run directory: its summary, resolved configuration (each value with its source), meta and
tables; and a run's storage trace exported for libCacheSim."""

from __future__ import annotations

import json
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.deployment.resolve import leaves
from sim.engine import server
from sim.engine.runner import RunResult
from sim.model.pools import POOL_KINDS
from sim.outputs.files import read_table, replace_file
from sim.results.directories import mark
from sim.results.layout import CONFIG, META, SUMMARY
from sim.results.reading import read_model, with_columns
from sim.scenario.schema import Scenario, scenario_document
from sim.scenario.sizes import annotate_yaml, size_notes

TABLES = ("requests", "prefetches", "writes", "timeseries", "instances")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("hicache-sim", "simpy", "numpy", "pandas", "pyarrow", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def build() -> str:
    """Which simulator ran: the pure-Python package (the reference) or the copy whose model and
    engine are compiled (`bench/compile.py`), which must give the same tables, only faster."""
    return "python" if str(server.__file__).endswith(".py") else "compiled"


def meta(result_wall_s: float, seed: int) -> dict[str, Any]:
    return {
        "versions": versions(),
        "build": build(),
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
    model = read_model(run_dir)
    pools = [name for name in POOL_KINDS if model.get(name)]
    if pool not in pools:
        raise PoolNotInRun(f"pool {pool!r} is not in this run (pools: {', '.join(pools)})")
    trace = with_columns(read_table(trace_path), trace_path, ("pool", "t_s", "key", "size_bytes"))
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
