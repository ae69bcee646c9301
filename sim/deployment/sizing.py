"""SGLang's memory rules: how a server on a given GPU sizes its chunks and its device pools.

Read from SGLang's `arg_groups/memory_hook.py` (`handle_gpu_memory_settings`: the memory tiers
and the default `mem_fraction_static`), `mem_cache/kv_cache_configurator.py` (what is left for
the pools once the weights are loaded), `model_executor/pool_configurator.py` (the split between
the full-attention and SWA pools) and `_handle_max_mamba_cache` (the split between the Mamba
states and the full-attention pool). Every function is plain arithmetic on the server's
arguments, so a test can pin it against figures worked out by hand.

Two figures are estimates, not SGLang's: the memory a process holds before the weights load
(`CONTEXT_MIB`, what `nvidia-smi` counts but `torch.cuda.mem_get_info` does not report as free)
and the weights themselves, which come from the model preset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sim.deployment.profiles import ChunkTier
from sim.model.pools import KV, POOL_KINDS

CONTEXT_MIB = 1024
"""`nvidia-smi`'s total minus the free memory SGLang measures before loading weights: about
600 MiB that torch never reports (143,771 MiB against 139.8 GiB on an H200) plus the CUDA
context and communicators. An estimate."""
MAX_PREFILL_TOKENS = 16384
"""`--max-prefill-tokens` default: the activation bound when chunked prefill is off."""
CHUNK_UNKNOWN_GPU = 4096
"""SGLang's chunked-prefill default when it cannot read the GPU's memory."""


def memory_tier(tiers: tuple[ChunkTier, ...], memory_mib: float) -> ChunkTier:
    return next(tier for tier in tiers if memory_mib < tier.below_mib)


def default_chunk_tokens(tiers: tuple[ChunkTier, ...], memory_mib: float) -> int:
    """`--chunked-prefill-size` when not given: by the GPU's memory tier."""
    return memory_tier(tiers, memory_mib).chunk_tokens


def prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA graphs SGLang captures up to `max_bs` tokens
    (`generate_prefill_cuda_graph_batch_sizes`): each reserves 8 MiB."""
    steps = (
        range(4, 33, 4),
        range(48, 257, 16),
        range(288, 513, 32),
        range(576, 1025, 64),
        range(1280, 4097, 256),
        range(4608, max_bs + 1, 512),
    )
    return sum(1 for step in steps for size in step if size <= max_bs)


def reserved_mib(
    tiers: tuple[ChunkTier, ...], memory_mib: float, tp_size: int, chunk_tokens: int | None
) -> float:
    """Memory SGLang keeps out of the static pools: activations for a prefill chunk, a share
    for communication per rank, decode and prefill CUDA graphs; at least 10 GiB on a GPU of
    more than 60 GiB."""
    tier = memory_tier(tiers, memory_mib)
    activation = max(chunk_tokens or MAX_PREFILL_TOKENS, 2048)
    decode_bs = tier.decode_max_bs if tp_size < 4 else tier.decode_max_bs_tp4
    graphs = decode_bs * 2 + prefill_graph_sizes(chunk_tokens or MAX_PREFILL_TOKENS) * 8
    reserved = 512 + activation * 1.5 + tp_size / 8 * 1024 + graphs
    if memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def mem_fraction_static(
    tiers: tuple[ChunkTier, ...], memory_mib: float, tp_size: int, chunk_tokens: int | None
) -> float:
    """`--mem-fraction-static` when not given: the share of memory left after the reserve."""
    reserved = reserved_mib(tiers, memory_mib, tp_size, chunk_tokens)
    return round((memory_mib - reserved) / memory_mib, 3)


def kv_cell_bytes(bytes_per_token: Mapping[str, int | None]) -> int:
    """A KV token's device bytes, from each pool's bytes per token: KV's and those of the
    sidecars riding on its slots (a DSA pool's cell holds the latent and the index keys)."""
    return sum(
        value or 0
        for pool, value in bytes_per_token.items()
        if pool == KV or (pool in POOL_KINDS and POOL_KINDS[pool].rides_on_kv)
    )


@dataclass(frozen=True)
class RankModel:
    """What one tensor-parallel rank holds of a model."""

    weight_bytes: float
    kv_bytes_per_token: int
    swa_bytes_per_token: int | None
    mamba_state_bytes: int | None


def rank_model(
    *,
    tp_size: int,
    weight_bytes: float,
    kv_bytes_per_token: int,
    swa_bytes_per_token: int | None,
    mamba_state_bytes: int | None,
) -> RankModel:
    """One rank's share: the weights split evenly over `tp_size` ranks. The pool bytes are
    already one rank's (a preset derives them at the scenario's tp_size, with SGLang's split of
    the KV and linear-attention heads; a file that writes them writes one rank's), so they are
    kept as given."""
    return RankModel(
        weight_bytes=weight_bytes / tp_size,
        kv_bytes_per_token=kv_bytes_per_token,
        swa_bytes_per_token=swa_bytes_per_token,
        mamba_state_bytes=mamba_state_bytes,
    )


@dataclass(frozen=True)
class DevicePools:
    """Device pool sizes SGLang would allocate on one rank."""

    pool_bytes: float
    """Memory left for the pools: free memory x mem_fraction_static - weights."""
    kv_tokens: int
    swa_tokens: int | None
    mamba_slots: int | None


class NoRoomForPools(ValueError):
    """The weights leave no memory for the KV cache (SGLang refuses to start)."""


def device_pools(
    rank: RankModel,
    *,
    memory_mib: float,
    fraction: float,
    page_size: int,
    swa_full_tokens_ratio: float,
    mamba_full_memory_ratio: float,
) -> DevicePools:
    """The pools SGLang sizes from what the weights leave (`kv_cache_configurator`)."""
    free_bytes = (memory_mib - CONTEXT_MIB) * 2**20
    rest = free_bytes * fraction - rank.weight_bytes
    if rest <= 0:
        raise NoRoomForPools(
            f"the weights ({rank.weight_bytes / 2**30:,.1f} GiB a rank) leave no memory for "
            f"the KV cache ({fraction:.3f} of {(memory_mib - CONTEXT_MIB) / 1024:,.1f} GiB free)"
        )

    def pages(tokens: float) -> int:
        return int(tokens) // page_size * page_size

    mamba_slots = None
    kv_rest = rest
    if rank.mamba_state_bytes is not None:
        state = rank.mamba_state_bytes
        budget = rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
        mamba_slots = max(0, int((budget - state) // state))
        kv_rest = rest - (mamba_slots + 1) * state
    if rank.swa_bytes_per_token is not None:
        cell = rank.kv_bytes_per_token + swa_full_tokens_ratio * rank.swa_bytes_per_token
        kv_tokens = pages(kv_rest // cell)
        swa_tokens: int | None = pages(kv_tokens * swa_full_tokens_ratio)
    else:
        kv_tokens, swa_tokens = pages(kv_rest // rank.kv_bytes_per_token), None
    if kv_tokens <= 0:
        raise NoRoomForPools(
            f"{kv_rest / 2**30:,.2f} GiB left for the KV pool holds less than a page"
        )
    return DevicePools(rest, kv_tokens, swa_tokens, mamba_slots)


def host_pages(device_kv_pages: int, page_size: int, hicache_ratio: float) -> int:
    """Host pool pages for a device pool (`HostKVCache`: device tokens x ratio, rounded down to
    a page, plus one page)."""
    tokens = math.floor(device_kv_pages * page_size * hicache_ratio)
    return tokens // page_size + 1


def hicache_ratio_default(host_mode: str) -> float:
    """`--hicache-ratio` when not given: 2.0 in cache mode, 1.2 in buffer_only mode
    (`handle_hicache_ratio_default`)."""
    return 1.2 if host_mode == "buffer_only" else 2.0
