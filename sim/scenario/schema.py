"""Scenario schema: the single home of every default.

A scenario is a frozen, strictly validated tree of pydantic models. Unknown keys are rejected at
any depth, ranges are checked, and cross-field rules (a pool the model lacks, block sizes that
do not divide into pages) are enforced here so that the model and the engine can trust their
input. The parts that name an implementation — pool kinds, heal rules, hit queries, prefetch
policies, workload kinds, model presets — are taken from the registries of those extension
points, so the schema accepts exactly what is registered (each section's keys are in
`sim.scenario.sections`; how a problem is told, in `sim.scenario.errors`). Turning a document
or a YAML file into a `Scenario` — profiles, presets, derived sizes, every problem told at once
— is `sim.scenario.loading`, which builds on this schema.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)

from sim.cluster.routing import DEFAULT_ROUTER, ROUTERS
from sim.core.documents import overlapping
from sim.core.spec import KeyedError, NonNegFloat, NonNegInt, ScenarioError, Strict
from sim.deployment.hardware import GPUS
from sim.deployment.profiles import (
    SGLANG_RELEASES,
    STORAGE_BACKENDS,
    backend_refusal,
    refusals,
)
from sim.deployment.resolve import USER, Sources, leaves
from sim.heal import RULES
from sim.model.pools import KV, POOL_KINDS
from sim.model.prefetch_policies import PREFETCH_POLICIES
from sim.model.presets import MODEL_PRESETS
from sim.model.storage import HIT_QUERIES
from sim.scenario.errors import describe, field_model
from sim.scenario.model_section import ModelSpec
from sim.scenario.sections import (
    MAX_DURATION_S,
    ClusterSpec,
    ComputeSpec,
    CostsSpec,
    DeviceSpec,
    ExistenceCacheSpec,
    GbMonthUsd,
    GpuHourUsd,
    HardwareSpec,
    HostSpec,
    PrefetchSpec,
    ServerSpec,
    StoragePoolSpec,
    StorageSpec,
    SweepSpec,
    default,
    defaulted_storage_pools,
    one_of,
    pool_map,
    priced,
    profile_names,
    release_name,
    tagged,
)
from sim.workload.catalog import WORKLOAD_KINDS
from sim.workload.concurrency import ConcurrencyWorkload
from sim.workload.kinds import (
    MooncakeWorkload,
    MultiturnWorkload,
    SharedPrefixWorkload,
    WorkloadSpec,
)

__all__ = [
    "ConcurrencyWorkload",
    "MooncakeWorkload",
    "MultiturnWorkload",
    "Scenario",
    "ScenarioError",
    "SharedPrefixWorkload",
    "defaulted_storage_pools",
    "scenario_model",
]


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
    costs: CostsSpec | None = None
    """Prices for `hicache-sim plan`; like `sweep`, not part of what a run simulates."""
    _sources: Sources = PrivateAttr(default_factory=Sources)
    _written: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        pools = self.model.pools
        if self.warmup_s >= self.duration_s:
            raise KeyedError("warmup_s", "must be smaller than duration_s")
        release = SGLANG_RELEASES.get(self.server.sglang or "")
        if release is not None:
            for key, message in refusals(release, pools, self.host.mode):
                raise KeyedError(key, message)
            backend = STORAGE_BACKENDS.get(self.storage.backend or "")
            refused = None if backend is None else backend_refusal(release, backend)
            if refused is not None:
                raise KeyedError("storage.backend", refused)
        if "mamba" in pools and self.host.mem_layout == "layer_first":
            raise KeyedError(
                "host.mem_layout",
                "SGLang's Mamba host pool needs page_first or page_first_direct "
                "(MambaPoolHost asserts it)",
            )
        for kind in POOL_KINDS.values():
            device_key = kind.device_key
            if kind.name == KV or device_key is None:
                continue
            present = getattr(self.device, device_key, None) is not None
            if present and kind.name not in pools:
                raise KeyedError(f"device.{device_key}", self._lacks(kind.name))
            if not present and kind.name in pools:
                why = (
                    f"preset {self.model.preset} brings a {kind.name} pool"
                    if kind.name in self._preset_pools()
                    else f"the model has a {kind.name} pool"
                )
                raise KeyedError(f"device.{device_key}", f"required because {why}")
        self._check_host_staging()
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
            self._check_overlaps()
        return self

    def _check_overlaps(self) -> None:
        """A swept key and its ancestor (`cluster.instances` and `cluster`) on one point: the
        later would write into or over the earlier's value, so points labelled apart would run
        alike and the records would show values nobody wrote."""
        assert self.sweep is not None
        groups = [("sweep.grid", list(self.sweep.grid))]
        for label, sets in self.sweep.variants.items():
            groups.append((f"sweep.variants.{label}", [*self.sweep.grid, *sets]))
        for where, keys in groups:
            pair = overlapping(keys)
            if pair is not None:
                upper, lower = pair
                if lower in self.sweep.grid:
                    where = "sweep.grid"
                raise KeyedError(
                    f"{where}.{lower}",
                    f"lies inside {upper}, which the sweep also sets; sweep one of the two",
                )

    def _check_host_staging(self) -> None:
        """An aux pool's host staging must exist for its pool and, in buffer_only mode, hold
        two windows: one staging a write while one stays for a prefetch (SGLang's
        `validate_buffer_only_stack` refuses to start otherwise)."""
        for kind in POOL_KINDS.values():
            pages = self.host.staging_pages(kind.name)
            spec = self.model.pool_spec(kind.name)
            if not kind.stages_on_host or pages is None or spec is None:
                continue
            key = f"host.{kind.name}_pages"
            window = spec.tail_pages(self.model.page_size)
            if self.host.mode == "buffer_only" and window is not None and pages < 2 * window:
                raise KeyedError(
                    key,
                    f"SGLang refuses buffer_only mode with a host {kind.name} pool of less than "
                    f"two windows ({2 * window} pages of {self.model.page_size} tokens; "
                    f"got {pages}): one stages a write while one stays for prefetch windows "
                    "(validate_buffer_only_stack)",
                )

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


Restore = Callable[[dict[str, Any], dict[str, str], dict[str, Any]], Scenario]

_restore: Restore
"""How `Scenario.__reduce__` has a pickled scenario rebuilt (`restores_pickles` sets it)."""


def restores_pickles(restore: Restore) -> Restore:
    """Name the function that rebuilds a pickled scenario: `sim.scenario.loading` validates its
    document again through `build_scenario`, which builds on this schema, so the schema cannot
    import it (that would be an import circle)."""
    global _restore
    _restore = restore
    return restore


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
        SGLANG_RELEASES,
        STORAGE_BACKENDS,
        GPUS,
    )
    return _schema(*(r.version for r in registries))


@cache
def _schema(*versions: int) -> type[Scenario]:
    aux = [kind for kind in POOL_KINDS.values() if kind.name != KV]
    model = create_model(
        "ModelSpec",
        __base__=ModelSpec,
        __doc__=ModelSpec.__doc__,
        preset=(one_of(MODEL_PRESETS) | None, None),
        **{kind.name: (kind.spec | None, None) for kind in aux},  # type: ignore[call-overload]
    )
    device_keys = [kind.device_key for kind in aux if kind.device_key is not None]
    device = create_model(
        "DeviceSpec",
        __base__=DeviceSpec,
        __doc__=DeviceSpec.__doc__,
        **{key: (NonNegInt | None, None) for key in device_keys},  # type: ignore[call-overload]
    )
    storage = create_model(
        "StorageSpec",
        __base__=StorageSpec,
        hit_query=(one_of(HIT_QUERIES), default(StorageSpec, "hit_query")),
        pools=(pool_map(), Field(default_factory=dict)),
        backend=(profile_names(STORAGE_BACKENDS), None),
    )
    server = create_model(
        "ServerSpec",
        __base__=ServerSpec,
        __doc__=ServerSpec.__doc__,
        sglang=(release_name(), None),
    )
    hardware = create_model(
        "HardwareSpec",
        __base__=HardwareSpec,
        __doc__=HardwareSpec.__doc__,
        gpu=(profile_names(GPUS), None),
    )
    prefetch = create_model(
        "PrefetchSpec",
        __base__=PrefetchSpec,
        policy=(one_of(PREFETCH_POLICIES), default(PrefetchSpec, "policy")),
    )
    cluster = create_model(
        "ClusterSpec",
        __base__=ClusterSpec,
        __doc__=ClusterSpec.__doc__,
        router=(
            tagged(ROUTERS, "policy"),
            Field(default_factory=ROUTERS[DEFAULT_ROUTER]),
        ),
    )
    costs: Any = create_model(
        "CostsSpec",
        __base__=CostsSpec,
        __doc__=CostsSpec.__doc__,
        gpu_hour_usd=(priced(GPUS, GpuHourUsd), Field(default_factory=dict)),
        storage_gb_month_usd=(priced(POOL_KINDS, GbMonthUsd), Field(default_factory=dict)),
    )
    workload = tagged(WORKLOAD_KINDS, "kind")
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
            heal=(one_of(RULES), default(Scenario, "heal")),
            workload=(workload, ...),
            cluster=(cluster, Field(default_factory=cluster)),
            costs=(costs | None, None),
        ),
    )


def schema_default(key: str) -> Any:
    """The schema's default of a dotted key (None where it has none)."""
    model: Any = scenario_model()
    *path, leaf = key.split(".")
    for part in path:
        model = field_model(model, part, None)
        if model is None:
            return None
    field = getattr(model, "model_fields", {}).get(leaf)
    if field is None:
        return None
    return field.default_factory() if field.default_factory is not None else field.default


def schema_refusal(key: str, value: Any) -> str | None:
    """Why the schema refuses `value` at dotted key `key`, in its own words (None: it takes it,
    or the key is not one of its fields): what SGLang's rules derive from a value must not run
    on one the schema will refuse."""
    model: Any = scenario_model()
    *path, leaf = key.split(".")
    for part in path:
        model = field_model(model, part, None)
        if model is None:
            return None
    fields = getattr(model, "model_fields", {})
    if leaf not in fields:
        return None
    try:
        _field_adapter(model, leaf).validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        return describe({**err, "loc": tuple(key.split("."))}, {}, scenario_model())[1]
    return None


@cache
def _field_adapter(model: Any, leaf: str) -> TypeAdapter[Any]:
    field = model.model_fields[leaf]
    annotated: Any = Annotated[field.annotation, field]
    return TypeAdapter(annotated)


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The fully resolved scenario as plain data, defaults included (for config.resolved.yaml).

    A scenario without prices has no `costs` key, so the documents (and the task hashes a sweep
    resumes by) of scenarios written before the section existed are unchanged."""
    doc = scenario.model_dump(mode="json", exclude_none=False)
    if doc.get("costs") is None:
        doc.pop("costs", None)
    return doc
