"""Model presets: the pool sizes of real hybrid models, derived from their published configs.

A preset records the fields of a model's `config.json` that size SGLang's pools and derives the
scenario's `model.kv`, `model.swa` and `model.mamba` from them as SGLang sizes its device pools,
for one tensor-parallel rank at the scenario's `server.tp_size` (`pool_specs(tp_size)`: each
rank holds its share of the KV heads and of the linear-attention heads). A scenario selects
one with `model: {preset: <name>}` and `sim.scenario.loading` layers what the file writes
over the derived specs, so a preset is a set of defaults, never a constraint. Each
architecture family is a frozen dataclass with one method per derived size; adding a model is
one instance and one `MODEL_PRESETS.register` line, and the schema accepts exactly the
registered names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sim.core.registry import Registry

BF16_BYTES = 2
FP32_BYTES = 4
GIB = 2**30
"""SGLang keeps KV in the model's dtype (2 bytes for every preset here), the Mamba conv state in
bf16 (`SGLANG_MAMBA_CONV_DTYPE`'s default) and the SSM / linear-attention state in float32
(`mamba2_state_dtype`: the config's `mamba_ssm_dtype`, else float32)."""

FULL = "full_attention"
SLIDING = "sliding_attention"


def interleaved(num_hidden_layers: int, every: int) -> tuple[str, ...]:
    """`layer_types` with every `every`-th layer (counting from 1) full attention and the rest
    sliding window: how transformers expands Gemma 3's `sliding_window_pattern`, and the
    alternation gpt-oss writes out in its config."""
    return tuple(FULL if (i + 1) % every == 0 else SLIDING for i in range(num_hidden_layers))


def attention_bytes_per_token(
    layers: int, num_key_value_heads: int, head_dim: int, dtype_bytes: int
) -> int:
    """One token's K and V over `layers` attention layers."""
    return layers * 2 * num_key_value_heads * head_dim * dtype_bytes


def kv_heads_per_rank(num_key_value_heads: int, tp_size: int) -> int:
    """KV heads a tensor-parallel rank holds: its share, but at least one, replicated when
    there are fewer heads than ranks (0.5.23: configs/model_config.py:get_num_kv_heads)."""
    return max(1, num_key_value_heads // tp_size)


def _per_rank(total: int, tp_size: int) -> int:
    return -(-total // tp_size)


def mamba2_state_bytes(
    *,
    layers: int,
    intermediate_size: int,
    n_groups: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    conv_kernel: int,
    conv_dtype_bytes: int,
    ssm_dtype_bytes: int,
    tp_size: int = 1,
) -> int:
    """One request's recurrent state on one rank, as SGLang's Mamba pool holds it
    (0.5.23: configs/mamba_utils.py:Mamba2StateShape.create): per layer, a conv state of the
    last `conv_kernel - 1` inputs over `intermediate_size + 2 · n_groups · state_size`
    channels and an SSM state of `num_heads × head_dim × state_size`, channels and heads split
    over `tp_size` ranks (groups that do not divide are replicated up to one a rank). Both are
    restored together, so both are one storage object."""
    groups = n_groups if n_groups % tp_size == 0 else tp_size
    channels = _per_rank(intermediate_size + 2 * groups * state_size, tp_size)
    conv = channels * (conv_kernel - 1)
    ssm = _per_rank(num_heads, tp_size) * head_dim * state_size
    return layers * (conv * conv_dtype_bytes + ssm * ssm_dtype_bytes)


@dataclass(frozen=True)
class Checkpoint:
    """A published checkpoint of a model at one weight precision."""

    weights_dtype: str
    weight_bytes: float
    weight_source: str


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """A model's config fields; subclasses derive its `model:` pool specs."""

    source: str
    """The model whose `config.json` the fields are copied from (its id on the model hub)."""
    weight_bytes: float
    """What the weights take on the GPU, for sizing the device from memory (`hardware.gpu`)."""
    weight_source: str
    """Where `weight_bytes` comes from (a checkpoint size, or parameters x 2 bytes)."""
    num_key_value_heads: int
    """Attention KV heads: a tensor-parallel rank holds max(1, heads // tp) of them."""
    weights_dtype: str = "bf16"
    """The precision of `weight_bytes`: the checkpoint the model card points at."""
    other_checkpoints: tuple[Checkpoint, ...] = ()
    """Other published checkpoints (`model.weights_dtype` picks one); only ones that exist."""

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        """The derived `model.<pool>` specs of one rank at `tp_size`, keyed by pool name."""
        raise NotImplementedError

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(self.pool_specs())

    @property
    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every published precision, the default first."""
        shipped = Checkpoint(self.weights_dtype, self.weight_bytes, self.weight_source)
        return {c.weights_dtype: c for c in (shipped, *self.other_checkpoints)}

    def checkpoint(self, weights_dtype: str | None = None) -> Checkpoint:
        """The checkpoint at `weights_dtype` (None: the default one)."""
        return self.checkpoints[weights_dtype or self.weights_dtype]


@dataclass(frozen=True, kw_only=True)
class SlidingWindowHybrid(ModelPreset):
    """Full-attention layers interleaved with sliding-window layers of the same head layout
    (gpt-oss, Gemma 3). The full layers are the KV pool; the sliding ones are the SWA pool,
    which a request needs only for the last `sliding_window` tokens."""

    layer_types: tuple[str, ...]
    head_dim: int
    sliding_window: int
    dtype_bytes: int = BF16_BYTES

    def __post_init__(self) -> None:
        _check_types(self.layer_types, {FULL, SLIDING})

    @property
    def full_attention_layers(self) -> int:
        return self.layer_types.count(FULL)

    @property
    def sliding_window_layers(self) -> int:
        return self.layer_types.count(SLIDING)

    def kv_bytes_per_token(self, tp_size: int = 1) -> int:
        heads = kv_heads_per_rank(self.num_key_value_heads, tp_size)
        return attention_bytes_per_token(
            self.full_attention_layers, heads, self.head_dim, self.dtype_bytes
        )

    def swa_bytes_per_token(self, tp_size: int = 1) -> int:
        heads = kv_heads_per_rank(self.num_key_value_heads, tp_size)
        return attention_bytes_per_token(
            self.sliding_window_layers, heads, self.head_dim, self.dtype_bytes
        )

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        return {
            "kv": {
                "bytes_per_token": self.kv_bytes_per_token(tp_size),
                "layers": self.full_attention_layers,
            },
            "swa": {
                "window_tokens": self.sliding_window,
                "bytes_per_token": self.swa_bytes_per_token(tp_size),
                "layers": self.sliding_window_layers,
            },
        }


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetHybrid(ModelPreset):
    """Gated attention every `full_attention_interval`-th layer, Gated DeltaNet linear attention
    in the others (Qwen3-Next). SGLang keeps the linear layers' state in its Mamba pool, sized
    as a Mamba-2 state: value heads are the heads, key heads the groups, the key head dim the
    state size, and the conv runs over query, key and value."""

    num_hidden_layers: int
    full_attention_interval: int
    head_dim: int
    linear_num_value_heads: int
    linear_num_key_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    dtype_bytes: int = BF16_BYTES
    conv_dtype_bytes: int = BF16_BYTES
    ssm_dtype_bytes: int = FP32_BYTES

    @property
    def full_attention_layers(self) -> int:
        return self.num_hidden_layers // self.full_attention_interval

    @property
    def linear_attention_layers(self) -> int:
        return self.num_hidden_layers - self.full_attention_layers

    def kv_bytes_per_token(self, tp_size: int = 1) -> int:
        heads = kv_heads_per_rank(self.num_key_value_heads, tp_size)
        return attention_bytes_per_token(
            self.full_attention_layers, heads, self.head_dim, self.dtype_bytes
        )

    def mamba_state_bytes(self, tp_size: int = 1) -> int:
        return mamba2_state_bytes(
            layers=self.linear_attention_layers,
            intermediate_size=self.linear_num_value_heads * self.linear_value_head_dim,
            n_groups=self.linear_num_key_heads,
            num_heads=self.linear_num_value_heads,
            head_dim=self.linear_value_head_dim,
            state_size=self.linear_key_head_dim,
            conv_kernel=self.linear_conv_kernel_dim,
            conv_dtype_bytes=self.conv_dtype_bytes,
            ssm_dtype_bytes=self.ssm_dtype_bytes,
            tp_size=tp_size,
        )

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        return {
            "kv": {
                "bytes_per_token": self.kv_bytes_per_token(tp_size),
                "layers": self.full_attention_layers,
            },
            "mamba": {
                "state_bytes": self.mamba_state_bytes(tp_size),
                "layers": self.linear_attention_layers,
            },
        }


MAMBA = "M"
ATTENTION = "*"


@dataclass(frozen=True, kw_only=True)
class Mamba2Hybrid(ModelPreset):
    """Mamba-2 layers with a few attention layers, laid out by `hybrid_override_pattern`
    (Nemotron-H: `M` Mamba-2, `*` attention, `-` MLP, `E` MoE; MLP and MoE layers hold no
    state)."""

    hybrid_override_pattern: str
    attention_head_dim: int
    mamba_num_heads: int
    mamba_head_dim: int
    n_groups: int
    ssm_state_size: int
    conv_kernel: int
    dtype_bytes: int = BF16_BYTES
    conv_dtype_bytes: int = BF16_BYTES
    ssm_dtype_bytes: int = FP32_BYTES

    def __post_init__(self) -> None:
        _check_types(self.hybrid_override_pattern, {MAMBA, ATTENTION, "-", "E"})

    @property
    def attention_layers(self) -> int:
        return self.hybrid_override_pattern.count(ATTENTION)

    @property
    def mamba_layers(self) -> int:
        return self.hybrid_override_pattern.count(MAMBA)

    def kv_bytes_per_token(self, tp_size: int = 1) -> int:
        return attention_bytes_per_token(
            self.attention_layers,
            kv_heads_per_rank(self.num_key_value_heads, tp_size),
            self.attention_head_dim,
            self.dtype_bytes,
        )

    def mamba_state_bytes(self, tp_size: int = 1) -> int:
        return mamba2_state_bytes(
            layers=self.mamba_layers,
            intermediate_size=self.mamba_num_heads * self.mamba_head_dim,
            n_groups=self.n_groups,
            num_heads=self.mamba_num_heads,
            head_dim=self.mamba_head_dim,
            state_size=self.ssm_state_size,
            conv_kernel=self.conv_kernel,
            conv_dtype_bytes=self.conv_dtype_bytes,
            ssm_dtype_bytes=self.ssm_dtype_bytes,
            tp_size=tp_size,
        )

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        return {
            "kv": {
                "bytes_per_token": self.kv_bytes_per_token(tp_size),
                "layers": self.attention_layers,
            },
            "mamba": {"state_bytes": self.mamba_state_bytes(tp_size), "layers": self.mamba_layers},
        }


def _check_types(layers: Iterable[Any], known: set[str]) -> None:
    unknown = set(layers) - known
    if unknown:
        raise ValueError(f"unknown layer types {sorted(unknown)}; known: {sorted(known)}")


MODEL_PRESETS: Registry[ModelPreset] = Registry("model preset")

MODEL_PRESETS.register(
    "gpt-oss-20b",
    SlidingWindowHybrid(
        source="openai/gpt-oss-20b",
        weight_bytes=12.8 * GIB,
        weight_source=(
            "OpenAI's model card: a 12.8 GiB checkpoint (MXFP4 experts, which SGLang keeps "
            "in 4 bits)"
        ),
        weights_dtype="mxfp4",
        layer_types=interleaved(24, every=2),
        num_key_value_heads=8,
        head_dim=64,
        sliding_window=128,
    ),
)
MODEL_PRESETS.register(
    "gpt-oss-120b",
    SlidingWindowHybrid(
        source="openai/gpt-oss-120b",
        weight_bytes=60.8 * GIB,
        weight_source=(
            "OpenAI's model card: a 60.8 GiB checkpoint (MXFP4 experts, which SGLang keeps "
            "in 4 bits)"
        ),
        weights_dtype="mxfp4",
        layer_types=interleaved(36, every=2),
        num_key_value_heads=8,
        head_dim=64,
        sliding_window=128,
    ),
)
MODEL_PRESETS.register(
    "gemma-3-27b",
    SlidingWindowHybrid(
        source="google/gemma-3-27b-it (text_config)",
        weight_bytes=27.4e9 * BF16_BYTES,
        weight_source="about 27.4 B parameters (vision tower included) x 2 bytes: an estimate",
        layer_types=interleaved(62, every=6),
        num_key_value_heads=16,
        head_dim=128,
        sliding_window=1024,
    ),
)
MODEL_PRESETS.register(
    "qwen3-next-80b-a3b",
    GatedDeltaNetHybrid(
        source="Qwen/Qwen3-Next-80B-A3B-Instruct",
        weight_bytes=80e9 * BF16_BYTES,
        weight_source="80 B parameters x 2 bytes (bf16): an estimate",
        other_checkpoints=(
            Checkpoint(
                "fp8",
                80e9,
                "Qwen/Qwen3-Next-80B-A3B-Instruct-FP8 (block-wise FP8): 80 B parameters x 1 "
                "byte, an estimate",
            ),
        ),
        num_hidden_layers=48,
        full_attention_interval=4,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_value_heads=32,
        linear_num_key_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    ),
)
MODEL_PRESETS.register(
    "nemotron-h-8b",
    Mamba2Hybrid(
        source="nvidia/Nemotron-H-8B-Base-8K",
        weight_bytes=8e9 * BF16_BYTES,
        weight_source="8 B parameters x 2 bytes (bf16): an estimate",
        hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        num_key_value_heads=8,
        attention_head_dim=128,
        mamba_num_heads=128,
        mamba_head_dim=64,
        n_groups=8,
        ssm_state_size=128,
        conv_kernel=4,
    ),
)
MODEL_PRESETS.register(
    "nemotron-h-56b",
    Mamba2Hybrid(
        source="nvidia/Nemotron-H-56B-Base-8K",
        weight_bytes=56e9 * BF16_BYTES,
        weight_source="56 B parameters x 2 bytes (bf16): an estimate",
        hybrid_override_pattern=(
            "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*"
            "-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
        ),
        num_key_value_heads=8,
        attention_head_dim=128,
        mamba_num_heads=256,
        mamba_head_dim=64,
        n_groups=8,
        ssm_state_size=256,
        conv_kernel=4,
    ),
)
