"""Deployment profiles: what a named SGLang era and a named storage backend set, with evidence.

A finding holds for a deployment, not for a mechanism: the same heal rule can loop or not
depending on which SGLang the server runs, which backend answers its `exists` calls and how its
host memory is used. A profile is a set of scenario defaults, each a `Setting` that carries the
SGLang code it was read from; `server.sglang` and `storage.backend` select one each, and what a
scenario writes itself always wins (`sim.deployment.resolve` layers them and records where every
value came from). Adding an era or a backend is one instance and one `register` line; the schema
accepts exactly the registered names.

Eras also carry what they refuse: `init_hicache` of the PR-#36386 era raised for a Mamba pool in
`buffer_only` host mode, so such a scenario is bad input naming the era (see `refusals`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.registry import Registry

CUSTOM = "custom"
"""The name that selects no profile: the scenario's own keys and the schema defaults only."""


@dataclass(frozen=True)
class Setting:
    """One default a profile sets: a dotted scenario key, its value and where SGLang says so."""

    key: str
    value: Any
    evidence: str


@dataclass(frozen=True)
class ChunkTier:
    """One row of SGLang's memory-tier table (`handle_gpu_memory_settings`): GPUs with less
    than `below_mib` of memory get this chunked-prefill size and CUDA-graph batch bound."""

    below_mib: float
    chunk_tokens: int
    decode_max_bs: int
    decode_max_bs_tp4: int
    """The bound at tensor parallelism of 4 or more."""


_GIB = 1024
TIERS_BEFORE_37898 = (
    ChunkTier(20 * _GIB, 2048, 8, 8),
    ChunkTier(35 * _GIB, 2048, 24, 80),
    ChunkTier(60 * _GIB, 4096, 32, 160),
    ChunkTier(160 * _GIB, 8192, 256, 512),
    ChunkTier(float("inf"), 16384, 512, 512),
)
"""`server_args` / `arg_groups/memory_hook.py` memory tiers before PR #37898 (in MiB)."""
TIERS_SINCE_37898 = (
    ChunkTier(20 * _GIB, 2048, 8, 8),
    ChunkTier(35 * _GIB, 4096, 48, 160),
    *TIERS_BEFORE_37898[2:],
)
"""PR #37898 raised the 20-35 GiB tier (32 GB cards) to 4096 tokens and 48 / 160 graphs."""


@dataclass(frozen=True)
class SGLangEra:
    """An SGLang version: the HiCache defaults it ships and the combinations it refuses."""

    name: str
    code: str
    """Which code the profile was read from (PRs, commits of the stored copy)."""
    settings: tuple[Setting, ...]
    buffer_only_pools: frozenset[str]
    """Pool kinds `init_hicache` accepts in `buffer_only` host mode."""
    memory_tiers: tuple[ChunkTier, ...]
    """The chunked-prefill and CUDA-graph defaults by GPU memory (`hardware.memory_mib`)."""

    @property
    def label(self) -> str:
        return f"sglang {self.name}"


@dataclass(frozen=True)
class StorageBackend:
    """A storage backend as SGLang's client sees it: how `batch_exists_v2` folds the pools,
    whether a write of a stored key is skipped, and how the backend evicts."""

    name: str
    code: str
    settings: tuple[Setting, ...]
    forbids_layouts: tuple[str, ...] = field(default=())
    """Host layouts SGLang switches away from for this backend (`hicache_hook`)."""

    @property
    def label(self) -> str:
        return f"backend {self.name}"


SGLANG_ERAS: Registry[SGLangEra] = Registry("SGLang era")
STORAGE_BACKENDS: Registry[StorageBackend] = Registry("storage backend")

_FIELDS = "arg_groups/fields/memory.py `Memory`"
_SHARED_ERA_SETTINGS = (
    Setting(
        "host.mode",
        "cache",
        f"`--hicache-host-memory-mode` defaults to cache ({_FIELDS}; unchanged since buffer mode "
        "came in, PR #34798)",
    ),
    Setting(
        "prefetch.policy",
        "timeout",
        f"`--hicache-storage-prefetch-policy` default ({_FIELDS})",
    ),
    Setting("prefetch.threshold_tokens", 256, "`prefetch_threshold` of the backend extra config"),
    Setting("prefetch.timeout_base_s", 1.0, "`prefetch_timeout_base` of the extra config"),
    Setting(
        "prefetch.timeout_per_ki_token_s", 0.25, "`prefetch_timeout_per_ki_token`, extra config"
    ),
    Setting(
        "device.swa_retention",
        "window",
        "out-of-window SWA freeing on by default since PR #34653 (before PR #36386; "
        "`SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`), branching-point caching with it "
        "(PR #34565)",
    ),
    Setting("host.io_backend", "kernel", f"`--hicache-io-backend` default ({_FIELDS})"),
    Setting("host.mem_layout", "page_first", f"`--hicache-mem-layout` default ({_FIELDS})"),
    Setting("heal", "keep_pages", "the discard branch's `invalidate_beyond(KV, keep_pages)`"),
)

_PAGE_SHRINK = Setting(
    "prefetch.shrink",
    "page",
    "cache mode: `alloc_len = min(hit, avail - avail % page)` in `_try_alloc_storage_hit`",
)
SGLANG_ERAS.register(
    "pr36386",
    SGLangEra(
        name="pr36386",
        code="the code right after PR #36386 (the discard heal) merged, August 2026, in "
        "v0.5.19: PR #36227's retries present but off, KV-only existence cache",
        settings=(
            *_SHARED_ERA_SETTINGS,
            Setting(
                "existence_cache.entries",
                131072,
                "`HICACHE_EXISTENCE_CACHE_MAX_ENTRIES = 128 * 1024` "
                "(buffer_mode/storage_existence_cache.py, before PR #39480)",
            ),
            Setting(
                "existence_cache.beliefs",
                "kv",
                "one LRU, used only with `PoolName.KV`: `covers_all(KV, ...)` decides every "
                "pool's write (the FULL check)",
            ),
            Setting(
                "prefetch.retry.max_attempts",
                4,
                f"`--hicache-storage-prefetch-retry-max-attempts` 4 (PR #36227; {_FIELDS})",
            ),
            Setting(
                "prefetch.retry.interval_passes",
                0,
                "`--hicache-storage-prefetch-retry-poll-interval` 0: retries off (PR #36227)",
            ),
            Setting(
                "host.anchor_lock_cap",
                0.0,
                "anchor pins opt-in behind `SGLANG_ENABLE_HICACHE_BUFFER_ANCHOR_LOCK` (PR #35769)",
            ),
            _PAGE_SHRINK,
        ),
        buffer_only_pools=frozenset({"kv", "swa"}),
        memory_tiers=TIERS_BEFORE_37898,
    ),
)
_RETRIES_ON = (
    Setting(
        "prefetch.retry.max_attempts",
        8,
        "`StoragePrefetchRetries`, max attempts 4 -> 8 (PR #39283, v0.5.20)",
    ),
    Setting(
        "prefetch.retry.interval_passes",
        8,
        "poll interval 0 -> 8 scheduling passes (PR #39283)",
    ),
    Setting(
        "existence_cache.entries",
        524288,
        "`512 * 1024` (PR #39480, merged before v0.5.20)",
    ),
    Setting(
        "host.anchor_lock_cap",
        0.5,
        "`SGLANG_HICACHE_BUFFER_ANCHOR_LOCK_CAP` 0.5, pins on by default (PR #37464)",
    ),
)
SGLANG_ERAS.register(
    "v0.5.20",
    SGLangEra(
        name="v0.5.20",
        code="the release of September 2026 (retries on, PR #39283); read at the stored "
        "commit 31980163, the closest to it: KV-only beliefs, Mamba allowed in buffer mode",
        settings=(
            *_SHARED_ERA_SETTINGS,
            *_RETRIES_ON,
            Setting(
                "existence_cache.beliefs",
                "kv",
                "`invalidate_beyond(PoolName.KV, ...)` still the only heal (commit 31980163)",
            ),
            _PAGE_SHRINK,
        ),
        buffer_only_pools=frozenset({"kv", "swa", "mamba"}),
        memory_tiers=TIERS_SINCE_37898,
    ),
)
SGLANG_ERAS.register(
    "main",
    SGLangEra(
        name="main",
        code="the newest stored code: per-pool existence beliefs (`PoolExistenceBeliefs`), "
        "no retry for a span below the threshold (PR #40042)",
        settings=(
            *_SHARED_ERA_SETTINGS,
            *_RETRIES_ON,
            Setting(
                "existence_cache.beliefs",
                "per_pool",
                "`PoolExistenceBeliefs`, one LRU of 512K per pool, nodes written pool by pool "
                "(buffer_mode/storage_existence_cache.py, pipeline.py `_write_intents`)",
            ),
            Setting(
                "prefetch.shrink",
                "restorable",
                "cache mode: a hit that does not fit shrinks to the largest restorable endpoint "
                "(`restorable_prefix_pages`; its tests, the source not stored)",
            ),
        ),
        buffer_only_pools=frozenset({"kv", "swa", "mamba"}),
        memory_tiers=TIERS_SINCE_37898,
    ),
)

_MIN_FOLD = (
    "per pool the largest endpoint at or below the KV hit whose tail is stored, then the "
    "minimum (`batch_exists_v2`)"
)
STORAGE_BACKENDS.register(
    "file",
    StorageBackend(
        name="file",
        code="`HiCacheFile` (mem_cache/hicache_storage.py)",
        settings=(
            Setting("storage.hit_query", "min_of_pools", _MIN_FOLD),
            Setting(
                "storage.write_dedup",
                True,
                '`set` skips a key that exists ("already exists. Skipped.")',
            ),
            Setting(
                "storage.eviction",
                "lru",
                "`_evictor.touch` on a read and on a skipped write; eviction only with "
                "`SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE` (unset: unbounded)",
            ),
            Setting(
                "storage.exists_ttl_s",
                0.0,
                "metadata cache off (`SGLANG_HICACHE_FILE_BACKEND_ENABLE_METADATA_CACHE` False; "
                "5 s TTL when on)",
            ),
            Setting(
                "storage.failed_read",
                "halt",
                "`get` catches only FileNotFoundError: a short read raises IOError, as does EIO, "
                "out of `batch_get` and ends the prefetch IO worker (PR #39269, open, would "
                "make it a miss)",
            ),
            Setting(
                "storage.failed_put_torn",
                False,
                "`set` writes a temporary file and renames it over the key (`os.replace`), "
                "removing it when the write fails (described by PR #28654, June 2026)",
            ),
        ),
    ),
)
STORAGE_BACKENDS.register(
    "hf3fs",
    StorageBackend(
        name="hf3fs",
        code="`HiCacheHF3FS` (mem_cache/storage/hf3fs/storage_hf3fs.py)",
        settings=(
            Setting("storage.hit_query", "min_of_pools", _MIN_FOLD),
            Setting(
                "storage.write_dedup",
                True,
                "`reserve_and_allocate_page_indices` reports a written key, which is skipped",
            ),
            Setting(
                "storage.eviction",
                "lru",
                "a full file reuses the page of its least recently used key",
            ),
            Setting(
                "storage.failed_read",
                "keep",
                "a read shorter than the page is logged and fails (`_batch_get`, "
                "`_pool_batch_get`); nothing is removed",
            ),
        ),
    ),
)
STORAGE_BACKENDS.register(
    "nixl",
    StorageBackend(
        name="nixl",
        code="`HiCacheNixl` (mem_cache/storage/nixl/hicache_nixl.py)",
        settings=(
            Setting("storage.hit_query", "min_of_pools", _MIN_FOLD),
            Setting(
                "storage.write_dedup",
                False,
                "`batch_set_v1` / `batch_set_v2` write every key: no existence check found",
            ),
            Setting("storage.eviction", "lru", "no eviction of its own (a bound is LRU here)"),
            Setting(
                "storage.failed_read",
                "keep",
                "`_xfer_and_wait` returns False on a transfer error or exception; nothing is "
                "removed",
            ),
        ),
    ),
)
STORAGE_BACKENDS.register(
    "mooncake",
    StorageBackend(
        name="mooncake",
        code="`MooncakeStore` (mem_cache/storage/mooncake_store/mooncake_store.py) and the "
        "Mooncake master (mooncake-store/src/master_service.cpp)",
        settings=(
            Setting(
                "storage.hit_query",
                "intersect",
                "`batch_exists_v2` intersects each pool's legal endpoints and returns the "
                "largest common one",
            ),
            Setting(
                "storage.write_dedup",
                True,
                "puts only the keys `batch_is_exist` reports missing",
            ),
            Setting(
                "storage.eviction",
                "lease",
                "evicts the smallest lease deadline first: a put leases to its write time, "
                "`ExistKey` and reads to now + TTL, so order is by last touch (FIFO for "
                "objects never touched again; SGLang PR #39747)",
            ),
            Setting(
                "storage.eviction_high_watermark_ratio",
                0.9,
                "`eviction_high_watermark_ratio` 0.90 (Mooncake PR #3022)",
            ),
            Setting(
                "storage.eviction_ratio",
                0.05,
                "`eviction_ratio` 0.05 (Mooncake `types.h`)",
            ),
            Setting(
                "storage.failed_read",
                "keep",
                "`batch_get_into` reports a negative result per key, the page fails; nothing is "
                "removed",
            ),
        ),
        forbids_layouts=("layer_first",),
    ),
)


def era_of(doc: dict[str, Any]) -> SGLangEra | None:
    """The era a raw document names (None for none, `custom` or an unknown name)."""
    return _named(SGLANG_ERAS, doc, "server", "sglang")


def backend_of(doc: dict[str, Any]) -> StorageBackend | None:
    return _named(STORAGE_BACKENDS, doc, "storage", "backend")


def _named(registry: Registry[Any], doc: dict[str, Any], section: str, key: str) -> Any:
    part = doc.get(section)
    name = part.get(key) if isinstance(part, dict) else None
    return registry.get(name) if isinstance(name, str) else None


def refusals(era: SGLangEra, pools: tuple[str, ...], host_mode: str) -> Iterator[tuple[str, str]]:
    """(key, message) for each combination the era's server refuses to start with."""
    if host_mode != "buffer_only":
        return
    refused = [pool for pool in pools if pool not in era.buffer_only_pools]
    if not refused:
        return
    allowing = [
        other.name for other in SGLANG_ERAS.values() if set(refused) <= other.buffer_only_pools
    ]
    later = f"; allowed from {allowing[0]}" if allowing else ""
    yield (
        "host.mode",
        f"SGLang {era.name} refuses buffer_only host memory with a {', '.join(refused)} pool "
        "(init_hicache: '--hicache-host-memory-mode buffer_only supports only FULL/SWA "
        f"unified trees'){later}",
    )
