"""Presets for DeepSeek's Multi-head Latent Attention with DeepSeek Sparse Attention (DSA).

An MLA layer caches one latent per token, `kv_lora_rank` compressed dims plus the
`qk_rope_head_dim` rotary dims, shared by every attention head: there are no KV heads to split,
so every tensor-parallel rank holds the same latent (SGLang's `get_num_kv_heads` is 1 for MLA)
and storage keeps one copy of each page, written by rank 0 (`kv.replicated`). DSA adds a
lightning indexer whose per-token keys SGLang keeps in a pool of its own, indexed by the KV
pool's slots: one storage object per KV page (`PoolName.INDEXER`, hit policy ALL_PAGES), the
scenario's `model.indexer`.

How many bytes a latent takes depends on the KV dtype and on the attention backend's layout
(0.5.23: mem_cache/kv_cache_configurator.py:calculate_mla_kv_cache_dim):

- bf16: `kv_lora_rank + qk_rope_head_dim` elements of 2 bytes;
- fp8_e4m3 in the raw layout the trtllm backends read (Blackwell's default DSA backends, SM100
  and later): the same elements, 1 byte each;
- fp8_e4m3 in the scaled layout of the other CUDA backends (flashmla_kv, Hopper's default for
  fp8): the compressed dims in fp8, one float32 scale per `quant_block_size` of them, and the
  rotary dims kept in bf16 (`DSATokenToKVPool.rope_storage_dtype`).

Which dtype SGLang picks when `--kv-cache-dtype` is left at auto is the GPU's
(0.5.23: arg_groups/overrides.py:_dsa_kv_cache_dtype_default): fp8_e4m3 on SM100 and later
unless the model has learnable attention sinks, bfloat16 below. `pool_specs()` gives the bf16
figures (Hopper's default); a scenario naming `hardware.gpu` gets its GPU's
(`sim.deployment.kv_dtype`), and `model.kv_cache_dtype` sets the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.presets import BF16_BYTES, GIB, MODEL_PRESETS, ModelPreset

FP8_BYTES = 1
FP32_SCALE_BYTES = 4
BF16 = "bf16"
FP8_E4M3 = "fp8_e4m3"
KV_CACHE_DTYPES = (BF16, FP8_E4M3)
"""The KV dtypes SGLang serves DSA models with (it refuses any other for them)."""
FP8_KV_FIRST_SM = 10
"""The first compute capability (major) on which SGLang defaults DSA models to an fp8 KV cache
and its trtllm backends."""
HOPPER_SM = 9


@dataclass(frozen=True, kw_only=True)
class DeepSeekSparseAttention(ModelPreset):
    """MLA in every layer, each with a DSA lightning indexer (DeepSeek-V3.2). The KV pool holds
    the latents, the indexer pool the indexer's keys: one head of `index_head_dim` in fp8 with
    one float32 scale per `quant_block_size` dims
    (0.5.23: mem_cache/pool_host/dsa.py:dsa_indexer_bytes_per_token_per_layer)."""

    num_hidden_layers: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int
    index_n_heads: int
    """Indexer query heads: they cost FLOPs, not cache (the cached key is one head)."""
    index_topk: int
    """Tokens each query attends after the indexer's selection."""
    attention_sinks: bool = False
    """The config's `learnable_sink`: sinks keep SGLang's DSA KV in bf16 on every GPU."""
    quant_block_size: int = 128
    """`DSATokenToKVPool.quant_block_size`: dims sharing one float32 scale."""
    rope_storage_bytes: int = BF16_BYTES
    """`DSATokenToKVPool.rope_storage_dtype`: the rotary dims stay bf16 in the scaled layout."""

    def default_kv_cache_dtype(self, sm_major: int) -> str:
        """SGLang's choice for `--kv-cache-dtype auto` on a GPU of this compute capability."""
        return FP8_E4M3 if sm_major >= FP8_KV_FIRST_SM and not self.attention_sinks else BF16

    def kv_bytes_per_token_per_layer(
        self, kv_cache_dtype: str = BF16, sm_major: int = HOPPER_SM
    ) -> int:
        """One token's latent in one layer, in the layout SGLang's default backends for this
        dtype on this GPU read."""
        latent = self.kv_lora_rank + self.qk_rope_head_dim
        if kv_cache_dtype == BF16:
            return latent * BF16_BYTES
        if kv_cache_dtype != FP8_E4M3:
            raise ValueError(f"unknown KV cache dtype {kv_cache_dtype!r}; known: {KV_CACHE_DTYPES}")
        if sm_major >= FP8_KV_FIRST_SM:
            return latent * FP8_BYTES
        scales = self.kv_lora_rank // self.quant_block_size * FP32_SCALE_BYTES
        return (
            self.kv_lora_rank * FP8_BYTES + scales + self.qk_rope_head_dim * self.rope_storage_bytes
        )

    def kv_bytes_per_token(self, kv_cache_dtype: str = BF16, sm_major: int = HOPPER_SM) -> int:
        return self.num_hidden_layers * self.kv_bytes_per_token_per_layer(kv_cache_dtype, sm_major)

    def kv_layout(self, kv_cache_dtype: str, sm_major: int) -> str:
        """How the latent is laid out, for the sources `validate` prints."""
        if kv_cache_dtype == BF16:
            return "bf16 latent"
        if sm_major >= FP8_KV_FIRST_SM:
            return "fp8 latent in the trtllm backends' raw layout"
        return "fp8 latent with float32 block scales and bf16 rope (flashmla_kv's layout)"

    def indexer_bytes_per_token_per_layer(self) -> int:
        scales = self.index_head_dim // self.quant_block_size * FP32_SCALE_BYTES
        return self.index_head_dim * FP8_BYTES + scales

    def indexer_bytes_per_token(self) -> int:
        return self.num_hidden_layers * self.indexer_bytes_per_token_per_layer()

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        """The same on every rank: the latent and the one-head indexer are held whole."""
        return {
            "kv": {
                "bytes_per_token": self.kv_bytes_per_token(),
                "layers": self.num_hidden_layers,
                "replicated": True,
            },
            "indexer": {
                "bytes_per_token": self.indexer_bytes_per_token(),
                "layers": self.num_hidden_layers,
            },
        }


MODEL_PRESETS.register(
    "deepseek-v3.2",
    DeepSeekSparseAttention(
        source="deepseek-ai/DeepSeek-V3.2",
        weight_bytes=642 * GIB,
        weights_dtype="fp8",
        weight_source=(
            "the FP8 checkpoint (e4m3 weights in 128 x 128 blocks): about 642 GiB (685 B "
            "parameters, the multi-token-prediction layer's 14 B included, at about a byte each)"
        ),
        num_key_value_heads=1,
        num_hidden_layers=61,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        index_head_dim=128,
        index_n_heads=64,
        index_topk=2048,
    ),
)
