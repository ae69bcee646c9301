"""Replays a case through the simulator and records what real.py records.

Each step is a request arriving 10 s after the previous one, routed to its instance by a
scripted router, on a cluster whose servers share one storage backend (the file backend of the
case's release, `buffer_only` host mode, prefetch threshold one page raised to the release's
floor, `wait_complete`; FULL+SWA, FULL+Mamba for a Mamba case, MLA KV and the indexer sidecar
for a DSA case). A page
of a segment is a chained page key, so sequences that share segments share keys. Faults act on
the simulator's storage pools during the step they name: an object deleted before the step,
deleted right after the step's hit query (and its heal), a read that fails at that object, a
write of that object that fails. The records are read from the run's tables and from
instrumented storage pools; the beliefs per pool are read from the servers' existence caches
after each step (the run is repeated for each prefix of the steps, which is cheap at this size).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from sim.engine.simulation import Simulation
from sim.model.build import build_cluster
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.model.object_store import StoragePool
from sim.scenario.loading import build_scenario
from sim.workload.kinds import Request
from tests.real_sglang import dsa
from tests.real_sglang.cases import POOLS

GAP_S = 10.0
"""Seconds between steps: every read and write of a step settles long before the next."""


def scenario_doc(case: dict[str, Any], release: str, instances: int) -> dict[str, Any]:
    page = case["page_size"]
    model: dict[str, Any] = {"page_size": page, "kv": {"bytes_per_token": 1024}}
    pools: dict[str, Any] = {"kv": {}}
    device: dict[str, Any] = {"kv_pages": case.get("device_tokens", 1024) // page}
    if case.get("window_tokens"):
        model["swa"] = {"window_tokens": case["window_tokens"], "bytes_per_token": 512}
        pools["swa"] = {}
        device["swa_pages"] = device["kv_pages"]
    if case.get("mamba"):
        model["mamba"] = {"state_bytes": 65536}
        pools["mamba"] = {}
        device["mamba_slots"] = 60
    if case.get("dsa"):
        model["kv"] = {"bytes_per_token": dsa.KV_BYTES_PER_TOKEN, "replicated": True}
        model["indexer"] = {"bytes_per_token": dsa.INDEXER_BYTES_PER_TOKEN}
        pools["indexer"] = {}
    doc: dict[str, Any] = {
        "name": re.sub(r"[^A-Za-z0-9_.-]+", "-", case["name"]).strip("-"),
        "seed": 1,
        "duration_s": GAP_S * (len(case["steps"]) + 1),
        "warmup_s": 0,
        "server": {"sglang": release},
        "model": model,
        "device": device,
        "host": {"mode": "buffer_only", "pages": 4 * device["kv_pages"]},
        "storage": {"backend": "file", "pools": pools},
        "prefetch": {"policy": "wait_complete", "threshold_tokens": page},
        "cluster": {"instances": instances, "router": {"policy": "round_robin"}},
        "workload": {"kind": "shared_prefix", "prefixes": 1, "prefix_tokens": page, "requests": 1},
    }
    if case.get("existence_entries"):
        doc["existence_cache"] = {"entries": case["existence_entries"]}
    doc.update(case.get("sim", {}))
    return doc


class Steps:
    """The case's requests, one per step, as chained page keys."""

    def __init__(self, case: dict[str, Any], upto: int) -> None:
        self.page = case["page_size"]
        chains = ChainInterner()
        self.keys: list[list[int]] = []
        for step in case["steps"]:
            items = [(name, j) for name, pages in step["seq"] for j in range(pages)]
            self.keys.append(chains.extend(ROOT_KEY, items))
        self.upto = upto

    def arrivals(self) -> Iterator[Request]:
        for i, keys in enumerate(self.keys[: self.upto]):
            n = len(keys)
            yield Request(i, GAP_S * i + 1.0, n * self.page + 1, 1, list(keys), n)

    def follow_up(self, request: Request, finish_s: float) -> Request | None:
        return None


class Scripted:
    """Routes request `rid` to its step's instance."""

    def __init__(self, targets: Sequence[int]) -> None:
        self.targets = targets

    def route(self, req: Request, servers: Sequence[Any], now_s: float) -> int:
        return self.targets[req.rid]


class _Storage:
    """Wraps the shared storage pools: records puts per step and plays the case's faults."""

    def __init__(self, sim: Simulation, case: dict[str, Any], steps: Steps) -> None:
        self.sim, self.case, self.steps = sim, case, steps
        self.puts: dict[int, list[tuple[str, int, str]]] = {}
        storage = sim.storage
        for name, pool in storage.pools.items():
            self._wrap_put(name, pool)
            self._wrap_get(name, pool)
        for server in sim.servers:
            self._wrap_query(server.prefetcher)
        for fault in case.get("faults", []):
            if fault["kind"] == "delete":
                sim.env.process(self._delete_at(fault))

    def step_at(self, now_s: float) -> int:
        return int((now_s - 1.0) // GAP_S) if now_s >= 1.0 else -1

    def _key(self, fault: dict[str, Any]) -> int:
        return self.steps.keys[fault["step"]][fault["page"]]

    def _faults(self, kind: str, name: str, now_s: float) -> list[int]:
        step = self.step_at(now_s)
        return [
            self._key(f)
            for f in self.case.get("faults", [])
            if f["kind"] == kind and f["pool"] == name and f["step"] == step
        ]

    def _remove(self, name: str, key: int) -> None:
        pool = self.sim.storage.pools[name]
        pool._objects.pop(key, None)

    def _delete_at(self, fault: dict[str, Any]) -> Iterator[Any]:
        yield self.sim.env.timeout(GAP_S * fault["step"] + 0.5)
        self._remove(fault["pool"], self._key(fault))

    def _wrap_put(self, name: str, pool: StoragePool) -> None:
        original = pool.put

        def put(keys: Sequence[int], now_s: float, client: int = 0) -> list[bool]:
            failing = set(self._faults("write_fail", name, now_s))
            stored = [key in pool for key in keys]
            done = original(keys, now_s, client)
            done = list(done)
            for i, key in enumerate(keys):
                if key in failing and not stored[i]:
                    self._remove(name, key)
                    done[i] = False
                verdict = "skip" if stored[i] else ("ok" if done[i] else "fail")
                self.puts.setdefault(self.step_at(now_s), []).append((name, key, verdict))
            return done

        pool.put = put  # type: ignore[method-assign]

    def _wrap_get(self, name: str, pool: StoragePool) -> None:
        original = pool.get

        def get(keys: Sequence[int], now_s: float = 0.0, client: int = 0) -> int:
            failing = self._faults("read_fail", name, now_s)
            served = original(keys, now_s, client)
            for key in failing:
                if key in keys[:served]:
                    served = list(keys).index(key)  # read back nothing, as a missing object
            return served

        pool.get = get  # type: ignore[method-assign]

    def _wrap_query(self, prefetcher: Any) -> None:
        """Records each hit query's answer; a `vanish` fault removes its object once the query
        step is over, its heal included (SGLang heals from the answer it got, so the object is
        gone only for the reads)."""
        hit_query, query = prefetcher.hit_query, prefetcher.query
        storage = self.sim.storage
        self.queries: dict[int, dict[str, Any]] = getattr(self, "queries", {})

        def answered(store: Any, span: Sequence[int], now_s: float) -> int:
            hit = hit_query(store, span, now_s)
            self.queries[self.step_at(now_s)] = {
                "pages": int(hit),
                "pools": {k: int(v) for k, v in storage.boundaries(span, now_s).items() if v},
            }
            return hit

        def queried(op: Any, now_s: float, **kwargs: Any) -> Any:
            outcome = query(op, now_s, **kwargs)
            for name in storage.pools:
                for key in self._faults("vanish", name, now_s):
                    self._remove(name, key)
            return outcome

        prefetcher.hit_query = answered
        prefetcher.query = queried


def _instances(case: dict[str, Any]) -> list[int]:
    names: dict[str, int] = {}
    return [names.setdefault(s["instance"], len(names)) for s in case["steps"]]


def run_case(case: dict[str, Any], release: str) -> list[dict[str, Any]]:
    """The per-step records of `case` on the simulator configured as `release`."""
    targets = _instances(case)
    instances = max(targets) + 1
    scenario = build_scenario(scenario_doc(case, release, instances), case["name"])
    records = []
    for upto in range(1, len(case["steps"]) + 1):
        steps = Steps(case, upto)
        cluster = build_cluster(scenario, steps)
        cluster.router = Scripted(targets)
        sim = Simulation(cluster)
        storage = _Storage(sim, case, steps)
        sim.run()
        records.append(_record(case, sim, storage, steps, upto - 1, targets[upto - 1]))
    return records


def _record(
    case: dict[str, Any], sim: Simulation, storage: _Storage, steps: Steps, rid: int, inst: int
) -> dict[str, Any]:
    page = case["page_size"]
    server = sim.servers[inst]
    requests = server.records.requests
    row = next(r for r in _rows(requests) if r.rid == rid)
    prefetches = [p for p in _rows(server.records.prefetches) if p.rid == rid]
    keys = steps.keys[rid]
    record: dict[str, Any] = {
        "device_tokens": min(int(row.device_hit_tokens), len(keys) * page),
        "query": storage.queries.get(rid),
        "outcome": "miss",
        "loaded_tokens": int(row.l3_loaded_tokens),
    }
    if record["device_tokens"] >= len(keys) * page:
        record["outcome"] = "device"
    issued = [p for p in prefetches if p.outcome in ("success", "discarded")]
    if issued:
        last = issued[-1]
        record["outcome"] = str(last.outcome)
        record["completed_tokens"] = int(last.completed_pages) * page
        aux = {}
        for pool in sim.storage.tail_keyed:  # a sidecar's pages count in completed_tokens
            aux[pool.name] = int(getattr(last, f"{pool.name}_hit_pages"))
        record["aux_hit_pages"] = aux
    index = {key: i for i, key in enumerate(keys)}
    puts = storage.puts.get(rid, [])
    record["written"] = _pages(puts, index, "ok")
    record["skipped"] = _pages(puts, index, "skip")
    beliefs = {"kv": sorted(index[k] for k in keys if k in server.model.existence)}
    for name, cache in server.model.write_path.aux_beliefs.items():
        beliefs[name] = sorted(index[k] for k in keys if k in cache)
    record["beliefs"] = beliefs
    return record


def _pages(
    puts: list[tuple[str, int, str]], index: dict[int, int], verdict: str
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {pool: [] for pool in POOLS}
    for name, key, seen in puts:
        if seen == verdict and key in index:
            out[name].append(index[key])
    return {name: sorted(pages) for name, pages in out.items()}


def _rows(table: Any) -> list[Any]:
    """The rows appended to a record table so far (named tuples)."""
    frame = table.drain()
    return list(frame.itertuples(index=False))
