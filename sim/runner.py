"""`run(scenario) -> RunResult`: a pure function of the scenario; writing files is separate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.engine.simulation import Simulation
from sim.model.loops import Loop
from sim.outputs.metrics import summarize
from sim.scenario import Scenario
from sim.workload import Workload


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run; the message says how far the simulation got."""


@dataclass
class RunResult:
    scenario: Scenario
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    loops: list[Loop]


STORAGE_TRACE_COLUMNS = ("t_s", "pool", "op", "key", "size_bytes", "hit")


def run(
    scenario: Scenario,
    workload: Workload | None = None,
    *,
    storage_trace: bool = False,
    on_progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Simulate `scenario` to its horizon and summarise it (warm-up excluded).

    With `storage_trace`, every storage access that touches a pool's LRU is kept in the table
    `storage_trace` (for `export-trace` and the libCacheSim cross-check). `on_progress` is called
    with the simulated time as the run advances (the CLI draws its progress bar with it).
    """
    started = time.perf_counter()
    sim = Simulation(scenario, workload, storage_trace=storage_trace, on_progress=on_progress)
    try:
        sim.run()
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"{scenario.name} interrupted at simulated time {sim.env.now:.1f} s "
            f"of {scenario.duration_s:g} s"
        ) from None
    wall_s = time.perf_counter() - started
    tables = sim.records.tables()
    if storage_trace:
        tables["storage_trace"] = _storage_trace(sim)
    loops = sim.model.loops.all_loops()
    summary = summarize(
        tables,
        loops,
        aux_pools=[pool.kind for pool in sim.storage.aux],
        page_size=scenario.model.page_size,
        warmup_s=scenario.warmup_s,
        events=sim.env.events,
        wall_s=wall_s,
        counters={"hit_query_dropped_beliefs": sim.prefetcher.hit_query_dropped_beliefs},
    )
    summary.update(sim.storage.counters())
    summary.update(sim.tree.counters())
    return RunResult(scenario, summary, tables, loops)


def _storage_trace(sim: Simulation) -> pd.DataFrame:
    """All pools' access logs merged in time order (stable: pool order breaks ties)."""
    frames = [
        pd.DataFrame.from_records(
            pool.access_log or [], columns=["t_s", "op", "key", "hit"]
        ).assign(pool=name, size_bytes=pool.object_bytes)
        for name, pool in sim.storage.pools.items()
    ]
    merged = pd.concat(frames, ignore_index=True).sort_values("t_s", kind="stable")
    return merged[list(STORAGE_TRACE_COLUMNS)].reset_index(drop=True)
