"""A DeepSeek DSA stack for the real-SGLang tier: MLA KV plus the indexer sidecar (0.5.23).

The 0.5.23 kit builds FULL-only caches on an MHA pool; a DSA case builds the same fixture with
its device pool a `DSATokenToKVPool` (`mem_cache/memory_pool.py`), so `init_hicache` picks
SGLang's DSA stack strategy (`hybrid_cache/hybrid_pool_assembler.py:_DsaStrategy`): an MLA host
pool for KV and a `DSAIndexerPoolHost` for the index keys (`pool_host/dsa.py`), riding on KV's
host slots and registered as a KV-derived `ALL_PAGES` sidecar. The sizes are the smallest SGLang
accepts: 64-token pages (`DSATokenToKVPool` asserts 64-token physical pages), index heads of
128 (asserted too), two layers.
"""

from __future__ import annotations

from typing import Any

PAGE_TOKENS = 64
LAYERS = 2
KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
INDEX_HEAD_DIM = 128
QUANT_BLOCK = 128
"""`DSATokenToKVPool.quant_block_size`: one fp32 scale per 128 index-key bytes."""

KV_BYTES_PER_TOKEN = (KV_LORA_RANK + QK_ROPE_HEAD_DIM) * 2 * LAYERS
"""The bf16 latent and rope part, every layer (0.5.23: mem_cache/kv_cache_configurator.py:
calculate_mla_kv_cache_dim)."""
INDEXER_BYTES_PER_TOKEN = (INDEX_HEAD_DIM + INDEX_HEAD_DIM // QUANT_BLOCK * 4) * LAYERS
"""fp8 index keys and their scales, every layer (0.5.23: mem_cache/pool_host/dsa.py:
dsa_indexer_bytes_per_token_per_layer)."""


def build_fixture(cfg: Any) -> Any:
    """The kit's FULL-only `build_fixture` with a DSA device pool and a paged allocator: the
    indexer's host pool copies whole index pages at `slot // page_size`, so each KV page a
    request holds must be one aligned page of slots (as the server's paged allocator gives)."""
    from unittest import mock

    import torch
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.test.kits.unified_radix_cache import fixtures

    def device_pool(
        size: int, page_size: int, device: str, enable_memory_saver: bool, **_: Any
    ) -> Any:
        return DSATokenToKVPool(
            size=size,
            page_size=page_size,
            kv_lora_rank=KV_LORA_RANK,
            dtype=torch.bfloat16,
            qk_rope_head_dim=QK_ROPE_HEAD_DIM,
            layer_num=LAYERS,
            device=device,
            index_head_dim=INDEX_HEAD_DIM,
            enable_memory_saver=enable_memory_saver,
            kv_cache_dim=KV_LORA_RANK + QK_ROPE_HEAD_DIM,
        )

    def allocator(size: int, dtype: Any, device: str, kvcache: Any, need_sort: bool) -> Any:
        return PagedTokenToKVPoolAllocator(
            size=size,
            page_size=kvcache.page_size,
            dtype=dtype,
            device=device,
            kvcache=kvcache,
            need_sort=need_sort,
        )

    with (
        mock.patch.object(fixtures, "MHATokenToKVPool", device_pool),
        mock.patch.object(fixtures, "TokenToKVPoolAllocator", allocator),
    ):
        return fixtures.build_fixture(cfg)
