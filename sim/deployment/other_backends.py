"""The rest of the storage backends SGLang's `StorageBackendFactory` registers
(mem_cache/storage/backend_factory.py): each with the first release that registers it
(`since`), its hybrid hit query as the code answers it, and what its client code says about
write dedup, eviction and failed reads.

Where SGLang's client leaves a behaviour to the store behind it (eviction, a failed read), the
evidence says "not found" and the setting is the schema's default. The hit queries new here are
mori's cascading minimum, shm's answer of nothing, and the queries that raise: the backends
with no hybrid `batch_exists_v2` of their own, and npu_memcache's for an SWA pool. What a
raised query does is the release's (`prefetch.hit_query_error`): through 0.5.21 the controller's
prefetch thread ends, from 0.5.22 the query counts 0 pages.

Not backends here: `dynamic` loads a class the deployment names (`backend_name`,
`module_path`, `class_name`), whose behaviour no release's code says; lmcache and flexkv replace
the radix cache (`--enable-lmcache`, `--enable-flexkv`) rather than serve HiCache's storage
tier; mmap is a host memory allocator.
"""

from __future__ import annotations

from sim.deployment.profiles import STORAGE_BACKENDS, Setting, StorageBackend

_RAISED = "what the controller does with the error is the release's `prefetch.hit_query_error`"
_NO_EVICTION = Setting(
    "storage.eviction",
    "lru",
    "not found: the client leaves eviction to the store (the schema's default)",
)
_KEEP = Setting(
    "storage.failed_read",
    "keep",
    "not found: a failed read is reported per key and nothing is removed (the schema's default)",
)


def _no_dedup(where: str) -> Setting:
    return Setting(
        "storage.write_dedup", False, f"every key is written: no existence check found ({where})"
    )


def _no_v2(release: str, code: str) -> Setting:
    """The hit query of a backend without a `batch_exists_v2` of its own."""
    return Setting(
        "storage.hit_query",
        "raises",
        f"{code} has no batch_exists_v2: the base raises NotImplementedError "
        f"({release}: mem_cache/hicache_storage.py:HiCacheStorage.batch_exists_v2); {_RAISED}",
    )


STORAGE_BACKENDS.register(
    "mori",
    StorageBackend(
        name="mori",
        code="`UMBPStore` (mem_cache/storage/umbp/umbp_store.py)",
        settings=(
            Setting(
                "storage.hit_query",
                "cascading_min",
                "each pool asked only about the keys up to the running minimum, its boundary "
                "there the new minimum (0.5.18: mem_cache/storage/umbp/umbp_store.py:"
                "UMBPStore.batch_exists_v2)",
            ),
            _no_dedup("0.5.18: mem_cache/storage/umbp/umbp_store.py:UMBPStore.batch_set_v1"),
            _NO_EVICTION,
            _KEEP,
        ),
    ),
)
STORAGE_BACKENDS.register(
    "npu_memcache",
    StorageBackend(
        name="npu_memcache",
        code="`NpuMemcacheStore` (mem_cache/storage/npu_memcache/npu_memcache_store.py)",
        settings=(
            Setting(
                "storage.hit_query",
                "min_of_pools_no_swa",
                "each pool's largest endpoint at or below the KV hit, then the minimum "
                "(0.5.20: mem_cache/storage/npu_memcache/npu_memcache_store.py:"
                "NpuMemcacheStore.batch_exists_v2); object names for indexer, Mamba and draft "
                "pools only: an SWA pool raises 'Unsupported hybrid pool' (0.5.20: mem_cache/"
                "storage/npu_memcache/npu_memcache_store.py:"
                "NpuMemcacheStore._get_hybrid_page_component_keys)",
            ),
            Setting(
                "storage.write_dedup",
                True,
                "puts only the keys `_batch_exist` reports missing (0.5.20: mem_cache/storage/"
                "npu_memcache/npu_memcache_store.py:NpuMemcacheStore.batch_set_v1)",
            ),
            _NO_EVICTION,
            _KEEP,
        ),
        forbids_layouts=("layer_first",),
        since="0.5.20",
    ),
)
STORAGE_BACKENDS.register(
    "seaweedfs",
    StorageBackend(
        name="seaweedfs",
        code="`SeaweedFSStore` (mem_cache/storage/seaweedfs/seaweedfs_store.py)",
        settings=(
            Setting(
                "storage.hit_query",
                "min_of_pools",
                "each pool's largest endpoint at or below the KV hit, then the minimum "
                "(0.5.22: mem_cache/storage/seaweedfs/seaweedfs_store.py:"
                "SeaweedFSStore.batch_exists_v2)",
            ),
            _no_dedup(
                "0.5.22: mem_cache/storage/seaweedfs/seaweedfs_store.py:SeaweedFSStore.batch_set_v1"
            ),
            _NO_EVICTION,
            _KEEP,
        ),
        since="0.5.22",
    ),
)
STORAGE_BACKENDS.register(
    "sim",
    StorageBackend(
        name="sim",
        code="`SimHiCacheStorage` (mem_cache/storage/sim_storage.py), SGLang's in-memory "
        "benchmark store of keys only",
        settings=(
            Setting(
                "storage.hit_query",
                "min_of_pools",
                "the file backend's minimum over an in-memory key set (0.5.19: mem_cache/storage/"
                "sim_storage.py:SimHiCacheStorage.batch_exists_v2)",
            ),
            _no_dedup("0.5.19: mem_cache/storage/sim_storage.py:SimHiCacheStorage.batch_set_v1"),
            Setting(
                "storage.eviction",
                "lru",
                "never evicts: the key set is unbounded (0.5.19: mem_cache/storage/sim_storage.py:"
                "SimHiCacheStorage.batch_set_v1); a bound is LRU here",
            ),
            _KEEP,
        ),
        since="0.5.19",
    ),
)
STORAGE_BACKENDS.register(
    "shm",
    StorageBackend(
        name="shm",
        code="`HiCacheShm` (mem_cache/storage/shm/hicache_shm.py), a stand-in for the "
        "shared-memory host allocator",
        settings=(
            Setting(
                "storage.hit_query",
                "none",
                "`exists` is False and batch_exists_v2 reports 0 pages, for every model "
                "(0.5.18: mem_cache/storage/shm/hicache_shm.py:HiCacheShm.batch_exists_v2)",
            ),
            Setting(
                "storage.write_dedup",
                True,
                "not found: `batch_set_v2` reports every key written and stores nothing "
                "(0.5.18: mem_cache/storage/shm/hicache_shm.py:HiCacheShm.batch_set_v2)",
            ),
            _NO_EVICTION,
            _KEEP,
        ),
    ),
)
STORAGE_BACKENDS.register(
    "tensorcast",
    StorageBackend(
        name="tensorcast",
        code="`TensorcastStore` (mem_cache/storage/tensorcast_store/tensorcast_store.py)",
        settings=(
            Setting(
                "storage.hit_query",
                "raises",
                "batch_exists_v2 raises NotImplementedError ('TensorCast initially supports "
                "FULL v1 only'; 0.5.21: mem_cache/storage/tensorcast_store/tensorcast_store.py:"
                f"TensorcastStore.batch_exists_v2); {_RAISED}",
            ),
            _no_dedup(
                "0.5.21: mem_cache/storage/tensorcast_store/tensorcast_store.py:"
                "TensorcastStore.batch_set_v1"
            ),
            _NO_EVICTION,
            _KEEP,
        ),
        since="0.5.21",
    ),
)
STORAGE_BACKENDS.register(
    "aibrix",
    StorageBackend(
        name="aibrix",
        code="`AibrixKVCacheStorage` (mem_cache/storage/aibrix_kvcache/aibrix_kvcache_storage.py)",
        settings=(
            _no_v2("0.5.18", "AibrixKVCacheStorage"),
            _no_dedup(
                "0.5.18: mem_cache/storage/aibrix_kvcache/aibrix_kvcache_storage.py:"
                "AibrixKVCacheStorage.batch_set"
            ),
            _NO_EVICTION,
            _KEEP,
        ),
    ),
)
STORAGE_BACKENDS.register(
    "eic",
    StorageBackend(
        name="eic",
        code="`EICStorage` (mem_cache/storage/eic/eic_storage.py)",
        settings=(
            _no_v2("0.5.18", "EICStorage"),
            _no_dedup("0.5.18: mem_cache/storage/eic/eic_storage.py:EICStorage.batch_set_v1"),
            _NO_EVICTION,
            _KEEP,
        ),
    ),
)
STORAGE_BACKENDS.register(
    "simm",
    StorageBackend(
        name="simm",
        code="`HiCacheSiMM` (mem_cache/storage/simm/hicache_simm.py)",
        settings=(
            _no_v2("0.5.18", "HiCacheSiMM"),
            Setting(
                "storage.write_dedup",
                True,
                "sets only the keys `_batch_exist_impl` reports missing (0.5.18: "
                "mem_cache/storage/simm/hicache_simm.py:HiCacheSiMM.batch_set_v1)",
            ),
            _NO_EVICTION,
            _KEEP,
        ),
    ),
)
