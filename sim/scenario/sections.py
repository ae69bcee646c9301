"""The sections of a scenario file (`model:`, `device:`, `host:`, `storage:`, ...): each key's
type, range and default, and what it means in SGLang's terms. `sim.scenario.schema` assembles them
into the `Scenario`, with the registered implementations filled in."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union, cast, get_args

from pydantic import (
    AfterValidator,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sim.cluster.routing import DEFAULT_ROUTER, ROUTERS
from sim.cluster.spec import RouterSpec
from sim.core.registry import Registry
from sim.core.spec import (
    MIN_INTERVAL_S,
    Attempts,
    CopyOverheadUs,
    Flag,
    Gbps,
    GpuMemoryMib,
    HostLinkGbps,
    KeyedError,
    NonNegFloat,
    NonNegInt,
    PositiveInt,
    Probability,
    Strict,
)
from sim.deployment.profiles import CUSTOM, SGLANG_RELEASES, unknown_release_message
from sim.model.pools import POOL_KINDS
from sim.scenario.model_section import expanded_model

MAX_TP_SIZE = 1024


class DeviceSpec(Strict):
    """`device:` — KV pages, `<pool>_<unit>` for each aux pool the model has, and how the
    device retains per-page aux values."""

    kv_pages: PositiveInt
    swa_retention: Literal["window", "whole_node"] = "window"
    """`window` (SGLang today): out-of-window freeing, windows kept at insert ends, chunk ends,
    branch points and checkpoints only; `whole_node`: every page of a node keeps its values
    (this simulator's earlier model), for comparison."""

    def capacity(self, pool: str) -> int:
        """Device capacity of an aux pool in its own unit (pages or slots)."""
        key = POOL_KINDS[pool].device_key
        return self.kv_pages if key is None else cast(int, getattr(self, key))


class HostSpec(Strict):
    mode: Literal["buffer_only", "cache"] = "buffer_only"
    pages: PositiveInt
    """Host pool pages; when left out, `hicache_ratio` x `device.kv_pages` (SGLang's rule)."""
    swa_pages: PositiveInt | None = None
    """The SWA pool's host staging pages (buffer_only mode: each prefetch's window and each
    write's tails); when left out, `hicache_ratio` x `device.swa_pages`, the rule SGLang sizes
    every host pool by. SGLang refuses fewer than two windows in buffer_only mode. Ignored
    without an SWA pool."""
    hicache_ratio: Annotated[float, Field(strict=True, gt=0.0, le=1e3)] | None = None
    """SGLang's --hicache-ratio: null is its default, 2.0 in cache mode and 1.2 in buffer_only
    mode, lowered to fit the host's memory under `auto_size`. Used only to derive a `pages`
    the scenario leaves out."""
    auto_size: bool = True
    """SGLang 0.5.21 on (`false`: 0.5.18-0.5.20): with neither `hicache_ratio` nor `pages`
    given, the default ratio is lowered until the host pools of the host's ranks fit
    `memory_fraction` of its free memory; applied where `hardware.host_memory_gib` says how
    much that is (docs/deployments.md, "Host memory auto-sizing")."""
    memory_fraction: Annotated[float, Field(strict=True, gt=0.0, le=1.0)] = 0.8
    """SGLang's --hicache-host-memory-fraction: the share of the host's free memory, after a
    10 GiB reserve, that the host pools of all its ranks may take when auto-sizing."""
    pcie_gbps: Gbps = 50.0
    """Host-device bandwidth of the io path: a GPU profile gives the gather kernel's rate for
    `kernel` io and the bulk copy rate for `direct` io."""
    io_backend: Literal["kernel", "direct"] = "kernel"
    """SGLang's --hicache-io-backend: `kernel` (a gather kernel reads host memory directly) or
    `direct` (one cudaMemcpyAsync per layer per page, each paying `copy_overhead_us`)."""
    mem_layout: Literal["layer_first", "page_first", "page_first_direct"] = "page_first"
    """SGLang's --hicache-mem-layout. SGLang switches page_first_direct to direct io, direct io
    to page_first_direct, and Mooncake off layer_first; a Mamba host pool needs a page_first
    layout."""
    copy_overhead_us: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 0.0
    """What each copy of `direct` io costs beyond its bytes (a GPU profile gives it)."""
    anchor_lock_cap: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """buffer_only mode: the share of the device KV pool that staged prefetches may pin as
    their anchors (SGLANG_HICACHE_BUFFER_ANCHOR_LOCK_CAP; 0 pins none, as before PR #37464)."""

    def staging_pages(self, pool: str) -> int | None:
        """Host staging pages of an aux pool that stages through its own (`<pool>_pages`)."""
        return cast("int | None", getattr(self, f"{pool}_pages", None))


class StoragePoolSpec(Strict):
    capacity_gb: Annotated[float, Field(strict=True, ge=0.0, le=1e9)] | None = None
    get_fail_prob: Probability = 0.0
    put_fail_prob: Probability = 0.0
    torn_put_prob: Probability = 0.0
    """Share of stored shards left torn: `exists` reports them, every read of them fails."""
    evict_rate_per_s: Annotated[float, Field(strict=True, ge=0.0, le=1e4)] = 0.0
    put_outage_s: tuple[NonNegFloat, NonNegFloat] | None = None

    @model_validator(mode="after")
    def _outage_ordered(self) -> StoragePoolSpec:
        if self.put_outage_s is not None and self.put_outage_s[1] < self.put_outage_s[0]:
            raise ValueError("put_outage_s must be [start_s, end_s] with start_s <= end_s")
        return self


class StorageSpec(Strict):
    backend: str | None = None
    """One of `sim.deployment.profiles.STORAGE_BACKENDS` (or `custom`, the same as null): its
    hit query, write dedup and eviction order become the defaults of the keys below."""
    hit_query: str = "min_of_pools"
    """One of `sim.model.storage.HIT_QUERIES`; the default is what SGLang's hybrid backends do."""
    read_gbps: Gbps = 10.0
    write_gbps: Gbps = 5.0
    exists_latency_ms: NonNegFloat = 0.5
    exists_ttl_s: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 0.0
    """How long an object removed by a backend-side eviction still answers `exists` (the file
    backend's optional metadata cache: 5 s when enabled)."""
    pools: dict[str, StoragePoolSpec] = Field(default_factory=dict)
    write_dedup: Flag = True
    """A put of a key the backend reports as stored is skipped (file, hf3fs, Mooncake); false
    writes it again (nixl)."""
    failed_read: Literal["keep", "delete", "halt", "miss_batch"] = "keep"
    """What a failed read does: `keep` leaves the object (every SGLang backend but the file
    one); `delete` removes it (a what-if: no backend does); `halt` raises out of the backend and
    stops the server's storage reads for the rest of the run (the file backend to 0.5.21);
    `miss_batch` raises to a reader that catches it: the KV batch or aux transfer counts 0
    pages, the object stays, reading goes on (the file backend from 0.5.22)."""
    failed_put_torn: Flag = False
    """A failed put leaves a torn object at its key (the file backend while it wrote straight
    to the key's path) instead of nothing."""
    eviction: Literal["lru", "fifo", "lease"] = "lru"
    """Which object a full pool evicts: `lru` (least recently read or rewritten), `fifo`
    (oldest write), `lease` (Mooncake: least recently touched, `exists` included)."""
    eviction_high_watermark_ratio: Annotated[float, Field(strict=True, gt=0.0, le=1.0)] = 1.0
    """A pool evicts once it holds more than this share of its capacity (Mooncake: 0.9)..."""
    eviction_ratio: Annotated[float, Field(strict=True, ge=0.0, lt=1.0)] = 0.0
    """...and then evicts this share of its objects at once (Mooncake: 0.05); 0: one."""


class ExistenceCacheSpec(Strict):
    entries: PositiveInt = 524288
    """LRU bound on beliefs (per pool with `per_pool`): SGLang's current value; 131072 before."""
    beliefs: Literal["kv", "per_pool"] = "kv"
    """`kv`: the PR's design, KV beliefs and one FULL check for every pool; `per_pool`: SGLang's
    newer PoolExistenceBeliefs, one LRU per pool and node writes pool by pool."""


class RetrySpec(Strict):
    max_attempts: Attempts = 8
    """Re-issues a still-queued request may make after a missed prefetch (SGLang's
    --hicache-storage-prefetch-retry-max-attempts, 8 since 0.5.20); 0 turns retries off."""
    interval_passes: Annotated[int, Field(strict=True, ge=0, le=1_000_000)] = 8
    """Scheduler passes a marked request waits before its re-issue (SGLang's
    --hicache-storage-prefetch-retry-poll-interval, 8 since 0.5.20); 0 turns retries off."""
    interval_s: Annotated[float, Field(strict=True, ge=0.0, le=1e9)] | None = None
    """Pace re-issues in seconds instead of passes (the simulator's earlier model; 0 turns
    retries off, anything else is at least a millisecond)."""
    idle_pass_ms: Annotated[float, Field(ge=0.001, le=1000.0)] = 0.1
    """How long a scheduler pass that runs no batch takes while a retry is pending (SGLang
    spins with a waiting queue; an estimate, not a measurement)."""
    head_exempt: Flag = True
    """A paced retry of the waiting-queue head is dropped, its admission not waiting for it
    (SGLang 0.5.20 on); False: the head is re-issued like any queued request (0.5.19)."""
    short_spans: Flag = False
    """A request whose span is too short to prefetch (or fully matched) is marked for a paced
    retry, in case its device match is evicted while it waits (SGLang 0.5.19, 0.5.20); False:
    no lookup, no retry (0.5.21 on)."""
    deadline_cancels: Flag = False
    """With the `timeout` policy, a prefetch stopped by its deadline cancels the request's
    retry and no later retry or re-fetch is issued for it (SGLang 0.5.23); False: the stopped
    prefetch is retried as any other miss (0.5.19-0.5.22)."""

    @model_validator(mode="after")
    def _interval_bounded(self) -> RetrySpec:
        if self.interval_s is not None and 0 < self.interval_s < MIN_INTERVAL_S:
            raise KeyedError(
                "prefetch.retry.interval_s",
                f"{self.interval_s:g} s is below the {MIN_INTERVAL_S:g} s (1 ms) a retry interval "
                "may be (0 turns retries off)",
            )
        return self


class PrefetchSpec(Strict):
    policy: str = "timeout"
    """One of `sim.model.prefetch_policies.PREFETCH_POLICIES`."""
    threshold_tokens: NonNegInt = 256
    timeout_base_s: NonNegFloat = 1.0
    timeout_per_ki_token_s: NonNegFloat = 0.25
    retry: RetrySpec = Field(default_factory=RetrySpec)
    shrink: Literal["page", "restorable", "none"] = "page"
    """Cache mode: a hit host memory cannot stage whole, even after evicting host copies,
    shrinks to what fits if that meets the threshold: to a page (`page`, every SGLang release
    through 0.5.23), to the largest endpoint every aux pool can restore (`restorable`, a
    what-if read from unreleased code), or not at all (`none`, the simulator's earlier model:
    declined)."""
    short_span_aux: Literal["own_pages", "none"] = "none"
    """buffer_only mode: what a span that starts mid-tree and is shorter than an aux pool's tail
    (an SWA window) asks that pool for: its own pages, the device prefix holding the rest of
    the window (`own_pages`, SGLang 0.5.19), or nothing, which fails the hybrid check
    (`none`, 0.5.20 on, and every release in cache mode; the default)."""
    sidecar_read: Literal["with_kv_batch", "after_kv"] = "with_kv_batch"
    """When a KV-derived sidecar pool (the DSA indexer) is read: beside each KV batch, the
    batch's hit clamped to the shorter of the two (`with_kv_batch`, SGLang 0.5.19 on:
    `CacheController._page_transfer_kv_batch`; the default), or once KV has completed, the
    usable prefix clamped to the sidecar's leading run and nothing read when KV fell short
    (`after_kv`, 0.5.18). Either way a sidecar shortfall clamps the hit instead of discarding
    it, unless a tail-keyed pool (SWA, Mamba) makes the stack all-or-nothing."""
    threshold_floor: Literal["page", "swa_window"] = "swa_window"
    """The least the prefetch threshold can be: one page (`page`, SGLang 0.5.18-0.5.19), or in
    buffer_only mode with an SWA pool one full SWA window, `ceil(window / page)` pages
    (`swa_window`, 0.5.20 on: `StorageAttachment.resolve_prefetch_threshold`; the default)."""
    heal_after_deadline: Flag = True
    """Does a prefetch the `timeout` policy stopped still heal existence beliefs from what it
    was told and read? `true`: SGLang 0.5.19-0.5.22 (the hit-query heal and the discard heal
    run for it as for any op); `false`: 0.5.23, where a stop at the deadline marks the op
    `deadline_expired` and neither heal runs (a deadline is no evidence that anything is
    missing). A stop under `best_effort` is never a deadline."""
    hit_query_error: Literal["stop", "miss"] = "stop"
    """What a hit query that raises out of the backend (`storage.hit_query: raises`, or
    `min_of_pools_no_swa` with an SWA pool) does: `stop` ends the controller's prefetch thread,
    so that and every later prefetch get no answer and wait for their policy (SGLang
    0.5.18-0.5.21; the default); `miss` counts the query 0 pages and prefetching goes on
    (0.5.22 on)."""


class ComputeSpec(Strict):
    prefill_tokens_per_s: Annotated[float, Field(strict=True, ge=1.0, le=1e15)] = 20000.0
    """From 1 token/s (below it one request outlasts any run); the top is far above any GPU so
    that oracle scenarios can make prefill free (1e12)."""
    decode_ms_per_token: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 20.0
    """A decode step's time when `decode_step_ms` is null (a step of any batch, or with
    `decode: per_request` each token's). Up to a million ms (1,000 s): beyond it one output
    token outlasts any run, and a huge figure (1e308) would make every decode time infinite."""
    decode: Literal["batched", "per_request"] = "batched"
    """`batched`: one forward stream, as SGLang's event loop runs it (a decode step serves every
    running request and waits for a prefill batch); `per_request`: each request decodes on a
    timer of its own beside prefill (the simulator's earlier model)."""
    decode_step_ms: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] | None = None
    """A decode step's time whatever its batch (reading every weight once); null:
    `decode_ms_per_token`."""
    decode_ms_per_request: Annotated[float, Field(strict=True, ge=0.0, le=1e4)] = 0.0
    """What each request of the batch adds to a step (its fixed reads: sliding windows, top-k
    latents)."""
    decode_ms_per_ki_context_tokens: Annotated[float, Field(strict=True, ge=0.0, le=1e4)] = 0.0
    """What every 1,024 tokens of context the batch attends add to a step (full layers' KV)."""
    chunk_tokens: Annotated[int, Field(strict=True, ge=1, le=2**24)] | None = 8192
    """Chunked prefill (SGLang's --chunked-prefill-size): every chunk end is an insert, so a
    node end with its aux state kept; null: one pass."""
    chunk_budget: Literal["batch", "request"] = "batch"
    """`batch`: one chunk budget per prefill pass, shared by the requests that pass adds (SGLang's
    `rem_chunk_tokens`); `request`: one request per pass, chunked on its own (the simulator's
    earlier model)."""


class ClusterSpec(Strict):
    """`cluster:` — N servers, each configured as this scenario's server, behind one router
    and sharing the storage backend (its pools, capacity, faults and aggregate bandwidth)."""

    instances: Annotated[int, Field(strict=True, ge=1, le=1024)] = 1
    router: RouterSpec = Field(default_factory=ROUTERS[DEFAULT_ROUTER])
    """One of `sim.cluster.routing.ROUTERS` by its `policy` (default cache_aware, the gateway's)."""
    link_gbps: Gbps | None = None
    """Each server's own link to the backend (each direction); null: only the backend's
    aggregate `storage.read_gbps` / `storage.write_gbps` limit a server."""
    scale_arrivals: Flag = False
    """Divide the workload's arrival times by `instances`, so each server sees the load one
    server sees without this (follow-up turns keep their think times)."""

    @model_validator(mode="before")
    @classmethod
    def _default_policy(cls, data: Any) -> Any:
        """A router written without its `policy` is the gateway's default."""
        router = data.get("router") if isinstance(data, dict) else None
        if isinstance(router, dict) and "policy" not in router:
            return {**data, "router": {"policy": DEFAULT_ROUTER, **router}}
        return data


class ServerSpec(Strict):
    """`server:` — which SGLang the server runs and the arguments that size it."""

    sglang: str | None = None
    """An SGLang release (`0.5.18` ... `0.5.23`, `latest`, or `pr36386` for 0.5.19; `custom`
    or null for none): that release's HiCache defaults become the defaults of the scenario's
    keys, and what the release's server refuses to start with is bad input."""
    tp_size: Annotated[int, Field(strict=True, ge=1, le=MAX_TP_SIZE)] = 1
    """Tensor parallelism: sizes one rank's share of the weights and heads when the device is
    sized from `hardware` (device and host figures are one rank's), and makes each page that
    many shards in storage, one per rank, each with its own failure draws."""
    mem_fraction_static: Annotated[float, Field(strict=True, gt=0.0, lt=1.0)] | None = None
    """SGLang's --mem-fraction-static; null: SGLang's rule from the GPU's memory."""
    swa_full_tokens_ratio: Annotated[float, Field(strict=True, gt=0.0, le=16.0)] = 0.8
    """SWA pool tokens per full-attention token when the device is sized from memory."""
    mamba_full_memory_ratio: Annotated[float, Field(strict=True, gt=0.0, le=100.0)] = 0.9
    """Mamba state memory per unit of full-attention pool memory, likewise."""


class HardwareSpec(Strict):
    """`hardware:` — the GPU: its memory and its host link."""

    gpu: str | None = None
    """One of `sim.deployment.hardware.GPUS` (or `custom`: give the values below)."""
    calibration: str | None = None
    """A file written by `hicache-sim calibrate`: its measured values become the defaults of
    the values below (instead of `gpu`'s)."""
    memory_mib: GpuMemoryMib | None = None
    """GPU memory as nvidia-smi reports it: picks SGLang's chunk size and memory fraction and,
    with a model preset, sizes the device pools."""
    kernel_gbps: HostLinkGbps | None = None
    """Host-to-device rate of a kernel reading host memory (`kernel` io)."""
    bulk_gbps: HostLinkGbps | None = None
    """Host-to-device rate of large copies (`direct` io)."""
    copy_overhead_us: CopyOverheadUs | None = None
    """Cost of one copy beyond its bytes (`direct` io)."""
    host_memory_gib: Annotated[float, Field(strict=True, gt=0.0, le=2**20)] | None = None
    """The host's available memory in GiB (what psutil reports as available, bounded by the
    cgroup limit): with `host.memory_fraction` set it sizes the host pools as SGLang's
    auto-sizing does, for `server.tp_size` ranks on the host."""


MAX_PRICE_USD = 1e9
"""No GPU-hour or GB-month costs more: a bound far above any price, low enough that a
deployment's price (up to 10**9 GB a pool, thousands of GPUs) and the plots' axes stay finite
(1e308 priced every deployment at $inf and made the answer the first in grid order)."""

GpuHourUsd = Annotated[float, Field(strict=True, gt=0.0, le=MAX_PRICE_USD)]
GbMonthUsd = Annotated[float, Field(strict=True, ge=0.0, le=MAX_PRICE_USD)]


class CostsSpec(Strict):
    """`costs:` — the prices `hicache-sim plan` ranks deployments by; no run reads them, and
    none has a default: every figure is the user's (a plan without one names the key)."""

    gpu_hour_usd: dict[str, GpuHourUsd] = Field(default_factory=dict)
    """$ per GPU-hour by GPU preset (`hardware.gpu`); a server costs `server.tp_size` GPUs."""
    storage_gb_month_usd: dict[str, GbMonthUsd] = Field(default_factory=dict)
    """$ per GB-month of each storage pool's capacity (`storage.pools.<pool>.capacity_gb`)."""
    note: Annotated[str, Field(max_length=500)] | None = None
    """Where the figures come from (the shipped examples say they are illustrative)."""


VariantLabel = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,79}$")]


class SweepSpec(Strict):
    seeds: PositiveInt = 1
    variants: dict[VariantLabel, dict[str, Any]] = Field(default_factory=dict)
    """Labelled sets of keys, one axis of the sweep (its column is `variant`): rows that differ
    in several keys at once, such as deployments (`0.5.19-file: {server.sglang: 0.5.19,
    storage.backend: file}`), crossed with the grid."""
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    target: (
        Annotated[str, Field(pattern=r"^\s*[a-z0-9_]+\s*(>=|<=)\s*-?[0-9.eE+-]+\s*$")] | None
    ) = None
    """Optional 'METRIC>=VALUE' drawn as a contour on heatmaps."""


MAX_DURATION_S = 1e9
"""About 32 years of simulated time."""


def list_every_storage_pool(doc: dict[str, Any]) -> None:
    """A pool the model has but `storage.pools` leaves out is stored with the defaults
    (unbounded, fault-free); writing it into the document puts it in the resolved
    configuration, so a capacity answer never rests on a pool nobody can see."""
    missing = defaulted_storage_pools(doc)
    storage = doc.setdefault("storage", {})
    if missing and isinstance(storage, dict) and isinstance(storage.setdefault("pools", {}), dict):
        storage["pools"].update({name: {} for name in missing})


def defaulted_storage_pools(raw: dict[str, Any]) -> list[str]:
    """The model's pools a raw document leaves out of `storage.pools` (they get the defaults)."""
    model, storage = _mapping(expanded_model(raw.get("model"))), _mapping(raw.get("storage"))
    given = _mapping(storage.get("pools"))
    return [n for n in POOL_KINDS if isinstance(model.get(n), dict) and n not in given]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------- fields typed by a registry


def one_of(registry: Registry[Any]) -> Any:
    """`Literal[...]` of a registry's names, so the schema and its errors list them."""
    return Literal.__getitem__(registry.names())


def pool_map() -> Any:
    """`dict[Literal[pool names], StoragePoolSpec]`: `storage.pools` names only known pools."""
    return dict[one_of(POOL_KINDS), StoragePoolSpec]  # type: ignore[misc]


def priced(registry: Registry[Any], price: Any) -> Any:
    """`dict[Literal[registry names], price]`: a price list names only known GPUs or pools."""
    return dict[one_of(registry), price]  # type: ignore[misc]


def default(model: type[Strict], field: str) -> Any:
    return model.model_fields[field].default


def profile_names(registry: Registry[Any]) -> Any:
    """`Literal[...]` of a profile registry's names and `custom`, or null."""
    return Literal.__getitem__((*registry.names(), CUSTOM)) | None  # type: ignore[operator]


def release_name() -> Any:
    """A name of `SGLANG_RELEASES` or `custom`, or null; any other name is refused with the
    releases listed and the closest one named (a retired name says why it was retired)."""

    def known(name: str) -> str:
        if name != CUSTOM and name not in SGLANG_RELEASES:
            raise PydanticCustomError("sglang_release", unknown_release_message(name))
        return name

    return Annotated[str, Field(strict=True), AfterValidator(known)] | None


def tagged(registry: Registry[Any], tag: str) -> Any:
    """The union of a registry's specs, told apart by their `tag` field."""
    for name, spec in registry.items():
        if get_args(spec.model_fields[tag].annotation) != (name,):
            raise ValueError(
                f"{registry.what} {name!r}: its spec's `{tag}` must be Literal[{name!r}]"
            )
    specs = tuple(registry.values())
    return specs[0] if len(specs) == 1 else Annotated[Union[specs], Field(discriminator=tag)]  # noqa: UP007
