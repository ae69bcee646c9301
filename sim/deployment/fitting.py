"""What to change when a preset does not fit the GPU: the fewest tensor-parallel ranks, or a
published checkpoint of lower precision, with which SGLang would size its pools.

SGLang refuses to start when the weights leave no memory for the KV cache; a newcomer who
names a model and a GPU wants to know what would start. Each candidate is sized with the same
rules as the deployment itself (`sim.deployment.sizing`), the preset's pool specs derived at
the candidate's tp_size and the memory fraction by SGLang's rule at that tp_size unless the
scenario writes one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.deployment.profiles import ChunkTier
from sim.deployment.sizing import (
    DevicePools,
    NoRoomForPools,
    RankModel,
    device_pools,
    kv_cell_bytes,
    mem_fraction_static,
    rank_model,
)
from sim.model.presets import Checkpoint, ModelPreset

TP_SIZES = (1, 2, 4, 8)
"""The tensor-parallel sizes tried: the GPUs of one node."""
GIB = 2**30


@dataclass(frozen=True)
class ServerMemory:
    """What the device sizing reads besides the model."""

    memory_mib: float
    tiers: tuple[ChunkTier, ...]
    chunk_tokens: int | None
    fraction: float | None
    """`mem_fraction_static` as written; None: SGLang's rule at each tp_size."""
    page_size: int
    swa_full_tokens_ratio: float
    mamba_full_memory_ratio: float

    def fraction_at(self, tp_size: int) -> float:
        if self.fraction is not None:
            return self.fraction
        return mem_fraction_static(self.tiers, self.memory_mib, tp_size, self.chunk_tokens)

    def pools(self, rank: RankModel, tp_size: int) -> DevicePools:
        return device_pools(
            rank,
            memory_mib=self.memory_mib,
            fraction=self.fraction_at(tp_size),
            page_size=self.page_size,
            swa_full_tokens_ratio=self.swa_full_tokens_ratio,
            mamba_full_memory_ratio=self.mamba_full_memory_ratio,
        )


def preset_rank(
    preset: ModelPreset, pools: set[str], tp_size: int, checkpoint: Checkpoint
) -> RankModel:
    """One rank of the preset at `tp_size`, with the pools the scenario keeps."""
    specs = preset.pool_specs(tp_size)

    def spec(pool: str, key: str) -> int | None:
        return specs[pool][key] if pool in pools and pool in specs else None

    return rank_model(
        tp_size=tp_size,
        weight_bytes=checkpoint.weight_bytes,
        kv_bytes_per_token=kv_cell_bytes(
            {pool: spec.get("bytes_per_token") for pool, spec in specs.items()}
        ),
        swa_bytes_per_token=spec("swa", "bytes_per_token"),
        mamba_state_bytes=spec("mamba", "state_bytes"),
    )


def _fits(
    preset: ModelPreset, pools: set[str], server: ServerMemory, tp: int, checkpoint: Checkpoint
) -> bool:
    try:
        server.pools(preset_rank(preset, pools, tp, checkpoint), tp)
    except NoRoomForPools:
        return False
    return True


def what_fits(
    preset: ModelPreset,
    pools: set[str],
    server: ServerMemory,
    tp_size: int,
    weights_dtype: str | None,
) -> str:
    """The changes that would fit, as the end of the error that the weights leave no room."""
    current = preset.checkpoint(weights_dtype)
    options = []
    more = [t for t in TP_SIZES if t > tp_size and _fits(preset, pools, server, t, current)]
    if more:
        options.append(
            f"server.tp_size: {more[0]} ({current.weight_bytes / more[0] / GIB:,.1f} GiB a rank)"
        )
    for dtype, smaller in preset.checkpoints.items():
        if smaller.weight_bytes >= current.weight_bytes:
            continue
        tps = [t for t in TP_SIZES if t >= tp_size and _fits(preset, pools, server, t, smaller)]
        if tps:
            at = "" if tps[0] == tp_size else f" at server.tp_size: {tps[0]}"
            size = smaller.weight_bytes / tps[0] / GIB
            options.append(f"model.weights_dtype: {dtype}{at} ({size:,.1f} GiB a rank)")
    if not options:
        have = ", ".join(preset.checkpoints)
        return (
            f"; it does not fit on {TP_SIZES[-1]} of these GPUs in any published precision ({have})"
        )
    return "; it fits with " + " or ".join(options)
