"""SimPy processes that wire the model in time: arrivals, prefetch IO, scheduling, backup IO.

One process per concern, named by what it does. Page work is batched: a prefetch advances in
128-page storage batches, a backup in one write per node, a request in one prefill and one
decode step, so the event count grows with requests and batches, never with pages.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.engine.records import PrefetchRecord, Records, RequestRecord, WriteRecord
from sim.heal import RULES, DiscardView
from sim.model.backup import BackupIntent, InflightPages, aux_backup_keys, gate_backup
from sim.model.existence import ExistenceCache
from sim.model.host import HostPool
from sim.model.loops import LoopTracker
from sim.model.prefetch import PrefetchOp, hybrid_check, plan_aux_transfers
from sim.model.radix import Node, RadixTree
from sim.model.storage import STORAGE_BATCH_PAGES, Storage, StoragePool
from sim.scenario import Scenario
from sim.workload import Request, Workload, make_workload

STREAMS = {"workload": 0, "kv": 1, "swa": 2, "mamba": 3, "evict": 4}
"""Fixed stream indices: adding a pool or a knob never shifts another concern's randomness."""

GB = 1e9


def stream(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(STREAMS[name],)))


_simpy_step = simpy.Environment.step


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts processed events (the `events` summary key)."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    def step(self) -> None:
        self.events += 1
        _simpy_step(self)  # cheaper than super() once per event


@dataclass
class Job:
    """A request's life in the server."""

    req: Request
    lock_node: Node
    device_pages: int
    host_pages: int
    op: PrefetchOp | None = None
    prefetch_outcome: str = "none"
    reserved_kv: int = 0
    admitted_s: float | None = None
    first_token_s: float | None = None
    l3_loaded_pages: int = 0
    recomputed_tokens: int = 0
    wake_at: float | None = None
    deadline_s: float | None = None


class Simulation:
    """Builds the model for a scenario and runs it to `duration_s`."""

    def __init__(
        self,
        scenario: Scenario,
        workload: Workload | None = None,
        *,
        storage_trace: bool = False,
        on_progress: Callable[[float], None] | None = None,
    ) -> None:
        self.sc = scenario
        self.on_progress = on_progress
        """Called with the simulated time at every time-series sample (progress bars)."""
        m = scenario.model
        self.page_size = m.page_size
        self.window_pages = m.window_pages
        self.aux_pools = m.aux_pools
        self.buffer_only = scenario.host.mode == "buffer_only"
        self.env = CountingEnvironment()
        self.workload = workload or make_workload(scenario, stream(scenario.seed, "workload"))
        self.tree = RadixTree(
            kv_pages=scenario.device.kv_pages,
            swa_pages=scenario.device.swa_pages,
            mamba_slots=scenario.device.mamba_slots,
            host_cache_pages=None if self.buffer_only else scenario.host.pages,
        )
        self.host = HostPool(scenario.host.pages, cached_pages=lambda: self.tree.host_used)
        self.object_bytes = {
            "kv": m.page_size * m.kv.bytes_per_token,
            "swa": m.page_size * m.swa.bytes_per_token if m.swa else 0,
            "mamba": m.mamba.state_bytes if m.mamba else 0,
        }
        self.storage = Storage(
            {p: self._storage_pool(p) for p in m.pools}, window_pages=self.window_pages
        )
        if storage_trace:
            for pool in self.storage.pools.values():
                pool.access_log = []
        self.existence = ExistenceCache(scenario.existence_cache.entries, enabled=self.buffer_only)
        self.heal_rule = RULES[scenario.heal]
        self.inflight = InflightPages()
        self.inflight_nodes: set[int] = set()
        self.heal_dropped: set[int] = set()
        self.loops = LoopTracker()
        self.records = Records()
        self.waiting: list[Job] = []
        self.running: dict[int, Job] = {}
        self.backlog: simpy.Store = simpy.Store(self.env)
        self.read_channel = simpy.Resource(self.env, capacity=1)
        self.write_channel = simpy.Resource(self.env, capacity=1)
        self._wake = self.env.event()
        self._host_freed = self.env.event()
        self.counters: dict[str, int] = {"hit_query_dropped_beliefs": 0}
        threshold_tokens = max(scenario.prefetch.threshold_tokens, self.page_size)
        self.threshold_pages = -(-threshold_tokens // self.page_size)
        """Spans and hits shorter than this are not prefetched (SGLang: max(threshold, page))."""
        self._ts_interval = scenario.duration_s / 200.0 or scenario.duration_s
        self._cum_discards = 0

    def _storage_pool(self, pool: str) -> StoragePool:
        spec = self.sc.storage_pool(pool)
        size = self.object_bytes[pool]
        cap = None if spec.capacity_gb is None else int(spec.capacity_gb * GB // size)
        return StoragePool(
            pool,
            size,
            cap,
            spec.get_fail_prob,
            spec.put_fail_prob,
            stream(self.sc.seed, pool),
            spec.put_outage_s,
        )

    # ------------------------------------------------------------------ driver

    def start(self) -> Simulation:
        """Register the processes; `run` calls it, tests may then step the environment."""
        env = self.env
        env.process(self.arriving())
        env.process(self.scheduling())
        env.process(self.backing_up())
        env.process(self.sampling())
        evict_rng = stream(self.sc.seed, "evict")
        for pool in self.storage.pools:
            rate = self.sc.storage_pool(pool).evict_rate_per_s
            if rate > 0:
                env.process(self.evicting(self.storage.pools[pool], rate, evict_rng))
        return self

    def finish(self) -> Simulation:
        """Record the requests still waiting or running at the horizon as unfinished."""
        for job in self.waiting:
            self._record_request(job, "unfinished")
        for job in self.running.values():
            self._record_request(job, "unfinished")
        return self

    def run(self) -> Simulation:
        self.start()
        self.env.run(until=self.sc.duration_s)
        return self.finish()

    def poke(self) -> None:
        """Wake the scheduler: something it waits on may have changed."""
        if not self._wake.triggered:
            self._wake.succeed()

    # ------------------------------------------------------------------ arrivals

    def arriving(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for req in self.workload.arrivals():
            if req.arrival_s > self.sc.duration_s:
                return
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.arrive(req)

    def follow_up(self, req: Request) -> Generator[simpy.Event, Any, None]:
        nxt = self.workload.follow_up(req, self.env.now)
        if nxt is None or nxt.arrival_s > self.sc.duration_s:
            return
        yield self.env.timeout(max(0.0, nxt.arrival_s - self.env.now))
        self.arrive(nxt)

    def arrive(self, req: Request) -> None:
        now = self.env.now
        prompt = req.pages[: req.prompt_pages]
        match = self.tree.match(prompt)
        job = Job(req, match.host_node, match.device_pages, match.host_pages)
        if len(req.pages) + 1 > self.tree.kv_capacity:
            self._record_request(job, "rejected")
            return
        self.tree.lock(match.host_node)
        self.tree.touch(match.host_node, now)
        span = tuple(prompt[match.host_pages :])
        if len(span) >= self.threshold_pages:
            job.op = PrefetchOp(req.rid, match.host_pages, span, now)
            self.env.process(self.prefetching(job, job.op))
        self.waiting.append(job)
        self.poke()

    # ------------------------------------------------------------------ prefetch IO

    def prefetching(self, job: Job, op: PrefetchOp) -> Generator[simpy.Event, Any, None]:
        env, sc = self.env, self.sc
        yield env.timeout(Storage.batches(len(op.span)) * sc.storage.exists_latency_ms / 1000.0)
        if op.terminated:
            self._finish_prefetch(job, op, "cancelled")
            return
        hit = self.storage.hit_query(sc.storage.hit_query, op.span)
        if self.buffer_only:
            dropped = self.existence.invalidate_beyond(op.span, hit)
            self.counters["hit_query_dropped_beliefs"] += len(dropped)
            self.heal_dropped.update(dropped)
        if hit < self.threshold_pages:
            self._finish_prefetch(job, op, "revoked")
            return
        if not self.host.alloc_prefetch(hit):
            self._finish_prefetch(job, op, "declined")
            return
        op.hit_pages = hit
        op.aux = plan_aux_transfers(self.aux_pools, op, self.window_pages)
        job.deadline_s = op.issued_s + (
            sc.prefetch.timeout_base_s
            + sc.prefetch.timeout_per_ki_token_s * hit * self.page_size / 1024.0
        )
        kv = self.storage.pools["kv"]
        span = op.hit_span
        for lo in range(0, hit, STORAGE_BATCH_PAGES):
            batch = span[lo : lo + STORAGE_BATCH_PAGES]
            yield from self._transfer(
                self.read_channel, len(batch) * kv.object_bytes, self._read_bps
            )
            if op.terminated:
                break
            served = kv.get(batch, env.now)
            op.completed_pages += served
            op.kv_read_pages += served
            if served < len(batch):
                break
        if op.completed_pages == hit and not op.terminated:
            for transfer in op.aux:
                if transfer.keys is None or op.terminated:
                    continue
                pool = self.storage.pools[transfer.pool]
                size = len(transfer.keys) * pool.object_bytes
                yield from self._transfer(self.read_channel, size, self._read_bps)
                if op.terminated:
                    break
                transfer.hit_pages = pool.get(transfer.keys, env.now)
                op.aux_read_bytes += transfer.hit_pages * pool.object_bytes
        op.done = True
        self.poke()

    def _finish_prefetch(self, job: Job, op: PrefetchOp, outcome: str) -> None:
        op.done = True
        job.prefetch_outcome = outcome
        self.records.prefetches.append(self._prefetch_record(job, op, outcome, ()))
        self.poke()

    @property
    def _read_bps(self) -> float:
        return self.sc.storage.read_gbps * GB

    def _transfer(
        self, channel: simpy.Resource, nbytes: float, bps: float
    ) -> Generator[simpy.Event, Any, None]:
        with channel.request() as slot:
            yield slot
            yield self.env.timeout(nbytes / bps)

    # ------------------------------------------------------------------ scheduler

    def scheduling(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            job = self._next_admissible()
            if job is None:
                self._wake = env.event()
                yield self._wake
                continue
            yield from self.prefill(job)

    def _next_admissible(self) -> Job | None:
        """First waiting job whose prefetch may stop now and whose memory can be reserved."""
        now = self.env.now
        for i, job in enumerate(self.waiting):
            if not self._prefetch_settled(job, now):
                continue
            need = (
                len(job.req.pages)
                - self.tree.match(job.req.pages[: job.req.prompt_pages]).device_pages
            )
            if not self.tree.reserve(need, 1):
                return None
            job.reserved_kv = need
            del self.waiting[i]
            return job
        return None

    def _prefetch_settled(self, job: Job, now: float) -> bool:
        """The termination policy, applied when the scheduler wants to admit.

        SGLang: check_prefetch_progress; a prefetch that may not stop yet keeps the request waiting.
        """
        op = job.op
        if op is None or op.done:
            return True
        policy = self.sc.prefetch.policy
        if policy == "best_effort":
            op.terminated = True
            return True
        if policy == "wait_complete":
            return False
        deadline = (
            job.deadline_s
            if job.deadline_s is not None
            else op.issued_s + (self.sc.prefetch.timeout_base_s)
        )
        if now >= deadline:
            op.terminated = True
            return True
        if job.wake_at != deadline:
            job.wake_at = deadline
            self.env.timeout(deadline - now).callbacks.append(lambda _e: self.poke())
        return False

    def prefill(self, job: Job) -> Generator[simpy.Event, Any, None]:
        env, req, tree = self.env, job.req, self.tree
        now = env.now
        job.admitted_s = now
        self.running[req.rid] = job
        prompt = req.pages[: req.prompt_pages]
        loaded_end = self._resolve_prefetch(job)
        match = tree.match(prompt)
        covered = max(match.host_pages, loaded_end, match.device_pages)
        loaded_pages = covered - match.device_pages
        self._insert(
            job,
            prompt[:covered],
            backed_up=loaded_end >= covered > match.device_pages,
        )
        job.recomputed_tokens = req.prompt_tokens - covered * self.page_size
        load_bytes = loaded_pages * self._page_bytes()
        prefill_s = job.recomputed_tokens / self.sc.compute.prefill_tokens_per_s + load_bytes / (
            self.sc.host.pcie_gbps * GB
        )
        yield env.timeout(prefill_s)
        job.first_token_s = env.now
        self._insert(job, prompt, backed_up=False, backup_path=self.buffer_only)
        env.process(self.decoding(job))

    def _page_bytes(self) -> int:
        return self.object_bytes["kv"] + self.object_bytes["swa"]

    def _insert(
        self, job: Job, pages: list[int], *, backed_up: bool, backup_path: bool = False
    ) -> None:
        """Insert on the device against the job's reservation, then queue backups.

        New nodes are always offered for backup. With `backup_path` (the insert after a prefill
        in `buffer_only` mode) every node on the request's path is offered, parents first: such a
        server keeps no host copies, so the tree cannot tell whether storage still has a node and
        relies on the existence cache's FULL check to skip it. That is what lets a heal rewrite a
        node the request only matched, and lets its new children pass the parent-cover gate.
        """
        tree = self.tree
        before = tree.kv_used
        node, new_nodes = tree.insert(
            pages, self.env.now, backed_up=backed_up, host_copy=not self.buffer_only
        )
        grown = tree.kv_used - before
        take = min(grown, job.reserved_kv)
        job.reserved_kv -= take
        tree.kv_reserved -= take
        tree.lock(node)
        tree.unlock(job.lock_node)
        job.lock_node = node
        offered = self._path(node) if backup_path else new_nodes
        for candidate in offered:
            if backup_path or not candidate.backed_up:
                self.enqueue_backup(candidate)

    def _path(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to `node`, parents first."""
        path: list[Node] = []
        while node is not self.tree.root:
            path.append(node)
            node = node.parent  # type: ignore[assignment]
        path.reverse()
        return path

    def _resolve_prefetch(self, job: Job) -> int:
        """Apply the hybrid check to a settled prefetch; returns the loaded endpoint (pages)."""
        op = job.op
        if op is None or not op.issued:
            return 0
        now = self.env.now
        op.terminated = op.terminated or not op.done
        span = op.hit_span
        self.existence.add(span[: op.completed_pages])
        self.host.free_prefetch(op.hit_pages)
        self._host_freed_poke()
        aux_pools = bool(op.aux)
        if hybrid_check(op) or (not aux_pools and op.completed_pages > 0):
            loaded = op.completed_pages
            job.l3_loaded_pages = loaded
            job.prefetch_outcome = "success"
            self.loops.on_success(span[loaded - 1], now)
            self.records.prefetches.append(self._prefetch_record(job, op, "success", ()))
            return op.start_page + loaded
        view = DiscardView(op, self.page_size, self.storage, self.window_pages)
        to_drop = self.heal_rule(view)
        dropped = self.existence.invalidate(to_drop)
        self.heal_dropped.update(dropped)
        self.loops.on_discard(span[-1], now)
        job.prefetch_outcome = "discarded"
        if now >= self.sc.warmup_s:
            self._cum_discards += 1
        self.records.prefetches.append(self._prefetch_record(job, op, "discarded", dropped))
        return 0

    def _prefetch_record(
        self, job: Job, op: PrefetchOp, outcome: str, dropped: Any
    ) -> PrefetchRecord:
        aux = {t.pool: t for t in op.aux}
        swa, mamba = aux.get("swa"), aux.get("mamba")
        read_bytes = op.kv_read_pages * self.object_bytes["kv"] + op.aux_read_bytes
        return PrefetchRecord(
            rid=job.req.rid,
            issued_s=op.issued_s,
            resolved_s=self.env.now,
            outcome=outcome,
            start_page=op.start_page,
            span_pages=len(op.span),
            hit_pages=op.hit_pages,
            completed_pages=op.completed_pages,
            terminated=op.terminated,
            endpoint_key=op.hit_span[-1] if op.hit_pages else -1,
            swa_keys=None if swa is None or swa.keys is None else list(swa.keys),
            swa_hit_pages=swa.hit_pages if swa else 0,
            mamba_keys=None if mamba is None or mamba.keys is None else list(mamba.keys),
            mamba_hit_pages=mamba.hit_pages if mamba else 0,
            dropped_beliefs=len(dropped),
            read_bytes=read_bytes,
        )

    # ------------------------------------------------------------------ decode and finish

    def decoding(self, job: Job) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(job.req.output_tokens * self.sc.compute.decode_ms_per_token / 1000.0)
        self._insert(job, job.req.pages, backed_up=False)
        self.tree.unlock(job.lock_node)
        self.tree.release(job.reserved_kv, 1)
        job.reserved_kv = 0
        del self.running[job.req.rid]
        self._record_request(job, "finished")
        self.env.process(self.follow_up(job.req))
        self.poke()

    def _record_request(self, job: Job, outcome: str) -> None:
        req = job.req
        ps = self.page_size
        op = job.op
        self.records.requests.append(
            RequestRecord(
                rid=req.rid,
                arrival_s=req.arrival_s,
                prompt_tokens=req.prompt_tokens,
                output_tokens=req.output_tokens,
                device_hit_tokens=job.device_pages * ps,
                host_hit_tokens=(job.host_pages - job.device_pages) * ps,
                l3_hit_tokens=(op.hit_pages if op is not None else 0) * ps,
                l3_loaded_tokens=job.l3_loaded_pages * ps,
                recomputed_tokens=job.recomputed_tokens,
                prefetch=job.prefetch_outcome,
                admitted_s=job.admitted_s,
                first_token_s=job.first_token_s,
                finish_s=self.env.now if outcome == "finished" else None,
                outcome=outcome,
                session=req.session,
                turn=req.turn,
            )
        )

    # ------------------------------------------------------------------ backup IO

    def enqueue_backup(self, node: Node) -> None:
        """Gate a node and queue its write (SGLang: enqueue_backup_intent)."""
        if node.nid in self.inflight_nodes:
            return
        node.backed_up = True
        pages = tuple(node.pages)
        now = self.env.now
        if self.buffer_only:
            verdict = gate_backup(self.existence, node, self.inflight, self.tree.root)
            if verdict != "write":
                self.records.writes.append(WriteRecord.skipped(now, node.nid, len(pages), verdict))
                return
        self.inflight.add(pages)
        self.inflight_nodes.add(node.nid)
        self.backlog.put(BackupIntent(node, pages, now))

    def backing_up(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            intent: BackupIntent = yield self.backlog.get()
            node, pages = intent.node, intent.pages
            if self.buffer_only and not (node.alive and node.on_device):
                self.inflight.remove(pages)
                self.inflight_nodes.discard(node.nid)
                self.records.writes.append(
                    WriteRecord.skipped(env.now, node.nid, len(pages), "stale")
                )
                continue
            aux_keys = aux_backup_keys(node, pages, self.aux_pools, self.window_pages)
            nbytes = len(pages) * self.object_bytes["kv"] + sum(
                len(k) * self.object_bytes[p] for p, k in aux_keys.items()
            )
            staged = 0
            if self.buffer_only:
                staged = min(len(pages), self.host.capacity_pages)
                while not self.host.alloc_backup(staged):
                    self._host_freed = env.event()
                    yield self._host_freed
                yield env.timeout(nbytes / (self.sc.host.pcie_gbps * GB))
            yield from self._transfer(self.write_channel, nbytes, self.sc.storage.write_gbps * GB)
            now = env.now
            kv_ok = self.storage.pools["kv"].put(pages, now)
            aux_ok = {p: self.storage.pools[p].put(k, now) for p, k in aux_keys.items()}
            self.existence.add(pages)
            self.inflight.remove(pages)
            self.inflight_nodes.discard(node.nid)
            rewritten = self.heal_dropped.intersection(pages)
            self.heal_dropped.difference_update(rewritten)
            if staged:
                self.host.free_backup(staged)
                self._host_freed_poke()
            self.records.writes.append(
                WriteRecord.written(
                    now, node.nid, pages, kv_ok, aux_keys, aux_ok, len(rewritten), nbytes
                )
            )

    def _host_freed_poke(self) -> None:
        if not self._host_freed.triggered:
            self._host_freed.succeed()

    # ------------------------------------------------------------------ background

    def evicting(
        self, pool: StoragePool, rate_per_s: float, rng: np.random.Generator
    ) -> Generator[simpy.Event, Any, None]:
        while True:
            yield self.env.timeout(float(rng.exponential(1.0 / rate_per_s)))
            pool.evict_random(rng)

    def sampling(self) -> Generator[simpy.Event, Any, None]:
        while True:
            self.records.timeseries.append(
                (
                    self.env.now,
                    self._cum_discards,
                    len(self.existence),
                    self.existence.count_absent_recent(self.storage.pools["kv"].keys()),
                    len(self.heal_dropped),
                    self.tree.kv_used,
                    self.tree.swa_used,
                    self.host.used_pages,
                    *(
                        self.storage.pools[p].stored_bytes
                        for p in ("kv", "swa", "mamba")
                        if p in self.storage.pools
                    ),
                )
            )
            if self.on_progress is not None:
                self.on_progress(self.env.now)
            yield self.env.timeout(self._ts_interval)
