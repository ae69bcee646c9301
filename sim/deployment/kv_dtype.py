"""A DeepSeek DSA preset's KV cache dtype, and the KV bytes it gives, from the GPU a scenario
names.

SGLang picks a DSA model's KV dtype from the GPU when `--kv-cache-dtype` is left at auto
(0.5.23: arg_groups/overrides.py:_dsa_kv_cache_dtype_default; the same rule in every release
from 0.5.18, the attention-sink exception from 0.5.20), its attention backends from the dtype and
the GPU (`_dsa_split_backend_resolution`), and the backends set how a latent is laid out
(`sim.model.presets_mla`). So the preset's `model.kv.bytes_per_token` depends on `hardware.gpu`,
which the preset alone cannot see: this fills `model.kv_cache_dtype` and the KV bytes per token
before the preset is expanded under what the scenario writes, each with where it came from.
"""

from __future__ import annotations

from typing import Any

from sim.deployment.hardware import GPUS
from sim.deployment.resolve import Sources, get, has, put, show_value
from sim.model.presets import MODEL_PRESETS
from sim.model.presets_mla import HOPPER_SM, KV_CACHE_DTYPES, DeepSeekSparseAttention

RULE = "arg_groups/overrides.py:_dsa_kv_cache_dtype_default"
DTYPE_KEY = "model.kv_cache_dtype"
KV_BYTES_KEY = "model.kv.bytes_per_token"


def fill_dsa_kv_cache(doc: dict[str, Any], sources: Sources) -> list[tuple[str, str]]:
    """Fill, in place, a DSA preset's KV dtype and KV bytes per token where the document is
    silent; returns the problems (a dtype written for a model whose KV the simulator does not
    derive from it)."""
    model = doc.get("model")
    if not isinstance(model, dict):
        return []
    name = model.get("preset")
    preset = MODEL_PRESETS.get(name) if isinstance(name, str) else None
    written = model.get("kv_cache_dtype")
    if not isinstance(preset, DeepSeekSparseAttention):
        if written is None or (isinstance(name, str) and preset is None):
            return []
        what = f"preset {name}" if preset is not None else "a model without a preset"
        return [
            (
                DTYPE_KEY,
                f"{what} takes its KV bytes from model.kv.bytes_per_token; the dtype is derived "
                "only for DeepSeek DSA presets (got "
                f"{show_value(written)})",
            )
        ]
    if written is not None and written not in KV_CACHE_DTYPES:
        return []  # the schema refuses it, naming the choices
    gpu_name = get(doc, "hardware.gpu")
    gpu = GPUS.get(gpu_name) if isinstance(gpu_name, str) else None
    sm_major = gpu.sm_major if gpu is not None else HOPPER_SM
    on = f"{gpu.name} (SM{sm_major}0)" if gpu is not None else f"SM{HOPPER_SM}0, no hardware.gpu"
    if written is None:
        dtype = preset.default_kv_cache_dtype(sm_major)
        sinks = " (attention sinks keep it bf16)" if preset.attention_sinks else ""
        put(doc, DTYPE_KEY, dtype)
        sources.of[DTYPE_KEY] = f"derived: SGLang's DSA default on {on}{sinks} ({RULE})"
    else:
        dtype = written
    if not has(doc, KV_BYTES_KEY):
        put(doc, KV_BYTES_KEY, preset.kv_bytes_per_token(dtype, sm_major))
        sources.of[KV_BYTES_KEY] = (
            f"derived: preset {name} in {dtype} on {on}: {preset.num_hidden_layers} layers x "
            f"{preset.kv_bytes_per_token_per_layer(dtype, sm_major):,} B, "
            f"{preset.kv_layout(dtype, sm_major)} "
            "(mem_cache/kv_cache_configurator.py:calculate_mla_kv_cache_dim)"
        )
    return []
