"""Storage backends as SGLang's client sees them: how each answers the hybrid hit query, whether
it skips a write of a stored key, how it evicts and what a failed read leaves behind.

A backend's behaviour is the code of the release that runs it: `changes` holds what a later
release changed (the file backend intersects the pools from 0.5.23 on), and a scenario's
backend settings are read for the release it names (none named: the newest).
"""

from __future__ import annotations

from sim.deployment.profiles import STORAGE_BACKENDS, Setting, StorageBackend

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
                "`HiCacheFile.get` catches only FileNotFoundError: a short read raises IOError, "
                "as does EIO, and nothing catches it, which ends the prefetch IO worker "
                "(0.5.18: managers/cache_controller.py:HiCacheController._page_transfer)",
            ),
            Setting(
                "storage.failed_put_torn",
                False,
                "`set` writes a temporary file and renames it over the key (`os.replace`), "
                "removing it when the write fails (described by PR #28654, June 2026)",
            ),
        ),
        changes=(
            (
                "0.5.22",
                Setting(
                    "storage.failed_read",
                    "miss_batch",
                    "the controller catches the error: the KV batch counts 0 pages, the object "
                    "stays and the IO worker goes on (0.5.22: managers/cache_controller.py:"
                    "HiCacheController._page_transfer)",
                ),
            ),
            (
                "0.5.23",
                Setting(
                    "storage.hit_query",
                    "intersect",
                    "each pool's restorable endpoints, intersected "
                    "(0.5.23: mem_cache/hicache_storage.py:HiCacheFile.batch_exists_v2)",
                ),
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
                "min_of_pools",
                "each pool's largest endpoint, then the minimum "
                "(0.5.18: mem_cache/storage/mooncake_store/mooncake_store.py:"
                "MooncakeStore.batch_exists_v2)",
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
        changes=(
            (
                "0.5.19",
                Setting(
                    "storage.hit_query",
                    "intersect",
                    "each pool's legal endpoints intersected, the largest common one returned "
                    "(0.5.19: mem_cache/storage/mooncake_store/mooncake_store.py:"
                    "MooncakeStore.batch_exists_v2)",
                ),
            ),
        ),
    ),
)
