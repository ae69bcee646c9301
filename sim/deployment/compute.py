"""Prefill and decode speed from the GPU and the model: a roofline, as inference-sim's (BLIS).

A scenario that names a GPU (`hardware.gpu`) and a model preset (`model.preset`) and leaves
`compute.prefill_tokens_per_s` or `compute.decode_ms_per_token` out gets them from this roofline
of that GPU running that model on `server.tp_size` ranks, instead of the schema's made-up
20,000 tokens/s and 20 ms. Each figure is either published (a datasheet peak, a model card's
parameter count, a calibrated utilization) or chosen, and says which (docs/compute.md):

- prefill is compute-bound: a recomputed token costs 2 x the model's active parameters in
  matmul FLOPs, plus 4 x heads x head_dim FLOPs per attended token in every attention layer
  (QK^T and AV; a sliding-window layer attends at most its window; an MLA layer attends over
  its latent, keys of kv_lora_rank + rope dims and values of kv_lora_rank, and a DSA layer at
  most its top-k tokens, plus its indexer scoring every token). The GPU runs them at its peak
  dense BF16 rate times a model-FLOPs utilization (MFU), split over `tp` ranks;
- decode is bandwidth-bound: one step of a batch of `DECODE_BATCH` requests reads the weights
  that batch touches and every request's KV cache, at the HBM bandwidth times an efficiency;
  every request of the batch gets one token a step, so the step time is the time per token.

The engine times each decode step of its running batch from the same bytes split by what they
grow with (`decode_step_cost`: the `compute.decode_step_ms`, `decode_ms_per_request` and
`decode_ms_per_ki_context_tokens` keys, `sim.model.build.Timing.decode_batch_step_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.core.registry import Registry
from sim.deployment.hardware import GPUS
from sim.model.presets import (
    MODEL_PRESETS,
    GatedDeltaNetHybrid,
    Mamba2Hybrid,
    ModelPreset,
    SlidingWindowHybrid,
    kv_heads_per_rank,
)
from sim.model.presets_mla import HOPPER_SM, DeepSeekSparseAttention

ATTENDED_TOKENS = 8192
"""Chosen: the context a recomputed prompt token attends to in a full-attention layer (a token
in the middle of a 16,384-token prompt; a conversation turn's suffix attends to its whole
prefix). The engine charges one rate whatever the prompt, so the roofline needs one context."""
DECODE_BATCH = 32
"""Chosen: the requests one decode step serves (the batch of LMSYS's high-throughput gpt-oss
benchmark): `decode_ms_per_token` is the step at this batch, the figure a published time per
output token is set beside; the engine's own steps take any batch (`DecodeStepCost`)."""
BF16_KV_BYTES = 2
"""The presets of `sim.model.presets` keep their KV cache in bf16; a DSA preset's latent takes
what SGLang's default dtype for the GPU gives (`sim.model.presets_mla`)."""
DECODE_CONTEXT_TOKENS = 8192
"""Chosen: the tokens of KV each decoding request reads a step (full-attention layers; a
sliding-window layer reads at most its window)."""


@dataclass(frozen=True)
class GpuPeaks:
    """What a GPU can do at best, from its datasheet, and how much of it serving gets."""

    bf16_dense_tflops: float
    hbm_tbps: float
    peak_source: str
    prefill_mfu: float
    decode_bandwidth_efficiency: float
    efficiency_source: str


_BLIS = "inference-sim (BLIS) v0.7.4 hardware_config.json, calibrated against vLLM"
_BW_EFF = 0.72
_BW_EFF_SOURCE = "BLIS's earlier hardware_config.json `BwEffConstant` (a chosen constant there)"

GPU_PEAKS: Registry[GpuPeaks] = Registry("GPU peak")
"""One entry per `hardware.gpu` profile (`sim.deployment.hardware.GPUS`)."""
GPU_PEAKS.register(
    "h100",
    GpuPeaks(
        989.4,
        3.35,
        "H100 SXM5: 989.4 TFLOP/s dense BF16 (1,978.9 with sparsity), 3.35 TB/s HBM3",
        0.45,
        _BW_EFF,
        f"MFU: {_BLIS} (H100); bandwidth: {_BW_EFF_SOURCE}",
    ),
)
GPU_PEAKS.register(
    "h200",
    GpuPeaks(
        989.4,
        4.8,
        "H200 SXM: the H100's GH100 compute (989.4 TFLOP/s dense BF16), 4.8 TB/s HBM3e",
        0.45,
        _BW_EFF,
        f"chosen: the H100's MFU ({_BLIS}), same compute die; bandwidth: {_BW_EFF_SOURCE}",
    ),
)
GPU_PEAKS.register(
    "b200",
    GpuPeaks(
        2250.0,
        8.0,
        "HGX B200 (1,000 W): 2,250 TFLOP/s dense BF16 (4,500 with sparsity), 8 TB/s HBM3e",
        0.45,
        _BW_EFF,
        f"chosen: the H100's MFU ({_BLIS}; not calibrated on a B200); bandwidth: {_BW_EFF_SOURCE}",
    ),
)
GPU_PEAKS.register(
    "a100-80g",
    GpuPeaks(
        312.0,
        2.039,
        "A100 80GB SXM4: 312 TFLOP/s dense BF16 (624 with sparsity), 2.039 TB/s HBM2e",
        0.38,
        _BW_EFF,
        f"MFU: {_BLIS} (A100-SXM); bandwidth: {_BW_EFF_SOURCE}",
    ),
)
GPU_PEAKS.register(
    "l40s",
    GpuPeaks(
        362.05,
        0.864,
        "L40S: 362.05 TFLOP/s dense BF16 (733 with sparsity), 864 GB/s GDDR6",
        0.32,
        _BW_EFF,
        f"MFU: {_BLIS} (L40S); bandwidth: {_BW_EFF_SOURCE}",
    ),
)


@dataclass(frozen=True)
class ModelCompute:
    """A model's size as its card gives it, beside the preset's config fields."""

    total_parameters: float
    active_parameters: float
    """Parameters a token runs through (all of them for a dense model)."""
    attention_heads: int
    """`num_attention_heads` of the config: query heads, which set the attention FLOPs."""
    source: str


MODEL_COMPUTE: Registry[ModelCompute] = Registry("model compute")
"""One entry per model preset (`sim.model.presets.MODEL_PRESETS`)."""
MODEL_COMPUTE.register(
    "gpt-oss-20b",
    ModelCompute(20.9e9, 3.6e9, 64, "OpenAI's model card: 20.9 B total, 3.6 B active; 64 heads"),
)
MODEL_COMPUTE.register(
    "gpt-oss-120b",
    ModelCompute(116.8e9, 5.1e9, 64, "OpenAI's model card: 116.8 B total, 5.1 B active; 64 heads"),
)
MODEL_COMPUTE.register(
    "gemma-3-27b",
    ModelCompute(
        27.4e9, 27.4e9, 32, "about 27.4 B parameters, dense (the presets' estimate); 32 heads"
    ),
)
MODEL_COMPUTE.register(
    "qwen3-next-80b-a3b",
    ModelCompute(80e9, 3e9, 16, "Qwen's model card: 80 B total, 3 B activated; 16 heads"),
)
MODEL_COMPUTE.register(
    "nemotron-h-8b",
    ModelCompute(8e9, 8e9, 32, "NVIDIA's model card: 8 B, dense; 32 heads"),
)
MODEL_COMPUTE.register(
    "nemotron-h-56b",
    ModelCompute(56e9, 56e9, 64, "NVIDIA's model card: 56 B, dense; 64 heads"),
)
MODEL_COMPUTE.register(
    "deepseek-v3.2",
    ModelCompute(
        685e9,
        37e9,
        128,
        "DeepSeek's model cards: 685 B total (671 B and a 14 B multi-token-prediction layer), "
        "37 B activated; 128 heads",
    ),
)


@dataclass(frozen=True)
class AttentionShape:
    """The attention layers a preset has: full ones, sliding ones and their window."""

    full_layers: int
    sliding_layers: int
    head_dim: int
    """Dims a query and a key meet in (MLA: the latent's kv_lora_rank + rope dims)."""
    window_tokens: int
    value_dim: int | None = None
    """Dims of a value (None: head_dim; MLA: the latent's kv_lora_rank)."""
    topk_tokens: int = 0
    """DSA: the tokens a query attends after the indexer's selection (0: every token)."""
    indexer_dim: int = 0
    """DSA: the indexer's query heads x head dim, scoring every token of the context."""
    latent_bytes: int = 0
    """MLA: one token's latent in one layer, which every rank holds whole (0: K and V heads,
    split over the ranks)."""
    indexer_bytes: int = 0
    """DSA: one token's indexer key in one layer."""


def attention_shape(preset: ModelPreset, sm_major: int = HOPPER_SM) -> AttentionShape:
    """Linear-attention and Mamba layers carry a fixed state whose cost the active parameters
    already count; only softmax attention grows with the context. A DSA latent's bytes are
    those of SGLang's default KV dtype on a GPU of compute capability `sm_major`."""
    if isinstance(preset, DeepSeekSparseAttention):
        dtype = preset.default_kv_cache_dtype(sm_major)
        return AttentionShape(
            preset.num_hidden_layers,
            0,
            preset.kv_lora_rank + preset.qk_rope_head_dim,
            0,
            value_dim=preset.kv_lora_rank,
            topk_tokens=preset.index_topk,
            indexer_dim=preset.index_n_heads * preset.index_head_dim,
            latent_bytes=preset.kv_bytes_per_token_per_layer(dtype, sm_major),
            indexer_bytes=preset.indexer_bytes_per_token_per_layer(),
        )
    if isinstance(preset, SlidingWindowHybrid):
        return AttentionShape(
            preset.full_attention_layers,
            preset.sliding_window_layers,
            preset.head_dim,
            preset.sliding_window,
        )
    if isinstance(preset, GatedDeltaNetHybrid):
        return AttentionShape(preset.full_attention_layers, 0, preset.head_dim, 0)
    if isinstance(preset, Mamba2Hybrid):
        return AttentionShape(preset.attention_layers, 0, preset.attention_head_dim, 0)
    raise TypeError(f"no attention shape for {type(preset).__name__}")


@dataclass(frozen=True)
class Roofline:
    """The two compute values of one GPU running one model at `tp`, and the figures behind
    them (for the sources `validate` prints and for docs/compute.md)."""

    gpu: str
    preset: str
    tp: int
    prefill_flops_per_token: float
    prefill_tokens_per_s: float
    decode_step_bytes: float
    """What one rank reads in one decode step."""
    decode_ms_per_token: float
    """The step at `DECODE_BATCH` requests of `DECODE_CONTEXT_TOKENS` each: the figure a
    published time per output token is compared with."""
    step: DecodeStepCost
    """What the engine charges a decode step of any batch and context."""
    peaks: GpuPeaks

    @property
    def label(self) -> str:
        return f"roofline {self.gpu} x {self.preset} at tp {self.tp}"

    def prefill_why(self) -> str:
        return (
            f"{self.label}: {self.prefill_flops_per_token / 1e9:.2f} GFLOP a token at "
            f"{self.peaks.prefill_mfu:.0%} of {self.peaks.bf16_dense_tflops:,g} TFLOP/s x "
            f"{self.tp} (docs/compute.md)"
        )

    def step_whys(self) -> tuple[str, str, str]:
        """Why each of the three decode step keys has its value: the bytes behind it."""
        rate = f"at {self.peaks.decode_bandwidth_efficiency:.0%} of {self.peaks.hbm_tbps:g} TB/s"
        per_ms = self.peaks.hbm_tbps * 1e9 * self.peaks.decode_bandwidth_efficiency
        step = self.step
        return (
            f"{self.label}: a step reads every weight, {step.step_ms * per_ms / 1e9:.1f} GB a "
            f"rank {rate} (docs/compute.md)",
            f"{self.label}: each request's sliding windows and top-k latents, "
            f"{step.ms_per_request * per_ms / 1e6:.2f} MB a rank {rate} (docs/compute.md)",
            f"{self.label}: every 1,024 tokens of context in full layers, "
            f"{step.ms_per_ki_context_tokens * per_ms / 1e6:.2f} MB a rank {rate} "
            "(docs/compute.md)",
        )

    def decode_why(self) -> str:
        return (
            f"{self.label}: a step of {DECODE_BATCH} requests reads "
            f"{self.decode_step_bytes / 1e9:.1f} GB a rank at "
            f"{self.peaks.decode_bandwidth_efficiency:.0%} of {self.peaks.hbm_tbps:g} TB/s "
            "(docs/compute.md)"
        )


def _attended(shape: AttentionShape, context_tokens: int) -> int:
    """Tokens attended over all attention layers at this context: a full layer all of them
    (a DSA layer at most its top-k), a sliding layer at most its window."""
    full = min(shape.topk_tokens, context_tokens) if shape.topk_tokens else context_tokens
    return shape.full_layers * full + shape.sliding_layers * min(
        shape.window_tokens, context_tokens
    )


def prefill_flops_per_token(model: ModelCompute, shape: AttentionShape) -> float:
    """Matmuls (2 FLOPs per active parameter) and attention (QK^T and AV: 2 FLOPs per key and
    per value dimension per attended token, every head of every attention layer), plus a DSA
    indexer's QK^T over the whole context (charged at the BF16 rate, though it runs in fp8)."""
    value_dim = shape.value_dim or shape.head_dim
    per_attended = 2 * model.attention_heads * (shape.head_dim + value_dim)
    indexer = 2 * shape.indexer_dim * shape.full_layers * ATTENDED_TOKENS
    return 2 * model.active_parameters + per_attended * _attended(shape, ATTENDED_TOKENS) + indexer


def decode_step_bytes(
    preset: ModelPreset,
    model: ModelCompute,
    shape: AttentionShape,
    tp: int,
    weights_dtype: str | None = None,
    batch: int = DECODE_BATCH,
) -> float:
    """One rank's reads in a decode step of `batch` requests: the weights the batch touches
    (every weight of a dense model; for a mixture of experts at most the batch's active
    weights, and never more than all of them) and each request's KV over
    `DECODE_CONTEXT_TOKENS` (a sliding layer only its window; a DSA layer its top-k tokens'
    latents and every token's indexer key). Weights, at the checkpoint's precision, split
    evenly over ranks; KV heads as SGLang splits them (the same per-rank heads the preset's
    pool specs hold); an MLA latent is not split."""
    weight_bytes = preset.checkpoint(weights_dtype).weight_bytes
    bytes_per_parameter = weight_bytes / model.total_parameters
    touched = min(model.total_parameters, batch * model.active_parameters)
    heads = kv_heads_per_rank(preset.num_key_value_heads, tp)
    kv_per_token_layer = shape.latent_bytes or 2 * heads * shape.head_dim * BF16_KV_BYTES
    kv = _attended(shape, DECODE_CONTEXT_TOKENS) * kv_per_token_layer
    indexer = shape.full_layers * DECODE_CONTEXT_TOKENS * shape.indexer_bytes
    return touched * bytes_per_parameter / tp + batch * (kv + indexer)


@dataclass(frozen=True)
class DecodeStepCost:
    """A decode step's time, linear in what the step reads: every weight once (a mixture of
    experts has touched all of them from a batch of total/active requests on, which the
    presets reach below `DECODE_BATCH`), each request's fixed reads (its sliding windows, a
    DSA layer's top-k latents) and every token of KV the batch attends in full layers."""

    step_ms: float
    ms_per_request: float
    ms_per_ki_context_tokens: float


def decode_step_cost(
    preset: ModelPreset,
    model: ModelCompute,
    shape: AttentionShape,
    tp: int,
    bytes_per_s: float,
    weights_dtype: str | None = None,
) -> DecodeStepCost:
    """The engine's step coefficients from the same bytes as `decode_step_bytes`, at one
    rank's read rate `bytes_per_s`: the two agree at any batch that touches every weight and
    any context past the window and the top-k."""
    weight_bytes = preset.checkpoint(weights_dtype).weight_bytes / tp
    heads = kv_heads_per_rank(preset.num_key_value_heads, tp)
    per_layer_token = shape.latent_bytes or 2 * heads * shape.head_dim * BF16_KV_BYTES
    per_request = shape.sliding_layers * shape.window_tokens * per_layer_token
    per_context_token = shape.full_layers * shape.indexer_bytes
    if shape.topk_tokens:
        per_request += shape.full_layers * shape.topk_tokens * per_layer_token
    else:
        per_context_token += shape.full_layers * per_layer_token
    ms = 1000.0 / bytes_per_s
    return DecodeStepCost(
        step_ms=round(weight_bytes * ms, 4),
        ms_per_request=round(per_request * ms, 6),
        ms_per_ki_context_tokens=round(1024 * per_context_token * ms, 6),
    )


def roofline(
    gpu: str,
    preset_name: str,
    tp: int,
    weights_dtype: str | None = None,
    decode_batch: int = DECODE_BATCH,
) -> Roofline | None:
    """The roofline of a GPU profile running a model preset on `tp` ranks from the checkpoint
    at `weights_dtype` (None: the default one); None when a name has no figures. The engine's
    figures take `DECODE_BATCH`; another `decode_batch` only serves comparisons with published
    measurements at their concurrency (`sim.deployment.published`)."""
    peaks, model = GPU_PEAKS.get(gpu), MODEL_COMPUTE.get(preset_name)
    preset = MODEL_PRESETS.get(preset_name)
    if peaks is None or model is None or preset is None:
        return None
    if weights_dtype not in (None, *preset.checkpoints):
        return None
    gpu_profile = GPUS.get(gpu)
    shape = attention_shape(preset, gpu_profile.sm_major if gpu_profile else HOPPER_SM)
    flops = prefill_flops_per_token(model, shape)
    prefill = tp * peaks.bf16_dense_tflops * 1e12 * peaks.prefill_mfu / flops
    step_bytes = decode_step_bytes(preset, model, shape, tp, weights_dtype, decode_batch)
    bytes_per_s = peaks.hbm_tbps * 1e12 * peaks.decode_bandwidth_efficiency
    memory_s = step_bytes / bytes_per_s
    compute_s = decode_batch / prefill
    return Roofline(
        gpu=gpu,
        preset=preset_name,
        tp=tp,
        prefill_flops_per_token=flops,
        prefill_tokens_per_s=round(prefill, 0),
        decode_step_bytes=step_bytes,
        decode_ms_per_token=round(max(memory_s, compute_s) * 1000, 3),
        step=decode_step_cost(preset, model, shape, tp, bytes_per_s, weights_dtype),
        peaks=peaks,
    )


def made_up_compute(sources: Any) -> list[str]:
    """The compute values a scenario runs with that are the schema's made-up defaults: neither
    written nor derived (no GPU, or no preset, named)."""
    return [
        key
        for key in ("compute.prefill_tokens_per_s", "compute.decode_ms_per_token")
        if sources[key] == "default"
    ]


def gpu_table() -> str:
    """docs/compute.md's table of GPU figures, as the registry holds them."""
    lines = [
        "| gpu | dense BF16 TFLOP/s | HBM TB/s | prefill MFU | decode bandwidth share "
        "| peaks | efficiencies |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, gpu in GPU_PEAKS.items():
        lines.append(
            f"| `{name}` | {gpu.bf16_dense_tflops:,g} | {gpu.hbm_tbps:g} | {gpu.prefill_mfu:g} "
            f"| {gpu.decode_bandwidth_efficiency:g} | {gpu.peak_source} | {gpu.efficiency_source} |"
        )
    return "\n".join(lines)


def model_table() -> str:
    """docs/compute.md's table of model figures, and what the roofline makes of them."""
    lines = [
        "| preset | total | active | heads | full / sliding layers, head_dim, window "
        "| GFLOP a prefill token | source |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, model in MODEL_COMPUTE.items():
        shape = attention_shape(MODEL_PRESETS[name])
        flops = prefill_flops_per_token(model, shape)
        window = f", {shape.window_tokens:,}" if shape.sliding_layers else ""
        if shape.value_dim:
            window += f" (MLA: values of {shape.value_dim})"
        if shape.topk_tokens:
            window += f", top {shape.topk_tokens:,} (DSA)"
        total, active = model.total_parameters / 1e9, model.active_parameters / 1e9
        lines.append(
            f"| `{name}` | {total:g} B | {active:g} B | {model.attention_heads} "
            f"| {shape.full_layers} / {shape.sliding_layers}, "
            f"{shape.head_dim}{window} | {flops / 1e9:.2f} | {model.source} |"
        )
    return "\n".join(lines)


def roofline_table(tp: int = 1) -> str:
    """docs/compute.md's table of derived values: prefill tokens/s and decode ms a token for
    every GPU and preset at `tp`."""
    gpus = list(GPU_PEAKS)
    lines = [
        "| preset | " + " | ".join(f"`{g}`" for g in gpus) + " |",
        "|" + " --- |" * (len(gpus) + 1),
    ]
    for name in MODEL_COMPUTE:
        cells = []
        for gpu in gpus:
            found = roofline(gpu, name, tp)
            assert found is not None
            cells.append(f"{found.prefill_tokens_per_s:,.0f} / {found.decode_ms_per_token:g}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)
