"""The `model:` section of a scenario: the page size, one spec per pool the model has, and the
preset that derives them (expanded for one rank at the scenario's `server.tp_size` before
validation, so a preset is a set of defaults under what the file writes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from sim.core.documents import layered
from sim.core.spec import KeyedError, Strict
from sim.model.pools import DEFAULT_PAGE_SIZE, POOL_KINDS, KVPoolSpec, PoolSpec
from sim.model.presets import MODEL_PRESETS
from sim.model.presets_mla import KV_CACHE_DTYPES
from sim.scenario.errors import nearest


def _kv_or_preset(schema: dict[str, Any]) -> None:
    """In a file, `kv` may come from the preset instead of being written out."""
    schema["required"] = [key for key in schema.get("required", ()) if key != "kv"]
    if not schema["required"]:
        del schema["required"]
    schema["anyOf"] = [
        {"required": ["kv"]},
        {"required": ["preset"], "properties": {"preset": {"type": "string"}}},
    ]


def expand_preset(data: Any, tp_size: int = 1) -> Any:
    """A `model:` mapping with its preset's pool specs, one rank's at `tp_size`, as the
    defaults of what it writes."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    name = data["preset"]
    preset = MODEL_PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        known = ", ".join(MODEL_PRESETS)
        guess = nearest(str(name), list(MODEL_PRESETS))
        hint = f"did you mean {guess!r}? " if guess else ""
        raise KeyedError("model.preset", f"unknown preset {name!r}; {hint}known presets: {known}")
    return layered(preset.pool_specs(tp_size), data)


WEIGHT_DTYPES = ("bf16", "fp8", "mxfp4")
"""Weight precisions a preset may have a published checkpoint in."""


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
    weights_dtype: Literal[WEIGHT_DTYPES] | None = None  # type: ignore[valid-type]
    """Which of the preset's published checkpoints the server loads (null: the one its model
    card points at); sets the weights the device is sized from and the roofline's bytes read."""
    kv_cache_dtype: Literal[KV_CACHE_DTYPES] | None = None  # type: ignore[valid-type]
    """SGLang's `--kv-cache-dtype` for a DeepSeek DSA preset, which sizes its KV latent (null:
    SGLang's default for `hardware.gpu`, filled in when the preset is one of those)."""

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any) -> Any:
        """Done before validation, so every way in (a file, `--set`, a plain mapping, a sweep
        point, a pickle) sees the same expanded model. The loader expands it first at the
        scenario's `server.tp_size`; expanding again here adds nothing."""
        return expand_preset(data)

    @model_validator(mode="after")
    def _published_precision(self) -> ModelSpec:
        preset = MODEL_PRESETS.get(self.preset) if self.preset is not None else None
        if self.weights_dtype is None or (preset and self.weights_dtype in preset.checkpoints):
            return self
        why = (
            f"{self.preset} has no published {self.weights_dtype} checkpoint; it has "
            f"{', '.join(preset.checkpoints)}"
            if preset
            else "needs model.preset: the weights are the preset's"
        )
        raise KeyedError("model.weights_dtype", f"{why} (got {self.weights_dtype!r})")

    @model_serializer(mode="wrap")
    def _without_absent_preset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A model without a preset (or a precision, or a KV dtype) dumps no `preset`
        (`weights_dtype`, `kv_cache_dtype`) key, so the resolved configs and sweep task keys of
        such scenarios do not depend on them."""
        data: dict[str, Any] = handler(self)
        for key in ("preset", "weights_dtype", "kv_cache_dtype"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def pool_spec(self, name: str) -> PoolSpec | None:
        return cast(PoolSpec | None, getattr(self, name, None))

    @property
    def pools(self) -> tuple[str, ...]:
        """The pools this model has, KV first, in registry order."""
        return tuple(name for name in POOL_KINDS if self.pool_spec(name) is not None)


def expanded_model(model: Any, tp_size: int = 1) -> Any:
    """The model section with its preset expanded for one rank at `tp_size` (as validation
    will see it); unchanged when there is none or it is unknown (validation reports that)."""
    try:
        return expand_preset(model, tp_size)
    except (KeyedError, ValueError, TypeError):
        return model
