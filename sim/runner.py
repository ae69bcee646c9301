"""`run(scenario) -> RunResult`: a pure function of the scenario; writing files is separate."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.engine.records import TIMESERIES_COLUMNS, PrefetchRecord, RequestRecord, WriteRecord
from sim.engine.simulation import Simulation
from sim.model.loops import Loop
from sim.outputs.metrics import summarize
from sim.scenario import Scenario
from sim.workload import Workload


@dataclass
class RunResult:
    scenario: Scenario
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    loops: list[Loop]


def _frame(rows: list[Any], columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame.from_records(rows, columns=list(columns))


def run(scenario: Scenario, workload: Workload | None = None) -> RunResult:
    """Simulate `scenario` to its horizon and summarise it (warm-up excluded)."""
    started = time.perf_counter()
    sim = Simulation(scenario, workload).run()
    wall_s = time.perf_counter() - started
    rec = sim.records
    pools = tuple(f"storage_{p}_bytes" for p in ("kv", "swa", "mamba") if p in sim.storage.pools)
    tables = {
        "requests": _frame(rec.requests, RequestRecord._fields)
        .sort_values("rid", kind="stable")
        .reset_index(drop=True),
        "prefetches": _frame(rec.prefetches, PrefetchRecord._fields),
        "writes": _frame(rec.writes, WriteRecord._fields),
        "timeseries": _frame(rec.timeseries, TIMESERIES_COLUMNS + pools),
    }
    loops = sim.loops.all_loops()
    summary = summarize(
        tables,
        loops,
        warmup_s=scenario.warmup_s,
        events=sim.env.events,
        wall_s=wall_s,
        counters=sim.counters,
    )
    return RunResult(scenario, summary, tables, loops)
