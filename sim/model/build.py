"""Model assembly: a scenario becomes one server's plain model objects, units converted once.

Sizes, bandwidths and latencies are turned into pages, objects, bytes per second and seconds
here, so the engine's processes read nothing of the scenario but its horizon, warm-up and
workload: they ask `Timing` and `Storage` how long something takes and the model objects what
happens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.cluster.signals import Router
from sim.core.units import GB
from sim.heal import RULES, DiscardView
from sim.model.anchors import AnchorPins
from sim.model.backup import StagedWrite, WritePath
from sim.model.components import AuxDevice
from sim.model.existence import ExistenceCache
from sim.model.faults import FaultStreams
from sim.model.heals import PoolDrops
from sim.model.host import (
    CACHE_PREFETCH_CAPACITY_FRACTION,
    LOAD_POOL_USAGE_FRACTION,
    AuxStaging,
    HostPool,
)
from sim.model.loops import LoopTracker
from sim.model.object_store import StoragePool
from sim.model.pools import (
    EVICTION_STREAM,
    KV,
    POOL_KINDS,
    ROUTER_STREAM,
    WORKLOAD_STREAM,
    Pool,
    Residency,
)
from sim.model.prefetch import Prefetcher, PrefetchOp, RetryBudget
from sim.model.prefetch_policies import PrefetchTimeout
from sim.model.radix import RadixTree
from sim.model.retries import PrefetchRetries
from sim.model.storage import Storage
from sim.workload.kinds import Request, Workload

if TYPE_CHECKING:
    from sim.scenario.schema import Scenario


def stream(seed: int, *spawn_key: int) -> np.random.Generator:
    """An independent random stream of the run's seed: fixed indices per concern and pool, so
    switching one source on or resizing anything never moves another source's draws."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=spawn_key))


def workload_stream(seed: int) -> np.random.Generator:
    return stream(seed, WORKLOAD_STREAM)


@dataclass(frozen=True)
class Timing:
    """Compute and host-link costs in seconds.

    The host link moves bytes at `pcie_bps`; under SGLang's `direct` io every contiguous copy
    also costs `copy_overhead_s` (one per layer per page and K/V buffer), which is what makes
    small copies slow. Under `kernel` io the overhead is 0."""

    prefill_tokens_per_s: float
    decode_ms_per_token: float
    pcie_bps: float
    load_bytes_per_page: int
    """Bytes a page restored from the host moves across PCIe: KV plus every per-page aux pool."""
    chunk_tokens: int | None = None
    shared_chunk_budget: bool = True
    """The requests of one prefill pass share `chunk_tokens` (SGLang's rem_chunk_tokens);
    False: one request per pass."""
    idle_pass_s: float = 1e-4
    """A scheduler pass that runs no batch (only retry pacing counts such passes)."""
    copy_overhead_s: float = 0.0
    copies: Mapping[str, int] = field(default_factory=dict)
    """Copies one object of each pool takes under direct io."""
    load_copies_per_page: int = 0
    """Copies a restored page takes: the copies of KV and of every per-page aux pool."""
    batched_decode: bool = True
    """One forward stream: decode steps of the whole running batch (False: a timer a request)."""
    step_s: float = 0.02
    """A decode step's time whatever its batch; each request and each token of context the
    batch attends add `s_per_request` and `s_per_context_token`."""
    s_per_request: float = 0.0
    s_per_context_token: float = 0.0

    def decode_batch_step_s(self, batch: int, context_tokens: int) -> float:
        """One decode step of `batch` requests attending `context_tokens` in all: the bytes it
        reads, and never less than computing its tokens at the prefill rate."""
        memory_s = self.step_s + batch * self.s_per_request
        memory_s += context_tokens * self.s_per_context_token
        return max(memory_s, batch / self.prefill_tokens_per_s)

    def alone_s(self, req: Request) -> float:
        """A request's prefill and decode on an idle server with nothing cached: the least
        time it could take."""
        if not self.batched_decode:
            return req.prompt_tokens / self.prefill_tokens_per_s + self.decode_s(req.output_tokens)
        steps = max(req.output_tokens - 1, 0)
        context = req.prompt_tokens + req.output_tokens // 2
        decode_s = steps * self.decode_batch_step_s(1, context)
        return req.prompt_tokens / self.prefill_tokens_per_s + decode_s

    def prefill_s(self, recomputed_tokens: int, loaded_pages: int) -> float:
        load_s = self._host_link_s(
            loaded_pages * self.load_bytes_per_page, loaded_pages * self.load_copies_per_page
        )
        return recomputed_tokens / self.prefill_tokens_per_s + load_s

    @property
    def decode_step_s(self) -> float:
        return self.decode_ms_per_token / 1000.0

    def decode_s(self, output_tokens: int) -> float:
        return output_tokens * self.decode_ms_per_token / 1000.0

    def staging_s(self, staged: StagedWrite) -> float:
        """Copying a staged backup from the device to the host."""
        copies = (
            sum(n * self.copies[name] for name, n in staged.objects.items())
            if self.copy_overhead_s
            else 0
        )
        return self._host_link_s(staged.nbytes, copies)

    def _host_link_s(self, nbytes: float, copies: int) -> float:
        """Bytes across the host link, and the per-copy overhead of direct io."""
        return nbytes / self.pcie_bps + copies * self.copy_overhead_s


def decode_step(scenario: Scenario) -> dict[str, Any]:
    """`Timing`'s decode fields from the scenario's compute section, in seconds."""
    compute = scenario.compute
    step_ms = compute.decode_step_ms
    if step_ms is None:
        step_ms = compute.decode_ms_per_token
    return {
        "batched_decode": compute.decode == "batched",
        "step_s": step_ms / 1000.0,
        "s_per_request": compute.decode_ms_per_request / 1000.0,
        "s_per_context_token": compute.decode_ms_per_ki_context_tokens / 1024 / 1000.0,
    }


WRITE_BACKLOG_DEVICE_POOLS = 2
"""buffer_only mode: backup intents waiting to be staged are capped at twice the device KV pool
(SGLang's `write_backlog_cap = 2 * token_to_kv_pool_allocator.size_full`)."""


@dataclass(frozen=True)
class Eviction:
    """A backend-side random eviction source of one storage pool, with its own stream."""

    pool: StoragePool
    rate_per_s: float
    rng: np.random.Generator


@dataclass
class ServerModel:
    """One server's model, assembled from a scenario: what the engine wires in time. Its
    `storage` may be shared with the other servers of a cluster."""

    instance: int
    page_size: int
    pools: dict[str, Pool]
    tree: RadixTree
    host: HostPool
    storage: Storage
    existence: ExistenceCache
    write_path: WritePath
    prefetcher: Prefetcher
    loops: LoopTracker
    timing: Timing
    buffer_only: bool
    retries: PrefetchRetries | None = None
    """Retries paced in scheduler passes (None: in seconds, `RetryBudget.interval_s`)."""
    anchors: AnchorPins = field(default_factory=lambda: AnchorPins(0))
    """buffer_only: the anchors staged prefetches pin, within their cap."""


@dataclass
class ClusterModel:
    """Everything a run needs, assembled from its scenario: the servers of a cluster (one when
    the scenario has no `cluster` section), the storage backend they share, the request
    stream, the router and the run's horizon. The engine reads nothing else."""

    storage: Storage
    evictions: list[Eviction]
    """Backend-side eviction sources: the backend's, so one per pool whatever the servers."""
    servers: list[ServerModel]
    workload: Workload
    router: Router
    duration_s: float
    warmup_s: float
    arrival_scale: float = 1.0
    """Arrival times are multiplied by this (1/N with `cluster.scale_arrivals`)."""
    link_bps: float | None = None
    """Each server's own link to the backend (each direction); None: only the backend's."""


def layout(scenario: Scenario) -> dict[str, Pool]:
    """The pools the scenario's model has, KV first, each resolved against its spec."""
    spec = scenario.model
    return {
        name: Pool.of(POOL_KINDS[name], spec.pool_spec(name), spec.page_size)  # type: ignore[arg-type]
        for name in spec.pools
    }


def build_cluster(
    scenario: Scenario, workload: Workload | None = None, *, storage_trace: bool = False
) -> ClusterModel:
    """Assemble a run: the shared storage, every server, the request stream (or `workload`),
    the router; with `storage_trace` every pool logs its accesses. A cluster of several servers
    also records which server displaced which object (for the cross-server loop count)."""
    pools = layout(scenario)
    storage, evictions = build_storage(scenario, pools, storage_trace=storage_trace)
    cluster, page_size = scenario.cluster, scenario.model.page_size
    if cluster.instances > 1:
        for store in storage.pools.values():
            store.displaced_by = {}
    servers = [build_server(scenario, storage, i) for i in range(cluster.instances)]
    return ClusterModel(
        storage,
        evictions,
        servers,
        workload=workload or scenario.workload.build(page_size, workload_stream(scenario.seed)),
        router=cluster.router.build(
            len(servers),
            page_size,
            stream(scenario.seed, ROUTER_STREAM),
            horizon_s=scenario.duration_s,
        ),
        duration_s=scenario.duration_s,
        warmup_s=scenario.warmup_s,
        arrival_scale=1.0 / cluster.instances if cluster.scale_arrivals else 1.0,
        link_bps=None if cluster.link_gbps is None else cluster.link_gbps * GB,
    )


def build_model(scenario: Scenario, *, storage_trace: bool = False) -> ServerModel:
    """The first server of the scenario's cluster (the only one of a single-server scenario)."""
    return build_cluster(scenario, storage_trace=storage_trace).servers[0]


def build_storage(
    scenario: Scenario, pools: dict[str, Pool], *, storage_trace: bool = False
) -> tuple[Storage, list[Eviction]]:
    """The storage backend: one store per pool, its bandwidths, and its eviction sources."""
    stores = {name: _storage_pool(scenario, pool) for name, pool in pools.items()}
    if storage_trace:
        for store in stores.values():
            store.access_log = []
    storage = Storage(
        stores,
        pools,
        read_bps=scenario.storage.read_gbps * GB,
        write_bps=scenario.storage.write_gbps * GB,
        exists_latency_ms=scenario.storage.exists_latency_ms,
    )
    evictions = [
        Eviction(
            stores[name],
            scenario.storage_pool(name).evict_rate_per_s,
            stream(scenario.seed, EVICTION_STREAM, pool.kind.stream_id),
        )
        for name, pool in pools.items()
        if scenario.storage_pool(name).evict_rate_per_s > 0
    ]
    return storage, evictions


def aux_staging(scenario: Scenario, aux: list[Pool]) -> list[AuxStaging]:
    """The host staging pools of the aux pools that stage through their own (SWA), sized by
    `host.<pool>_pages`."""
    staging = []
    for pool in aux:
        pages = scenario.host.staging_pages(pool.name)
        if pool.kind.stages_on_host and pool.tail_pages is not None and pages is not None:
            staging.append(AuxStaging(pool.name, pages, pool.tail_pages))
    return staging


def build_server(scenario: Scenario, storage: Storage, instance: int = 0) -> ServerModel:
    """One server over `storage`: its device tree, host pool, beliefs, write path and
    prefetcher, configured by the scenario (every server of a cluster alike)."""
    pools = dict(storage.layout)
    page_size = scenario.model.page_size
    buffer_only = scenario.host.mode == "buffer_only"
    aux = [pool for name, pool in pools.items() if name != KV and not pool.rides_on_kv]
    tree = RadixTree(
        kv_pages=scenario.device.kv_pages,
        aux={
            p.name: AuxDevice(
                p.residency,
                scenario.device.capacity(p.name),
                p.tail_pages if p.residency is Residency.PAGE_VALUES else None,
                p.checkpoint_pages,
            )
            for p in aux
        },
        host_cache_pages=None if buffer_only else scenario.host.pages,
        window_retention=scenario.device.swa_retention == "window",
    )
    host = HostPool(
        scenario.host.pages,
        cached_pages=lambda: tree.host_used,
        cache=tree.host,
        load_fraction=LOAD_POOL_USAGE_FRACTION if buffer_only else CACHE_PREFETCH_CAPACITY_FRACTION,
    )
    entries = scenario.existence_cache.entries
    existence = ExistenceCache(entries, enabled=buffer_only)
    per_pool = scenario.existence_cache.beliefs == "per_pool"
    aux_beliefs = {
        name: ExistenceCache(entries, enabled=buffer_only)
        for name in pools
        if per_pool and name != KV
    }
    write_path = WritePath(
        existence,
        storage,
        tree.root,
        buffer_only=buffer_only,
        aux_beliefs=aux_beliefs,
        client=instance,
        host_pages=scenario.host.pages,
        backlog_cap_pages=WRITE_BACKLOG_DEVICE_POOLS * scenario.device.kv_pages,
    )
    rule = RULES[scenario.heal]

    def heal(op: PrefetchOp) -> Sequence[int] | PoolDrops:
        return rule(DiscardView(op, page_size, storage))

    prefetch = scenario.prefetch
    retry = RetryBudget(
        prefetch.retry.max_attempts, prefetch.retry.interval_passes, prefetch.retry.interval_s
    )
    threshold_tokens = max(prefetch.threshold_tokens, page_size)
    swa = scenario.model.pool_spec("swa")
    if prefetch.threshold_floor == "swa_window" and buffer_only and swa is not None:
        # from 0.5.20 a buffer_only server asks for one full SWA window at least
        threshold_tokens = max(threshold_tokens, (swa.tail_pages(page_size) or 1) * page_size)
    loops = LoopTracker()
    prefetcher = Prefetcher(
        storage=storage,
        host=host,
        write_path=write_path,
        loops=loops,
        heal=heal,
        hit_query=scenario.storage.hit_query,
        policy=prefetch.policy,
        timeout=PrefetchTimeout(
            prefetch.timeout_base_s, prefetch.timeout_per_ki_token_s, page_size
        ),
        threshold_pages=-(-threshold_tokens // page_size),
        retry=retry,
        client=instance,
        aux_staging=aux_staging(scenario, aux) if buffer_only else (),
        shrink=prefetch.shrink,
        short_span_own_pages=prefetch.short_span_aux == "own_pages",
        heal_after_deadline=prefetch.heal_after_deadline,
        sidecar_read=prefetch.sidecar_read,
        hit_query_error=prefetch.hit_query_error,
    )
    copies = {name: scenario.model.pool_spec(name).host_copies() for name in pools}  # type: ignore[union-attr]
    timing = Timing(
        prefill_tokens_per_s=scenario.compute.prefill_tokens_per_s,
        decode_ms_per_token=scenario.compute.decode_ms_per_token,
        pcie_bps=scenario.host.pcie_gbps * GB,
        load_bytes_per_page=sum(p.object_bytes for p in pools.values() if p.residency.per_page),
        chunk_tokens=scenario.compute.chunk_tokens,
        shared_chunk_budget=scenario.compute.chunk_budget == "batch",
        idle_pass_s=prefetch.retry.idle_pass_ms / 1000.0,
        copy_overhead_s=scenario.host.copy_overhead_us / 1e6,
        copies=copies,
        load_copies_per_page=sum(copies[n] for n, p in pools.items() if p.residency.per_page),
        **decode_step(scenario),
    )
    return ServerModel(
        instance=instance,
        page_size=page_size,
        pools=pools,
        tree=tree,
        host=host,
        storage=storage,
        existence=existence,
        write_path=write_path,
        prefetcher=prefetcher,
        loops=loops,
        timing=timing,
        buffer_only=buffer_only,
        anchors=AnchorPins(int(Fraction(scenario.host.anchor_lock_cap) * scenario.device.kv_pages)),
        retries=(
            PrefetchRetries(
                retry.max_attempts,
                retry.interval_passes,
                head_exempt=prefetch.retry.head_exempt,
                short_spans=prefetch.retry.short_spans,
                deadline_cancels=prefetch.retry.deadline_cancels and prefetch.policy == "timeout",
            )
            if retry.interval_s is None
            else None
        ),
    )


def storage_ranks(scenario: Scenario, pool: Pool) -> int:
    """How many tensor-parallel ranks store their own shard of this pool's objects: every
    rank, unless the KV is replicated (MLA), when rank 0 writes the one copy of KV and of every
    pool but Mamba's sharded states (0.5.23: mem_cache/hybrid_cache/hybrid_cache_controller.py:
    HybridCacheController.should_backup)."""
    replicated = scenario.model.kv.replicated and pool.kind.residency.per_page
    return 1 if replicated else scenario.server.tp_size


def _storage_pool(scenario: Scenario, pool: Pool) -> StoragePool:
    spec = scenario.storage_pool(pool.name)
    size = pool.object_bytes
    ranks = storage_ranks(scenario, pool)
    capacity = None if spec.capacity_gb is None else int(spec.capacity_gb * GB // (size * ranks))
    return StoragePool(
        pool.name,
        size,
        capacity,
        spec.get_fail_prob,
        spec.put_fail_prob,
        FaultStreams.seeded(scenario.seed, pool.kind.stream_id),
        spec.put_outage_s,
        exists_ttl_s=scenario.storage.exists_ttl_s,
        eviction=scenario.storage.eviction,
        high_watermark=scenario.storage.eviction_high_watermark_ratio,
        evict_ratio=scenario.storage.eviction_ratio,
        write_dedup=scenario.storage.write_dedup,
        torn_put_prob=spec.torn_put_prob,
        failed_read=scenario.storage.failed_read,
        failed_put_torn=scenario.storage.failed_put_torn,
        ranks=ranks,
    )
