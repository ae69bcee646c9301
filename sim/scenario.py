"""Scenario schema and loading: the single home of every default.

A scenario is a frozen, strictly validated tree of pydantic models. Unknown keys are rejected at
any depth, ranges are checked, and cross-field rules (a pool the model lacks, block sizes that
do not divide into pages) are enforced here so that the model and the engine can trust their
input. `load_scenario` turns a YAML file plus `--set` overrides into a `Scenario`, and every
failure becomes a `ScenarioError` that names the file and the offending key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

POOL_NAMES = ("kv", "swa", "mamba")
AUX_POOLS = ("swa", "mamba")


class ScenarioError(Exception):
    """Bad input: names the file and the key; the CLI maps it to exit code 2."""

    def __init__(self, source: str, key: str | None, message: str) -> None:
        super().__init__(source, key, message)
        self.source = source
        self.key = key
        self.message = message

    def __str__(self) -> str:
        if self.key is None:
            return f"{self.source}: {self.message}"
        return f"{self.source}: {self.key or repr('')}: {self.message}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)


PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
Probability = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
PositiveFloat = Annotated[float, Field(strict=True, gt=0.0)]
NonNegFloat = Annotated[float, Field(strict=True, ge=0.0)]


Bytes = Annotated[int, Field(strict=True, ge=1, le=2**40)]
"""Object and token sizes: bounded so byte arithmetic stays within floats (a TiB per object)."""


class KVPoolSpec(_Strict):
    bytes_per_token: Bytes


class SWAPoolSpec(_Strict):
    window_tokens: Annotated[int, Field(strict=True, ge=1, le=2**24)]
    bytes_per_token: Bytes


class MambaPoolSpec(_Strict):
    state_bytes: Bytes


class ModelSpec(_Strict):
    page_size: Annotated[int, Field(strict=True, ge=1, le=2**16)] = 64
    kv: KVPoolSpec
    swa: SWAPoolSpec | None = None
    mamba: MambaPoolSpec | None = None

    @property
    def pools(self) -> tuple[str, ...]:
        """The pools this model has, KV first."""
        return ("kv", *(p for p in AUX_POOLS if getattr(self, p) is not None))

    @property
    def aux_pools(self) -> tuple[str, ...]:
        return self.pools[1:]

    @property
    def window_pages(self) -> int:
        """Pages of SWA history a request resuming at a page boundary needs."""
        return math.ceil(self.swa.window_tokens / self.page_size) if self.swa else 0


class DeviceSpec(_Strict):
    kv_pages: PositiveInt
    swa_pages: NonNegInt | None = None
    mamba_slots: NonNegInt | None = None


class HostSpec(_Strict):
    mode: Literal["buffer_only", "cache"] = "buffer_only"
    pages: PositiveInt
    pcie_gbps: PositiveFloat = 50.0


class StoragePoolSpec(_Strict):
    capacity_gb: Annotated[float, Field(strict=True, ge=0.0, le=1e9)] | None = None
    get_fail_prob: Probability = 0.0
    put_fail_prob: Probability = 0.0
    evict_rate_per_s: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 0.0
    put_outage_s: tuple[NonNegFloat, NonNegFloat] | None = None

    @model_validator(mode="after")
    def _outage_ordered(self) -> StoragePoolSpec:
        if self.put_outage_s is not None and self.put_outage_s[1] < self.put_outage_s[0]:
            raise ValueError("put_outage_s must be [start_s, end_s] with start_s <= end_s")
        return self


class StorageSpec(_Strict):
    hit_query: Literal["kv_only", "intersect", "min_of_pools"] = "kv_only"
    read_gbps: PositiveFloat = 10.0
    write_gbps: PositiveFloat = 5.0
    exists_latency_ms: NonNegFloat = 0.5
    pools: dict[Literal["kv", "swa", "mamba"], StoragePoolSpec] = Field(default_factory=dict)


class ExistenceCacheSpec(_Strict):
    entries: PositiveInt = 524288


class PrefetchSpec(_Strict):
    policy: Literal["best_effort", "timeout", "wait_complete"] = "timeout"
    threshold_tokens: NonNegInt = 256
    timeout_base_s: NonNegFloat = 1.0
    timeout_per_ki_token_s: NonNegFloat = 0.25


class ComputeSpec(_Strict):
    prefill_tokens_per_s: PositiveFloat = 20000.0
    decode_ms_per_token: NonNegFloat = 20.0


class SharedPrefixWorkload(_Strict):
    kind: Literal["shared_prefix"]
    prefixes: PositiveInt = 16
    prefix_tokens: PositiveInt = 4096
    zipf_s: NonNegFloat = 1.0
    suffix_tokens: NonNegInt = 32
    output_tokens: NonNegInt = 64
    arrival_rate_per_s: PositiveFloat = 4.0
    requests: PositiveInt = 1000


class MultiturnWorkload(_Strict):
    kind: Literal["multiturn"]
    sessions: PositiveInt = 100
    turns: PositiveInt = 5
    first_turn_tokens: PositiveInt = 2048
    turn_tokens: PositiveInt = 512
    output_tokens: NonNegInt = 128
    think_time_s: NonNegFloat = 5.0
    arrival_rate_per_s: PositiveFloat = 1.0


class MooncakeWorkload(_Strict):
    kind: Literal["mooncake"]
    path: str
    block_tokens: Annotated[int, Field(strict=True, ge=1, le=2**20)] = 512
    time_scale: PositiveFloat = 1.0
    limit: PositiveInt | None = None


Workload = Annotated[
    SharedPrefixWorkload | MultiturnWorkload | MooncakeWorkload, Field(discriminator="kind")
]


class SweepSpec(_Strict):
    seeds: PositiveInt = 1
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    target: (
        Annotated[str, Field(pattern=r"^\s*[a-z0-9_]+\s*(>=|<=)\s*-?[0-9.eE+-]+\s*$")] | None
    ) = None
    """Optional 'METRIC>=VALUE' drawn as a contour on heatmaps."""


class Scenario(_Strict):
    """One fully resolved simulation input."""

    name: Annotated[
        str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
    ]
    """Names the results folder, so it cannot start with a dot (no '..', no hidden folders)."""
    seed: NonNegInt = 0
    duration_s: PositiveFloat = 600.0
    warmup_s: NonNegFloat = 0.0
    model: ModelSpec
    device: DeviceSpec
    host: HostSpec
    storage: StorageSpec = Field(default_factory=StorageSpec)
    existence_cache: ExistenceCacheSpec = Field(default_factory=ExistenceCacheSpec)
    prefetch: PrefetchSpec = Field(default_factory=PrefetchSpec)
    heal: Literal["none", "keep_pages", "drop_chain", "exact"] = "keep_pages"
    compute: ComputeSpec = Field(default_factory=ComputeSpec)
    workload: Workload
    sweep: SweepSpec | None = None

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        pools = self.model.pools
        if self.warmup_s >= self.duration_s:
            raise _KeyedError("warmup_s", "must be smaller than duration_s")
        for pool, key in (("swa", "swa_pages"), ("mamba", "mamba_slots")):
            present = getattr(self.device, key) is not None
            if present and pool not in pools:
                raise _KeyedError(f"device.{key}", f"the model has no {pool} pool")
            if not present and pool in pools:
                raise _KeyedError(f"device.{key}", f"required because the model has a {pool} pool")
        for pool in self.storage.pools:
            if pool not in pools:
                raise _KeyedError(f"storage.pools.{pool}", f"the model has no {pool} pool")
        workload = self.workload
        if isinstance(workload, MooncakeWorkload) and workload.block_tokens % self.model.page_size:
            raise _KeyedError(
                "workload.block_tokens",
                f"{workload.block_tokens} is not a multiple of model.page_size "
                f"({self.model.page_size})",
            )
        if self.sweep is not None:
            for key in self.sweep.grid:
                if key.split(".")[0] == "sweep":
                    raise _KeyedError(f"sweep.grid.{key}", "a sweep cannot sweep itself")
        return self

    def storage_pool(self, pool: str) -> StoragePoolSpec:
        """A pool's storage settings; pools left out of the YAML get the defaults."""
        return self.storage.pools.get(pool, StoragePoolSpec())  # type: ignore[call-overload]

    def trace_path(self) -> Path | None:
        """The replayed trace; `load_scenario` already made it relative to the YAML's folder."""
        if not isinstance(self.workload, MooncakeWorkload):
            return None
        return Path(self.workload.path)


class _KeyedError(ValueError):
    """A cross-field error that knows which dotted key it is about."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


def _check_document(
    node: yaml.Node | None, path: str = "", active: frozenset[int] = frozenset()
) -> None:
    """Refuse, naming the dotted key: duplicate mapping keys (YAML would silently keep the
    last), aliases that contain themselves, and binary data (`!!binary` becomes bytes, which no
    scenario value is and which a value typed loosely, like a sweep grid's, would let through)."""
    if id(node) in active:
        raise ScenarioError("", path or None, "a YAML alias refers to itself")
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:binary":
        line = node.start_mark.line + 1
        raise ScenarioError("", path or None, f"binary data is not a scenario value (line {line})")
    active = active | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            dotted = f"{path}.{key}" if path else key
            if key in seen and key != "<<":
                raise ScenarioError(
                    "", dotted, f"duplicate key (line {key_node.start_mark.line + 1})"
                )
            seen.add(key)
            _check_document(value_node, dotted, active)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_document(item, f"{path}.{i}" if path else str(i), active)


LOADER_ERRORS = (
    yaml.YAMLError,
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RecursionError,
)
"""What PyYAML can raise on hostile input besides its own errors (bad dates, tags on the wrong
kind of scalar, huge integers, deep nesting)."""


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader whose value errors (a bad date, a tag on the wrong scalar, a huge integer)
    become YAML errors that carry the line of the offending node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value ({type(exc).__name__}: {exc})", node.start_mark
            ) from None


def _safe_load(text: str) -> Any:
    """Safe YAML (no object-constructing tags), checked by `_check_document`."""
    try:
        _check_document(yaml.compose(text, Loader=_SafeLoader))
        return yaml.load(text, Loader=_SafeLoader)
    except RecursionError:
        raise yaml.YAMLError(f"nested too deeply (line {_deep_line(text)})") from None


def _deep_line(text: str, limit: int = 200) -> int:
    """The first line where brackets and indentation nest past `limit` levels (for messages)."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        indent = (len(line) - len(line.lstrip(" "))) // 2
        for char in line:
            depth += (char in "[{") - (char in "]}")
            if depth + indent > limit:
                return lineno
    return 1


def parse_override(text: str) -> tuple[str, Any]:
    """`dotted.key=value` with the value read as a YAML scalar or flow collection."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError("--set", text, "expected dotted.key=value")
    try:
        value = _safe_load(raw) if raw.strip() else None
    except ScenarioError as exc:
        raise ScenarioError("--set", f"{key}.{exc.key}", exc.message) from None
    except LOADER_ERRORS as exc:
        raise ScenarioError("--set", key, f"value is not valid YAML: {_brief(exc)}") from None
    return key.strip(), value


def apply_override(doc: dict[str, Any], key: str, value: Any, source: str = "--set") -> None:
    """Set `doc[a][b][c] = value` for key `a.b.c`, creating mappings that do not exist yet."""
    parts = key.split(".")
    node = doc
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(source, ".".join(parts[: i + 1]), "is not a mapping")
        node = child
    node[parts[-1]] = value


def read_document(path: Path) -> dict[str, Any]:
    """Read a scenario file into a plain mapping, or raise a ScenarioError naming the file."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, None, f"cannot read file: {exc}") from None
    try:
        doc = _safe_load(text)
    except ScenarioError as exc:
        raise ScenarioError(source, exc.key, exc.message) from None
    except LOADER_ERRORS as exc:
        raise ScenarioError(source, None, f"not valid YAML: {_brief(exc)}") from None
    if doc is None:
        raise ScenarioError(source, None, "the file is empty")
    if not isinstance(doc, dict):
        raise ScenarioError(source, None, f"top level must be a mapping, not {type(doc).__name__}")
    return doc


def _brief(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) if isinstance(exc, yaml.YAMLError) else f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + "..."


def build_scenario(doc: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a plain mapping; errors name `source` and the first offending dotted key."""
    try:
        return Scenario.model_validate(doc)
    except RecursionError:
        raise ScenarioError(source, None, "nested too deeply") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        ctx_error = err.get("ctx", {}).get("error")
        if isinstance(ctx_error, _KeyedError):
            raise ScenarioError(source, ctx_error.key, str(ctx_error).split(": ", 1)[1]) from None
        key = ".".join(
            str(p) for p in err["loc"] if not _is_union_tag(p, err["loc"]) and p != "[key]"
        )
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "missing":
            message = "required key is missing"
        raise ScenarioError(source, key if err["loc"] else None, message) from None


def _is_union_tag(part: Any, loc: tuple[Any, ...]) -> bool:
    """Pydantic inserts the discriminator value ('shared_prefix') into error locations."""
    return part in ("shared_prefix", "multiturn", "mooncake") and bool(loc) and loc[0] == "workload"


def load_scenario(
    path: str | Path, overrides: list[str] | dict[str, Any] | None = None
) -> Scenario:
    """Load and validate a scenario YAML file, applying `--set` style overrides."""
    path = Path(path)
    doc = read_document(path)
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else list((overrides or {}).items())
    )
    for key, value in items:
        apply_override(doc, key, value)
    resolve_paths(doc, path.parent)
    return build_scenario(doc, str(path))


def resolve_paths(doc: dict[str, Any], base_dir: Path) -> None:
    """Make a relative `workload.path` relative to the scenario file's folder, in place."""
    workload = doc.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("path"), str):
        trace = Path(workload["path"])
        if not trace.is_absolute():
            workload["path"] = str(base_dir.resolve() / trace)


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


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The fully resolved scenario as plain data, defaults included (for config.resolved.yaml)."""
    return scenario.model_dump(mode="json", exclude_none=False)
