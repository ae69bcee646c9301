"""Scenario schema and loading: the single home of every default.

A scenario is a frozen, strictly validated tree of pydantic models. Unknown keys are rejected at
any depth, ranges are checked, and cross-field rules (a pool the model lacks, block sizes that
do not divide into pages) are enforced here so that the model and the engine can trust their
input. The parts that name an implementation — pool kinds, heal rules, hit queries, prefetch
policies, workload kinds, model presets — are taken from the registries of those extension
points, so the schema accepts exactly what is registered. A model preset is expanded before
anything is validated: its derived pool specs become the defaults of `model:`. `load_scenario`
turns a YAML file (read by `sim.documents`) plus `--set` overrides into a `Scenario`, and every
failure becomes a `ScenarioError` that names the file and the offending key.
"""

from __future__ import annotations

import copy
import difflib
import re
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    create_model,
    model_serializer,
    model_validator,
)

from sim.deployment.hardware import GPUS
from sim.deployment.profiles import CUSTOM, SGLANG_ERAS, STORAGE_BACKENDS, refusals
from sim.deployment.resolve import USER, Sources, derive, has, layer_profiles, leaves
from sim.documents import apply_override, layered, parse_override, read_document
from sim.heal import RULES
from sim.model.pools import DEFAULT_PAGE_SIZE, KV, POOL_KINDS, KVPoolSpec, PoolSpec
from sim.model.prefetch import PREFETCH_POLICIES
from sim.model.presets import MODEL_PRESETS
from sim.model.storage import HIT_QUERIES
from sim.registry import Registry
from sim.routing import DEFAULT_ROUTER, ROUTERS, RouterSpec
from sim.sizes import expected, normalize_sizes, size_keys
from sim.spec import (
    KeyedError,
    NonNegFloat,
    NonNegInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    ScenarioError,
    Strict,
)
from sim.units import param_hint
from sim.workload import (
    WORKLOAD_KINDS,
    MooncakeWorkload,
    MultiturnWorkload,
    SharedPrefixWorkload,
    WorkloadSpec,
)

__all__ = [
    "MooncakeWorkload",
    "MultiturnWorkload",
    "Scenario",
    "ScenarioError",
    "SharedPrefixWorkload",
    "apply_override",
    "build_scenario",
    "defaulted_storage_pools",
    "load_scenario",
    "parse_override",
    "point_document",
    "read_document",
    "scenario_model",
]


def _kv_or_preset(schema: dict[str, Any]) -> None:
    """In a file, `kv` may come from the preset instead of being written out."""
    schema["required"] = [key for key in schema.get("required", ()) if key != "kv"]
    if not schema["required"]:
        del schema["required"]
    schema["anyOf"] = [
        {"required": ["kv"]},
        {"required": ["preset"], "properties": {"preset": {"type": "string"}}},
    ]


def expand_preset(data: Any) -> Any:
    """A `model:` mapping with its preset's pool specs as the defaults of what it writes."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    name = data["preset"]
    preset = MODEL_PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        known = ", ".join(MODEL_PRESETS)
        guess = _nearest(str(name), list(MODEL_PRESETS))
        hint = f"did you mean {guess!r}? " if guess else ""
        raise KeyedError("model.preset", f"unknown preset {name!r}; {hint}known presets: {known}")
    return layered(preset.pool_specs(), data)


class ModelSpec(Strict):
    """`model:` — the page size, one spec per pool the model has (KV always), and the preset
    they were derived from, if any."""

    model_config = ConfigDict(json_schema_extra=_kv_or_preset)

    preset: str | None = None
    """One of `sim.model.presets.MODEL_PRESETS`: its derived pool specs are the defaults of
    `kv`, `swa` and `mamba`, field by field under what the file writes (`null` drops a pool);
    kept in the resolved config as provenance."""
    page_size: Annotated[int, Field(strict=True, ge=1, le=2**16)] = DEFAULT_PAGE_SIZE
    kv: KVPoolSpec

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any) -> Any:
        """Done before validation, so every way in (a file, `--set`, a plain mapping, a sweep
        point, a pickle) sees the same expanded model."""
        return expand_preset(data)

    @model_serializer(mode="wrap")
    def _without_absent_preset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A model without a preset dumps no `preset` key, so the resolved configs and sweep
        task keys of such scenarios do not depend on presets."""
        data: dict[str, Any] = handler(self)
        if data.get("preset") is None:
            data.pop("preset", None)
        return data

    def pool_spec(self, name: str) -> PoolSpec | None:
        return cast(PoolSpec | None, getattr(self, name, None))

    @property
    def pools(self) -> tuple[str, ...]:
        """The pools this model has, KV first, in registry order."""
        return tuple(name for name in POOL_KINDS if self.pool_spec(name) is not None)


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
        return cast(int, getattr(self, POOL_KINDS[pool].device_key))


class HostSpec(Strict):
    mode: Literal["buffer_only", "cache"] = "buffer_only"
    pages: PositiveInt
    """Host pool pages; when left out, `hicache_ratio` x `device.kv_pages` (SGLang's rule)."""
    hicache_ratio: Annotated[float, Field(strict=True, gt=0.0, le=1e3)] | None = None
    """SGLang's --hicache-ratio: null is its default, 2.0 in cache mode and 1.2 in buffer_only
    mode. Used only to derive a `pages` the scenario leaves out."""
    pcie_gbps: PositiveFloat = 50.0
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


class StoragePoolSpec(Strict):
    capacity_gb: Annotated[float, Field(strict=True, ge=0.0, le=1e9)] | None = None
    get_fail_prob: Probability = 0.0
    put_fail_prob: Probability = 0.0
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
    read_gbps: PositiveFloat = 10.0
    write_gbps: PositiveFloat = 5.0
    exists_latency_ms: NonNegFloat = 0.5
    exists_ttl_s: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 0.0
    """How long an object removed by a backend-side eviction still answers `exists` (the file
    backend's optional metadata cache: 5 s when enabled)."""
    pools: dict[str, StoragePoolSpec] = Field(default_factory=dict)
    write_dedup: bool = True
    """A put of a key the backend reports as stored is skipped (file, hf3fs, Mooncake); false
    writes it again (nixl)."""
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
    max_attempts: NonNegInt = 8
    """Re-issues a still-queued request may make after a missed prefetch (SGLang's
    --hicache-storage-prefetch-retry-max-attempts, 8 since v0.5.20); 0 turns retries off."""
    interval_s: NonNegFloat = 0.16
    """Wait before a re-issue: SGLang polls every 8 scheduling passes, here 8 decode steps of
    20 ms (the `compute.decode_ms_per_token` default); 0 turns retries off, as in SGLang."""


class PrefetchSpec(Strict):
    policy: str = "timeout"
    """One of `sim.model.prefetch.PREFETCH_POLICIES`."""
    threshold_tokens: NonNegInt = 256
    timeout_base_s: NonNegFloat = 1.0
    timeout_per_ki_token_s: NonNegFloat = 0.25
    retry: RetrySpec = Field(default_factory=RetrySpec)


class ComputeSpec(Strict):
    prefill_tokens_per_s: PositiveFloat = 20000.0
    decode_ms_per_token: NonNegFloat = 20.0
    chunk_tokens: Annotated[int, Field(strict=True, ge=1, le=2**24)] | None = 8192
    """Chunked prefill (SGLang's --chunked-prefill-size): every chunk end is an insert, so a
    node end with its aux state kept; null: one pass."""


class ClusterSpec(Strict):
    """`cluster:` — N servers, each configured as this scenario's server, behind one router
    and sharing the storage backend (its pools, capacity, faults and aggregate bandwidth)."""

    instances: Annotated[int, Field(strict=True, ge=1, le=1024)] = 1
    router: RouterSpec = Field(default_factory=ROUTERS[DEFAULT_ROUTER])
    """One of `sim.routing.ROUTERS` by its `policy` (default cache_aware, the gateway's)."""
    link_gbps: PositiveFloat | None = None
    """Each server's own link to the backend (each direction); null: only the backend's
    aggregate `storage.read_gbps` / `storage.write_gbps` limit a server."""
    scale_arrivals: bool = False
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
    """One of `sim.deployment.profiles.SGLANG_ERAS` (or `custom`, the same as null): that
    era's HiCache defaults become the defaults of the scenario's keys, and what the era's
    server refuses to start with is bad input."""
    tp_size: Annotated[int, Field(strict=True, ge=1, le=1024)] = 1
    """Tensor parallelism: sizes one rank's share of the weights and heads when the device is
    sized from `hardware` (the simulated server is one rank)."""
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
    memory_mib: Annotated[int, Field(strict=True, ge=1, le=2**24)] | None = None
    """GPU memory as nvidia-smi reports it: picks SGLang's chunk size and memory fraction and,
    with a model preset, sizes the device pools."""
    kernel_gbps: Annotated[float, Field(strict=True, gt=0.0, le=1e4)] | None = None
    """Host-to-device rate of a kernel reading host memory (`kernel` io)."""
    bulk_gbps: Annotated[float, Field(strict=True, gt=0.0, le=1e4)] | None = None
    """Host-to-device rate of large copies (`direct` io)."""
    copy_overhead_us: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] | None = None
    """Cost of one copy beyond its bytes (`direct` io)."""


VariantLabel = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,79}$")]


class SweepSpec(Strict):
    seeds: PositiveInt = 1
    variants: dict[VariantLabel, dict[str, Any]] = Field(default_factory=dict)
    """Labelled sets of keys, one axis of the sweep (its column is `variant`): rows that differ
    in several keys at once, such as deployments (`pr36386-file: {server.sglang: pr36386,
    storage.backend: file}`), crossed with the grid."""
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    target: (
        Annotated[str, Field(pattern=r"^\s*[a-z0-9_]+\s*(>=|<=)\s*-?[0-9.eE+-]+\s*$")] | None
    ) = None
    """Optional 'METRIC>=VALUE' drawn as a contour on heatmaps."""


MAX_DURATION_S = 1e9
"""About 32 years of simulated time."""


class Scenario(Strict):
    """One fully resolved simulation input."""

    name: Annotated[
        str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
    ]
    """Names the results folder, so it cannot start with a dot (no '..', no hidden folders)."""
    seed: NonNegInt = 0
    duration_s: Annotated[float, Field(strict=True, gt=0.0, le=MAX_DURATION_S)] = 600.0
    """Bounded so simulated times stay exact in integer microseconds (export-trace's
    timestamps) and far inside a float's precision."""
    warmup_s: NonNegFloat = 0.0
    server: ServerSpec = Field(default_factory=ServerSpec)
    hardware: HardwareSpec = Field(default_factory=HardwareSpec)
    model: ModelSpec
    device: DeviceSpec
    host: HostSpec
    storage: StorageSpec = Field(default_factory=StorageSpec)
    existence_cache: ExistenceCacheSpec = Field(default_factory=ExistenceCacheSpec)
    prefetch: PrefetchSpec = Field(default_factory=PrefetchSpec)
    heal: str = "keep_pages"
    """One of `sim.heal.RULES`."""
    compute: ComputeSpec = Field(default_factory=ComputeSpec)
    workload: WorkloadSpec
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    sweep: SweepSpec | None = None
    _sources: Sources = PrivateAttr(default_factory=Sources)
    _written: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        pools = self.model.pools
        if self.warmup_s >= self.duration_s:
            raise KeyedError("warmup_s", "must be smaller than duration_s")
        era = SGLANG_ERAS.get(self.server.sglang or "")
        if era is not None:
            for key, message in refusals(era, pools, self.host.mode):
                raise KeyedError(key, message)
        if "mamba" in pools and self.host.mem_layout == "layer_first":
            raise KeyedError(
                "host.mem_layout",
                "SGLang's Mamba host pool needs page_first or page_first_direct "
                "(MambaPoolHost asserts it)",
            )
        for kind in POOL_KINDS.values():
            if kind.name == KV:
                continue
            key = kind.device_key
            present = getattr(self.device, key, None) is not None
            if present and kind.name not in pools:
                raise KeyedError(f"device.{key}", self._lacks(kind.name))
            if not present and kind.name in pools:
                why = (
                    f"preset {self.model.preset} brings a {kind.name} pool"
                    if kind.name in self._preset_pools()
                    else f"the model has a {kind.name} pool"
                )
                raise KeyedError(f"device.{key}", f"required because {why}")
        for name in pools:
            tokens = getattr(self.model.pool_spec(name), "checkpoint_tokens", None)
            if tokens is not None and tokens % self.model.page_size:
                raise KeyedError(
                    f"model.{name}.checkpoint_tokens", "must be a multiple of model.page_size"
                )
        for pool in self.storage.pools:
            if pool not in pools:
                raise KeyedError(f"storage.pools.{pool}", self._lacks(pool))
        self.workload.check(self.model.page_size)
        if self.sweep is not None:
            for where, key in self._swept_keys():
                if key.split(".")[0] == "sweep":
                    raise KeyedError(where, "a sweep cannot sweep itself")
                if key == "seed":
                    raise KeyedError(
                        where,
                        "a sweep's seeds are its sweep.seeds replications, derived from the "
                        "scenario's seed; set sweep.seeds (or the scenario's seed) instead",
                    )
                if where.startswith("sweep.variants.") and key in self.sweep.grid:
                    raise KeyedError(where, f"{key} is also swept by sweep.grid; set it once")
        return self

    def _swept_keys(self) -> Iterator[tuple[str, str]]:
        """(where it is set, dotted key) for every key the sweep sets."""
        assert self.sweep is not None
        for key in self.sweep.grid:
            yield f"sweep.grid.{key}", key
        for label, sets in self.sweep.variants.items():
            for key in sets:
                yield f"sweep.variants.{label}.{key}", key

    def _preset_pools(self) -> tuple[str, ...]:
        preset = MODEL_PRESETS.get(self.model.preset or "")
        return () if preset is None else preset.pools

    def _lacks(self, pool: str) -> str:
        """Why a key names a pool the model does not have, with what the preset brought."""
        brought = self._preset_pools()
        lacks = f"the model has no {pool} pool"
        if pool in brought:
            return f"{lacks} (model.{pool} is null, dropping the preset's)"
        if brought:
            return f"{lacks} (preset {self.model.preset} brings {', '.join(brought)})"
        return lacks

    def storage_pool(self, pool: str) -> StoragePoolSpec:
        """A pool's storage settings; pools left out of the YAML get the defaults."""
        return self.storage.pools.get(pool, StoragePoolSpec())

    def trace_path(self) -> Path | None:
        """The replayed trace; `load_scenario` made a relative one absolute (docs/scenarios.md)."""
        return self.workload.trace_path()

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Scenario:
        """Validated against the registries (`scenario_model`) when called on `Scenario`."""
        if cls is Scenario:
            return scenario_model().model_validate(obj, **kwargs)
        return super().model_validate(obj, **kwargs)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON Schema of scenario files for the registries as they are now."""
        if cls is Scenario:
            return scenario_model().model_json_schema(*args, **kwargs)
        return super().model_json_schema(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the resolved document (the validating class is built at run time), with
        where its values came from and what the scenario wrote."""
        return (_restore, (scenario_document(self), self._sources.of, self._written))

    def __eq__(self, other: object) -> bool:
        """The same scenario: the same values, wherever they came from."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return isinstance(other, Scenario) and self.__dict__ == other.__dict__

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Scenario:
        """A variant: the updated sections count as written by the scenario, so a sweep or a
        capacity search over the copy starts from them."""
        clone = super().model_copy(update=update, deep=deep)
        if update:
            written = copy.deepcopy(self._written)
            sources = {
                key: source
                for key, source in self._sources.of.items()
                if key.split(".")[0] not in update
            }
            for key, value in update.items():
                plain = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
                written[key] = plain
                sources.update({leaf: USER for leaf in leaves({key: plain})})
            clone._written, clone._sources = written, Sources(sources)
        return clone

    @property
    def sources(self) -> Sources:
        """Where each value came from: the scenario, a profile, a derivation or the default."""
        return self._sources

    @property
    def written(self) -> dict[str, Any]:
        """What the scenario wrote (file and overrides), before profiles and derivations: the
        base a sweep point or a capacity evaluation sets its keys on."""
        return copy.deepcopy(self._written)


def _one_of(registry: Registry[Any]) -> Any:
    """`Literal[...]` of a registry's names, so the schema and its errors list them."""
    return Literal.__getitem__(registry.names())


def _pool_map() -> Any:
    """`dict[Literal[pool names], StoragePoolSpec]`: `storage.pools` names only known pools."""
    return dict[_one_of(POOL_KINDS), StoragePoolSpec]  # type: ignore[misc]


def _default(model: type[Strict], field: str) -> Any:
    return model.model_fields[field].default


def scenario_model() -> type[Scenario]:
    """The validating scenario class for the registries as they are now.

    The fields whose accepted values come from a registry (pools, heal rules, hit queries,
    policies, workload kinds, model presets) are declared loosely on `Scenario` and its parts,
    which is what the rest of the code is typed against; this subclass tightens them, and is
    rebuilt when a registry changes.
    """
    registries = (
        POOL_KINDS,
        RULES,
        HIT_QUERIES,
        PREFETCH_POLICIES,
        WORKLOAD_KINDS,
        MODEL_PRESETS,
        ROUTERS,
        SGLANG_ERAS,
        STORAGE_BACKENDS,
        GPUS,
    )
    return _schema(*(r.version for r in registries))


def _profile_names(registry: Registry[Any]) -> Any:
    """`Literal[...]` of a profile registry's names and `custom`, or null."""
    return Literal.__getitem__((*registry.names(), CUSTOM)) | None  # type: ignore[operator]


@cache
def _schema(*versions: int) -> type[Scenario]:
    aux = [kind for kind in POOL_KINDS.values() if kind.name != KV]
    model = create_model(
        "ModelSpec",
        __base__=ModelSpec,
        __doc__=ModelSpec.__doc__,
        preset=(_one_of(MODEL_PRESETS) | None, None),
        **{kind.name: (kind.spec | None, None) for kind in aux},  # type: ignore[call-overload]
    )
    device = create_model(
        "DeviceSpec",
        __base__=DeviceSpec,
        __doc__=DeviceSpec.__doc__,
        **{kind.device_key: (NonNegInt | None, None) for kind in aux},  # type: ignore[call-overload]
    )
    storage = create_model(
        "StorageSpec",
        __base__=StorageSpec,
        hit_query=(_one_of(HIT_QUERIES), _default(StorageSpec, "hit_query")),
        pools=(_pool_map(), Field(default_factory=dict)),
        backend=(_profile_names(STORAGE_BACKENDS), None),
    )
    server = create_model(
        "ServerSpec",
        __base__=ServerSpec,
        __doc__=ServerSpec.__doc__,
        sglang=(_profile_names(SGLANG_ERAS), None),
    )
    hardware = create_model(
        "HardwareSpec",
        __base__=HardwareSpec,
        __doc__=HardwareSpec.__doc__,
        gpu=(_profile_names(GPUS), None),
    )
    prefetch = create_model(
        "PrefetchSpec",
        __base__=PrefetchSpec,
        policy=(_one_of(PREFETCH_POLICIES), _default(PrefetchSpec, "policy")),
    )
    cluster = create_model(
        "ClusterSpec",
        __base__=ClusterSpec,
        __doc__=ClusterSpec.__doc__,
        router=(
            _tagged(ROUTERS, "policy"),
            Field(default_factory=ROUTERS[DEFAULT_ROUTER]),
        ),
    )
    workload = _tagged(WORKLOAD_KINDS, "kind")
    return cast(
        type[Scenario],
        create_model(
            "Scenario",
            __base__=Scenario,
            __doc__=Scenario.__doc__,
            server=(server, Field(default_factory=server)),
            hardware=(hardware, Field(default_factory=hardware)),
            model=(model, ...),
            device=(device, ...),
            storage=(storage, Field(default_factory=storage)),
            prefetch=(prefetch, Field(default_factory=prefetch)),
            heal=(_one_of(RULES), _default(Scenario, "heal")),
            workload=(workload, ...),
            cluster=(cluster, Field(default_factory=cluster)),
        ),
    )


def _tagged(registry: Registry[Any], tag: str) -> Any:
    """The union of a registry's specs, told apart by their `tag` field."""
    for name, spec in registry.items():
        if get_args(spec.model_fields[tag].annotation) != (name,):
            raise ValueError(
                f"{registry.what} {name!r}: its spec's `{tag}` must be Literal[{name!r}]"
            )
    specs = tuple(registry.values())
    return specs[0] if len(specs) == 1 else Annotated[Union[specs], Field(discriminator=tag)]  # noqa: UP007


def build_scenario(doc: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a plain mapping; errors name `source` and every offending dotted key.

    The profiles the document names are layered under it and what SGLang derives from them is
    filled in (`sim.deployment.resolve`); size strings ('80GiB', '65536 tokens') are converted
    to each key's unit. Every problem is reported at once, each with the value it got, the unit
    it expects and, for a misspelt key or choice, the nearest known one.
    """
    written = copy.deepcopy(doc)
    profiled = layer_profiles(written)
    doc = copy.deepcopy(profiled.doc)
    model = _expanded_model(doc.get("model"))
    _label_preset(model, written, profiled.sources)
    problems: list[tuple[str | None, str]] = [
        *profiled.problems,
        *((e.key, e.message) for e in normalize_sizes(doc, model)),
    ]
    derived = derive(doc, model, profiled.sources, schema_default)
    problems += [(e.key, str(e).split(": ", 1)[1]) for e in derived]
    _list_every_storage_pool(doc)
    known = {key for key, _ in problems}
    try:
        scenario = scenario_model().model_validate(doc)
    except RecursionError:
        raise ScenarioError(source, None, "nested too deeply") from None
    except ValidationError as exc:
        for err in exc.errors():
            key, message = _describe(err, doc)
            if key not in known:
                problems.append((key, message))
    else:
        if not problems:
            scenario._sources = profiled.sources
            scenario._written = written
            return scenario
    if not problems:
        raise ScenarioError(source, None, "invalid scenario")
    (key, message), *more = problems
    raise ScenarioError(source, key, message, more)


def schema_default(key: str) -> Any:
    """The schema's default of a dotted key (None where it has none)."""
    model: Any = scenario_model()
    *path, leaf = key.split(".")
    for part in path:
        model = _field_model(model, part, None)
        if model is None:
            return None
    field = getattr(model, "model_fields", {}).get(leaf)
    if field is None:
        return None
    return field.default_factory() if field.default_factory is not None else field.default


def _restore(doc: dict[str, Any], sources: dict[str, str], written: dict[str, Any]) -> Scenario:
    """A pickled scenario: its resolved document validated again, its provenance kept."""
    scenario = build_scenario(doc, "<pickled scenario>")
    scenario._sources = Sources(dict(sources))
    scenario._written = written
    return scenario


def _label_preset(model: Any, written: dict[str, Any], sources: Sources) -> None:
    """Mark the model values a preset brought (those the document does not write)."""
    name = model.get("preset") if isinstance(model, dict) else None
    if not isinstance(name, str) or name not in MODEL_PRESETS:
        return
    for key in leaves(model, "model"):
        if not has(written, key):
            sources.of[key] = f"preset {name}"


def _expanded_model(model: Any) -> Any:
    """The model section with its preset expanded (as validation will see it); unchanged when
    there is none or it is unknown (validation reports that)."""
    try:
        return expand_preset(model)
    except (KeyedError, ValueError, TypeError):
        return model


def _list_every_storage_pool(doc: dict[str, Any]) -> None:
    """A pool the model has but `storage.pools` leaves out is stored with the defaults
    (unbounded, fault-free); writing it into the document puts it in the resolved
    configuration, so a capacity answer never rests on a pool nobody can see."""
    missing = defaulted_storage_pools(doc)
    storage = doc.setdefault("storage", {})
    if missing and isinstance(storage, dict) and isinstance(storage.setdefault("pools", {}), dict):
        storage["pools"].update({name: {} for name in missing})


def defaulted_storage_pools(raw: dict[str, Any]) -> list[str]:
    """The model's pools a raw document leaves out of `storage.pools` (they get the defaults)."""
    model, storage = _mapping(_expanded_model(raw.get("model"))), _mapping(raw.get("storage"))
    given = _mapping(storage.get("pools"))
    return [n for n in POOL_KINDS if isinstance(model.get(n), dict) and n not in given]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _describe(err: Any, doc: dict[str, Any]) -> tuple[str | None, str]:
    """A pydantic error as (dotted key, message with the value got, the unit and a guess)."""
    loc = err["loc"]
    ctx_error = err.get("ctx", {}).get("error")
    if isinstance(ctx_error, KeyedError):
        return ctx_error.key, str(ctx_error).split(": ", 1)[1]
    parts = [str(p) for i, p in enumerate(loc) if not _is_union_tag(p, loc[:i]) and p != "[key]"]
    key = ".".join(parts) if loc else None
    kind = err["type"]
    if kind == "extra_forbidden":
        guess = _nearest(parts[-1] if parts else "", _known_keys(parts[:-1], doc))
        owners = _tagged_owners(parts)
        if owners:
            return key, f"unknown key here: it is a key of {' and '.join(owners)}"
        return key, "unknown key" + (f"; did you mean {guess!r}?" if guess else "")
    if kind == "missing":
        return key, "required key is missing"
    message = err["msg"]
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        key = f"{key}.{str(ctx.get('discriminator', '')).strip(chr(39))}"
        expected_tags = str(ctx.get("expected_tags", ""))
        message = f"must be one of {expected_tags.replace(chr(39), '')}"
        guess = _nearest(str(ctx.get("tag")), re.findall(r"'([^']*)'", expected_tags))
        message += f"; did you mean {guess!r}?" if guess else ""
        return key, f"{message} (got {_brief_repr(ctx.get('tag'))})"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        guess = _nearest(str(err.get("input")), choices)
        if guess:
            message += f"; did you mean {guess!r}?"
    hint = _unit_hint(key or "", doc)
    got = err.get("input")
    if kind not in ("model_type", "dict_type", "model_attributes_type") and not isinstance(
        got, dict
    ):
        message += f" (got {_brief_repr(got)}{'; expected ' + hint if hint else ''})"
    return key, message


def _brief_repr(value: Any) -> str:
    """A bad value, briefly: one built from nested YAML aliases can be astronomically large."""
    echo = reprlib.Repr()
    echo.maxlevel, echo.maxlist, echo.maxdict = 2, 4, 4
    echo.maxstring = echo.maxother = 60
    return echo.repr(value)


def _unit_hint(key: str, doc: dict[str, Any]) -> str:
    for size in size_keys(doc):
        if size.key == key:
            return expected(size)
    return param_hint(key)


def _nearest(word: str, known: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _known_keys(path: list[str], doc: dict[str, Any]) -> list[str]:
    """The keys the schema accepts at a dotted path (for 'did you mean')."""
    model: Any = scenario_model()
    node: Any = doc
    for part in path:
        model = _field_model(model, part, node)
        node = node.get(part) if isinstance(node, dict) else None
        if model is None:
            return []
    fields = getattr(model, "model_fields", None)
    return list(fields) if fields else []


def _field_model(model: Any, part: str, node: Any) -> Any:
    """The model class of one field (through Optional, unions and `dict[str, Model]`)."""
    fields = getattr(model, "model_fields", None)
    if fields is None:
        args = get_args(model)
        return args[1] if len(args) == 2 and args[0] is not None else None
    field = fields.get(part)
    if field is None:
        return None
    for registry, tag, default in _TAGGED.get(part, ()):
        name = _mapping(_mapping(node).get(part)).get(tag, default)
        return registry.get(name) if isinstance(name, str) else None
    candidates = [field.annotation, *get_args(field.annotation)]
    for candidate in candidates:
        if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
            return candidate
        if get_args(candidate) and getattr(candidate, "__origin__", None) is dict:
            return candidate
    return None


_TAGGED: dict[str, tuple[tuple[Registry[Any], str, str | None], ...]] = {
    "workload": ((WORKLOAD_KINDS, "kind", None),),
    "router": ((ROUTERS, "policy", DEFAULT_ROUTER),),
}
"""Parts that are a union of registered specs: (registry, tag field, default tag)."""


def _tagged_owners(parts: list[str]) -> list[str]:
    """For a key unknown inside a tagged part (`cluster.router.prefix_tokens` under
    cache_aware): the tags whose specs do have it."""
    if len(parts) < 2:
        return []
    return [
        f"{tag} {name}"
        for registry, tag, _ in _TAGGED.get(parts[-2], ())
        for name, spec in registry.items()
        if parts[-1] in spec.model_fields
    ]


def _is_union_tag(part: Any, before: tuple[Any, ...]) -> bool:
    """Pydantic inserts the discriminator value ('shared_prefix') into error locations, after
    the name of the tagged part."""
    return bool(before) and any(part in reg for reg, _, _ in _TAGGED.get(str(before[-1]), ()))


def load_scenario(
    path: str | Path, overrides: list[str] | dict[str, Any] | None = None
) -> Scenario:
    """Load and validate a scenario YAML file, applying `--set` style overrides.

    A relative path is relative to where it was written: one in the file to the file's folder,
    one given as an override to the current directory (as any path on a command line is). The
    file's own paths are made absolute before the overrides are applied, so whatever is still
    relative afterwards came from an override.
    """
    path = Path(path)
    doc = read_document(path)
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else list((overrides or {}).items())
    )
    resolve_paths(doc, path.parent)
    for key, value in items:
        apply_override(doc, key, value)
    resolve_paths(doc, Path.cwd())
    return build_scenario(doc, str(path))


PATH_KEYS = (("workload", "path"), ("hardware", "calibration"))
"""The keys that name files: a trace, a calibration file."""


def resolve_paths(doc: dict[str, Any], base_dir: Path) -> None:
    """Make relative file paths (`workload.path`, `hardware.calibration`) relative to
    `base_dir`, in place (absolute paths stay)."""
    for section, key in PATH_KEYS:
        part = doc.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str):
            path = Path(part[key])
            if not path.is_absolute():
                part[key] = str(base_dir.resolve() / path)


def check_references(scenario: Scenario, source: str) -> None:
    """Everything `validate` can check beyond the schema: referenced files exist and are read."""
    trace = scenario.trace_path()
    if trace is None:
        return
    try:
        found = trace.is_file()
    except OSError as exc:
        raise ScenarioError(
            source, "workload.path", f"cannot access trace: {exc.strerror}"
        ) from None
    if not found:
        raise ScenarioError(source, "workload.path", f"trace file not found: {trace}")


def point_document(
    scenario: Scenario, values: Iterable[tuple[str, Any]], source: str
) -> dict[str, Any]:
    """What a sweep point or a capacity evaluation runs: the scenario as it was written, without
    its sweep, with these keys set, so that the profiles, the preset and every derived size
    follow the new values as they would in the file."""
    doc = scenario.written
    doc.pop("sweep", None)
    for key, value in values:
        apply_override(doc, key, value, source=source)
    return doc


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The fully resolved scenario as plain data, defaults included (for config.resolved.yaml)."""
    return scenario.model_dump(mode="json", exclude_none=False)
