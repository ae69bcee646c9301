"""`run(scenario) -> RunResult`: a pure function of the scenario; writing files is separate."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.engine.metrics import cluster_summary, in_key_order, summarize
from sim.engine.records import Records, sorted_by
from sim.engine.server import Server
from sim.engine.simulation import Simulation
from sim.model.build import build_cluster
from sim.model.loops import Loop
from sim.scenario.schema import Scenario
from sim.workload.kinds import Workload


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run; the message says how far the simulation got."""


@dataclass
class RunResult:
    scenario: Scenario
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    loops: list[Loop]


STORAGE_TRACE_COLUMNS = ("instance", "t_s", "pool", "op", "key", "size_bytes", "hit")


COLLECT_AFTER_REQUESTS = 100_000
"""A run of at least this many requests frees its model with a full collection before building
its tables (a few hundred MiB at 1M requests); a shorter one, a sweep's point say, would spend
a few per cent of its time on it for a few MiB."""


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
    cluster = build_cluster(scenario, workload, storage_trace=storage_trace)
    sim = Simulation(cluster, on_progress=on_progress)
    try:
        with _collecting_rarely():
            sim.run()
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"{scenario.name} interrupted at simulated time {sim.env.now:.1f} s "
            f"of {scenario.duration_s:g} s"
        ) from None
    wall_s = time.perf_counter() - started
    events = sim.env.events
    storage_counters = sim.storage.counters()
    servers = [_ServerResult.of(server) for server in sim.servers]
    loops = _cluster_loops(sim)
    aux_pools = [pool.kind for pool in sim.storage.aux]
    trace = _storage_trace(sim) if storage_trace else None
    records = [server.records for server in sim.servers]
    # The model (trees, pools, beliefs) is released before the tables are built, whose peak
    # is the run's: nothing below reads it. Its trees are cycles, so only a full collection
    # frees them: worth its time (a second at 1M requests) for a long run only.
    del sim, cluster
    if sum(len(r.requests) for r in records) >= COLLECT_AFTER_REQUESTS:
        gc.collect()
    tables = _cluster_tables(records)
    del records
    if trace is not None:
        tables["storage_trace"] = trace
    page_size = scenario.model.page_size
    summary = summarize(
        tables,
        loops,
        aux_pools=aux_pools,
        page_size=page_size,
        warmup_s=scenario.warmup_s,
        events=events,
        wall_s=wall_s,
        window_s=scenario.duration_s - scenario.warmup_s,
        gpus=scenario.server.tp_size * len(servers),
    )
    summary.update(storage_counters)
    summary.update(_summed(server.counters for server in servers))
    tables["instances"] = _instance_summaries(servers, tables, aux_pools, scenario)
    summary.update(cluster_summary(tables["instances"]))
    return RunResult(scenario, in_key_order(summary), tables, loops)


@dataclass
class _ServerResult:
    """What the summary needs of a server once its model is released."""

    instance: int
    loops: list[Loop]
    counters: dict[str, int]

    @classmethod
    def of(cls, server: Server) -> _ServerResult:
        return cls(server.instance, server.model.loops.all_loops(), server.counters())


GC_THRESHOLDS = (50_000, 20, 100)
"""The cycle collector's thresholds while a simulation runs (Python's default: 700, 10, 10)."""


@contextmanager
def _collecting_rarely() -> Iterator[None]:
    """Run the cycle collector rarely while simulating.

    A run allocates millions of short-lived objects (events, tuples, rows) beside a few large
    long-lived structures (trees, heaps, pools, beliefs); at the default thresholds the collector
    ran about 1,900 young and 15 full collections on 100,000 requests, each full one walking all
    of them: about 7 % of the run. The collector only frees unreachable cycles, so nothing
    simulated depends on when it runs; the young threshold bounds the garbage it lets wait.
    """
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _cluster_tables(records: list[Records]) -> dict[str, pd.DataFrame]:
    """Every server's tables stacked, with the server's `instance` first: requests by id,
    the event tables in time order (stable, so one server's rows keep their order)."""
    per_server = [one.tables() for one in records]
    tables: dict[str, pd.DataFrame] = {}
    for name, time_column in TABLE_TIMES.items():
        # Taken out of the servers' tables, so each server's frame is freed once stacked.
        frames = [t.pop(name) for t in per_server]
        for instance, frame in enumerate(frames):
            frame.insert(0, "instance", instance)
        if len(frames) == 1:
            tables[name] = frames[0]
            continue
        table = pd.concat(frames, ignore_index=True)
        del frames
        tables[name] = sorted_by(table, time_column)
    return tables


TABLE_TIMES = {
    "requests": "rid",
    "prefetches": "resolved_s",
    "writes": "t_s",
    "timeseries": "t_s",
    "decode_gaps": "t_s",
}
"""Each record table and the column a cluster's stacked table is ordered by."""


def _cluster_loops(sim: Simulation) -> list[Loop]:
    loops = [loop for server in sim.servers for loop in server.model.loops.all_loops()]
    return sorted(loops, key=lambda lp: lp.first_discard_s)


def _summed(counters: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counters:
        for key, value in one.items():
            total[key] = total.get(key, 0) + value
    return total


def _instance_summaries(
    servers: list[_ServerResult],
    tables: dict[str, pd.DataFrame],
    aux_pools: list[Any],
    scenario: Scenario,
) -> pd.DataFrame:
    """One summary row per server: the summary keys computed on its own rows and loops (the
    storage counters, which belong to the shared backend, and the run's cost are left out)."""
    rows = []
    alone = len(servers) == 1
    for server in servers:
        # A lone server's rows are all the rows: no filtered copy of every table.
        own = (
            tables if alone else {n: t[t["instance"] == server.instance] for n, t in tables.items()}
        )
        row = summarize(
            own,
            server.loops,
            aux_pools=aux_pools,
            page_size=scenario.model.page_size,
            warmup_s=scenario.warmup_s,
            events=0,
            wall_s=0.0,
            window_s=scenario.duration_s - scenario.warmup_s,
            gpus=scenario.server.tp_size,
        )
        row.update(server.counters)
        for key in ("events", "wall_s"):
            del row[key]
        rows.append({"instance": server.instance, **in_key_order(row)})
    return pd.DataFrame(rows)


def _storage_trace(sim: Simulation) -> pd.DataFrame:
    """All pools' access logs merged in time order (stable: pool order breaks ties)."""
    frames = [
        pd.DataFrame.from_records(
            pool.access_log or [], columns=["t_s", "op", "key", "hit", "instance"]
        ).assign(pool=name, size_bytes=pool.object_bytes)
        for name, pool in sim.storage.pools.items()
    ]
    merged = pd.concat(frames, ignore_index=True).sort_values("t_s", kind="stable")
    return merged[list(STORAGE_TRACE_COLUMNS)].reset_index(drop=True)
