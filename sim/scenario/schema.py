"""Scenario schema and loading: the single home of every default.

A scenario is a frozen, strictly validated tree of pydantic models. Unknown keys are rejected at
any depth, ranges are checked, and cross-field rules (a pool the model lacks, block sizes that
do not divide into pages) are enforced here so that the model and the engine can trust their
input. The parts that name an implementation — pool kinds, heal rules, hit queries, prefetch
policies, workload kinds, model presets — are taken from the registries of those extension
points, so the schema accepts exactly what is registered (each section's keys are in
`sim.scenario.sections`; how a problem is told, in `sim.scenario.errors`). A model preset is
expanded before anything is validated: its derived pool specs become the defaults of `model:`.
`load_scenario` turns a YAML file (read by `sim.core.documents`) plus `--set` overrides into a
`Scenario`, and every failure becomes a `ScenarioError` that names the file and the offending key.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
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
from sim.core.documents import (
    apply_override,
    overlapping,
    parse_override,
    read_document,
    resolve_paths,
    value_at,
)
from sim.core.safe_io import UnreadableFile, check_regular
from sim.core.spec import (
    COMMAND_LINE_SET,
    KeyedError,
    NonNegFloat,
    NonNegInt,
    ScenarioError,
    Strict,
)
from sim.deployment.hardware import GPUS
from sim.deployment.profiles import SGLANG_RELEASES, STORAGE_BACKENDS, refusals
from sim.deployment.resolve import USER, Sources, derive, has, layer_profiles, leaves
from sim.heal import RULES
from sim.model.pools import KV, POOL_KINDS
from sim.model.prefetch import PREFETCH_POLICIES
from sim.model.presets import MODEL_PRESETS
from sim.model.storage import HIT_QUERIES
from sim.scenario.errors import describe, field_model, mapping
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
    ModelSpec,
    PrefetchSpec,
    ServerSpec,
    StoragePoolSpec,
    StorageSpec,
    SweepSpec,
    default,
    defaulted_storage_pools,
    expanded_model,
    list_every_storage_pool,
    one_of,
    pool_map,
    priced,
    profile_names,
    release_name,
    tagged,
)
from sim.scenario.sizes import normalize_sizes
from sim.workload.kinds import (
    MAX_TRACE_FILE_BYTES,
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
    device = create_model(
        "DeviceSpec",
        __base__=DeviceSpec,
        __doc__=DeviceSpec.__doc__,
        **{kind.device_key: (NonNegInt | None, None) for kind in aux},  # type: ignore[call-overload]
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
    model = expanded_model(doc.get("model"))
    _label_preset(model, written, profiled.sources)
    problems: list[tuple[str | None, str]] = [
        *profiled.problems,
        *((e.key, e.message) for e in normalize_sizes(doc, model)),
    ]
    derived = derive(doc, model, profiled.sources, schema_default, schema_refusal)
    problems += [(e.key, str(e).split(": ", 1)[1]) for e in derived]
    list_every_storage_pool(doc)
    known = {key for key, _ in problems}
    if derived:
        known.add("device.kv_pages")  # not sized, and the derivation has said why
    try:
        scenario = scenario_model().model_validate(doc)
    except RecursionError:
        raise ScenarioError(source, None, "nested too deeply") from None
    except ValidationError as exc:
        for err in exc.errors():
            key, message = describe(err, doc, scenario_model())
            if key not in known:
                problems.append((key, message))
    else:
        if not problems:
            scenario._sources = profiled.sources
            scenario._written = written
            return scenario
    problems = _without_follow_ons(problems, doc)
    if not problems:
        raise ScenarioError(source, None, "invalid scenario")
    (key, message), *more = problems
    raise ScenarioError(source, key, message, more)


def _without_follow_ons(
    problems: list[tuple[str | None, str]], doc: dict[str, Any]
) -> list[tuple[str | None, str]]:
    """With an unknown `model.preset`, a size written with a unit ('40GiB') cannot be
    converted (the model is unknown) and the schema refuses it as not a number: that is the
    preset's fault, told once, not one more error per size."""
    preset = mapping(doc.get("model")).get("preset")
    if not isinstance(preset, str) or preset in MODEL_PRESETS:
        return problems
    kept = []
    for key, message in problems:
        value = value_at(doc, key) if key else None
        if key != "model.preset" and isinstance(value, str) and _is_size_key(key):
            continue
        kept.append((key, message))
    return kept


def _is_size_key(key: str | None) -> bool:
    return bool(key) and (
        str(key).startswith("device.")
        or key in ("host.pages", "host.swa_pages")
        or str(key).endswith(".capacity_gb")
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
    try:
        return build_scenario(doc, str(path))
    except ScenarioError as exc:
        raise _labelled(exc, [key for key, _ in items], doc) from None


def _labelled(exc: ScenarioError, overridden: list[str], doc: dict[str, Any]) -> ScenarioError:
    """The same problems, each under the input it came from: a key set with `--set` is the
    command line's (`--set device.kv_pages: ...`), not the file's; and a trace file that is
    missing is told beside the schema's problems rather than after they are fixed."""
    problems = []
    for key, message in exc.problems:
        if key and any(
            key == o or key.startswith(f"{o}.") or o.startswith(f"{key}.") for o in overridden
        ):
            key = f"{COMMAND_LINE_SET} {key}"
        problems.append((key, message))
    trace = _missing_trace(doc)
    if trace and not any(k and k.endswith("workload.path") for k, _ in problems):
        problems.append(trace)
    (key, message), *more = problems
    return ScenarioError(exc.source, key, message, more)


def _missing_trace(doc: dict[str, Any]) -> tuple[str, str] | None:
    workload = mapping(doc.get("workload"))
    path = workload.get("path")
    if not isinstance(path, str):
        return None
    try:
        if Path(path).is_file():
            return None
    except OSError:
        return None
    return ("workload.path", f"trace file not found: {path}")


def check_references(scenario: Scenario, source: str) -> None:
    """Everything `validate` can check beyond the schema: referenced files exist and are read."""
    trace = scenario.trace_path()
    if trace is None:
        return
    try:
        found = trace.exists()
        check_regular(trace, limit=MAX_TRACE_FILE_BYTES)
    except OSError as exc:
        raise ScenarioError(
            source, "workload.path", f"cannot access trace: {exc.strerror}"
        ) from None
    except UnreadableFile as exc:
        raise ScenarioError(source, "workload.path", f"cannot read trace: {exc}") from None
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
    doc.pop("costs", None)
    for key, value in values:
        apply_override(doc, key, copy.deepcopy(value), source=source)
    return doc


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The fully resolved scenario as plain data, defaults included (for config.resolved.yaml).

    A scenario without prices has no `costs` key, so the documents (and the task hashes a sweep
    resumes by) of scenarios written before the section existed are unchanged."""
    doc = scenario.model_dump(mode="json", exclude_none=False)
    if doc.get("costs") is None:
        doc.pop("costs", None)
    return doc
