"""SGLang's releases 0.5.18-0.5.23: the HiCache defaults and mechanisms each one ships.

Every value is read from that release's wheel (`pip download --no-deps sglang==VERSION`) and
cited as `release: file:function` below the package root `sglang/srt/`; the mechanisms that
differ between releases are checked against the released code itself by the conformance suite
(`tests/conformance/`). `pr36386` names 0.5.19, the first release with the discard heal, and
`latest` the newest release here.
"""

from __future__ import annotations

from sim.deployment.profiles import (
    LATEST,
    SGLANG_RELEASES,
    ChunkTier,
    Setting,
    SGLangRelease,
    release_order,
)

_GIB = 1024
TIERS_BEFORE_0_5_20 = (
    ChunkTier(20 * _GIB, 2048, 8, 8),
    ChunkTier(35 * _GIB, 2048, 24, 80),
    ChunkTier(60 * _GIB, 4096, 32, 160),
    ChunkTier(160 * _GIB, 8192, 256, 512),
    ChunkTier(float("inf"), 16384, 512, 512),
)
"""`handle_gpu_memory_settings` through 0.5.19 (in MiB; the 60-90 and 90-160 GiB rows of
SGLang's table have the same values and are one row here)."""
TIERS_SINCE_0_5_20 = (
    ChunkTier(20 * _GIB, 2048, 8, 8),
    ChunkTier(35 * _GIB, 4096, 48, 160),
    *TIERS_BEFORE_0_5_20[2:],
)
"""0.5.20 raised the 20-35 GiB tier (32 GB cards) to 4096 tokens and 48 / 160 graphs
(0.5.20: arg_groups/memory_hook.py:handle_gpu_memory_settings)."""

_ARGS_0_5_18 = "0.5.18: server_args.py:ServerArgs"
_ARGS = "arg_groups/fields/memory.py:Memory"
_CACHE = "mem_cache/buffer_mode/storage_existence_cache.py"
_TREE = "mem_cache/unified_radix_cache.py:UnifiedRadixCache"


def _shared(args: str) -> tuple[Setting, ...]:
    """The defaults every release ships alike, cited at `args` (where its server arguments
    are declared)."""
    return (
        Setting("prefetch.policy", "timeout", f"`--hicache-storage-prefetch-policy` ({args})"),
        Setting("prefetch.threshold_tokens", 256, "`prefetch_threshold` of the extra config"),
        Setting("prefetch.timeout_base_s", 1.0, "`prefetch_timeout_base` of the extra config"),
        Setting(
            "prefetch.timeout_per_ki_token_s", 0.25, "`prefetch_timeout_per_ki_token`, extra config"
        ),
        Setting(
            "device.swa_retention",
            "window",
            "out-of-window SWA freeing on by default "
            "(`SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`), branching points cached",
        ),
        Setting("host.io_backend", "kernel", f"`--hicache-io-backend` ({args})"),
        Setting("host.mem_layout", "page_first", f"`--hicache-mem-layout` ({args})"),
        Setting(
            "prefetch.shrink",
            "page",
            "cache mode: `alloc_len = min(hit, avail - avail % page)` "
            f"({_TREE}._try_alloc_storage_hit)",
        ),
    )


def _short_span(release: str, value: str) -> Setting:
    """What a mid-tree span shorter than the SWA window asks the SWA pool for."""
    where = (
        "mem_cache/unified_cache/components/swa_component.py"
        if release in ("0.5.18", "0.5.19")
        else "mem_cache/unified_cache/components/swa.py"
    )
    what = {"own_pages": "its own pages in buffer_only mode", "none": "no SWA transfer"}[value]
    return Setting(
        "prefetch.short_span_aux",
        value,
        f"{what} ({release}: {where}:SWAComponent.prepare_prefetch)",
    )


def _threshold_floor(release: str) -> Setting:
    """The least prefetch threshold: from 0.5.20 a buffer_only server raises it to one full
    SWA window."""
    if release in ("0.5.18", "0.5.19"):
        return Setting(
            "prefetch.threshold_floor",
            "page",
            f"`prefetch_threshold` as configured ({release}: {_TREE}.init_hicache)",
        )
    return Setting(
        "prefetch.threshold_floor",
        "swa_window",
        "buffer_only: at least one full SWA window "
        f"({release}: mem_cache/unified_cache/storage_attachment.py:"
        "StorageAttachment.resolve_prefetch_threshold)",
    )


def _sidecar_read(release: str) -> Setting:
    """When a KV-derived sidecar (the DSA indexer) is read, and how its shortfall clamps."""
    if release == "0.5.18":
        return Setting(
            "prefetch.sidecar_read",
            "after_kv",
            "sidecars read once KV completed (0.5.18: mem_cache/hybrid_cache/"
            "hybrid_cache_controller.py:HybridCacheController._page_transfer), the usable "
            f"prefix clamped to their runs (0.5.18: {_TREE}._sync_and_check_hybrid_prefetch_"
            "result)",
        )
    return Setting(
        "prefetch.sidecar_read",
        "with_kv_batch",
        "each KV batch also reads its sidecar pages, the batch's hit the shorter run "
        f"({release}: managers/cache_controller.py:HiCacheController._page_transfer_kv_batch)",
    )


def _host_fraction(release: str) -> tuple[Setting, ...]:
    """Host-memory auto-sizing: 0.5.21 on lowers the default ratio to fit the host."""
    if release in ("0.5.18", "0.5.19", "0.5.20"):
        return (
            Setting(
                "host.auto_size",
                False,
                f"no host-memory auto-sizing ({release} has no mem_cache/hicache_auto_size.py)",
            ),
        )
    where = f"({release}: mem_cache/hicache_auto_size.py:auto_size_hicache)"
    return (
        Setting(
            "host.auto_size",
            True,
            "with neither --hicache-ratio nor --hicache-size the ratio is lowered until the "
            f"host pools fit {where}",
        ),
        Setting("host.memory_fraction", 0.8, f"`--hicache-host-memory-fraction` 0.8 {where}"),
    )


def _host_mode(release: str, args: str) -> Setting:
    return Setting("host.mode", "cache", f"`--hicache-host-memory-mode` ({release}: {args})")


def _retries(release: str, attempts: int, passes: int, args: str) -> tuple[Setting, ...]:
    return (
        Setting(
            "prefetch.retry.max_attempts",
            attempts,
            f"`--hicache-storage-prefetch-retry-max-attempts` {attempts} ({release}: {args})",
        ),
        Setting(
            "prefetch.retry.interval_passes",
            passes,
            f"`--hicache-storage-prefetch-retry-poll-interval` {passes}"
            f"{' (off)' if passes == 0 else ' scheduling passes'} ({release}: {args})",
        ),
    )


_RETRIES = "mem_cache/storage_prefetch.py:StoragePrefetchRetries"


def _retry_rules(release: str) -> tuple[Setting, ...]:
    """How the retry pass treats the queue head, short spans and a deadline, per release."""
    if release == "0.5.19":
        head = Setting(
            "prefetch.retry.head_exempt",
            False,
            "the queue head is re-issued like any other "
            "(0.5.19: managers/scheduler.py:Scheduler._retry_missed_storage_prefetches)",
        )
    else:
        head = Setting(
            "prefetch.retry.head_exempt",
            True,
            f"a paced retry of `waiting_queue[0]` is cancelled ({release}: {_RETRIES}.pop_ready)",
        )
    short = release in ("0.5.19", "0.5.20")
    return (
        head,
        Setting(
            "prefetch.retry.short_spans",
            short,
            (
                "a span below the threshold arms a paced retry"
                if short
                else "a span below the threshold arms no retry"
            )
            + f" ({release}: {_TREE}.prefetch_from_storage)",
        ),
        Setting(
            "prefetch.retry.deadline_cancels",
            release == "0.5.23",
            (
                "an op its deadline stopped cancels its pending retry "
                f"({release}: {_TREE}._mark_prefetch_deadline_expired)"
                if release == "0.5.23"
                else "no deadline check in the retry path "
                f"({release}: {_TREE}.check_prefetch_progress)"
            ),
        ),
    )


def _kv_beliefs(release: str, entries: int) -> tuple[Setting, ...]:
    """0.5.19-0.5.21: one LRU of (pool, hash) keys, used for KV only; the discard heal cuts the
    KV beliefs at the pages every pool served."""
    return (
        Setting(
            "existence_cache.entries",
            entries,
            f"`HICACHE_EXISTENCE_CACHE_MAX_ENTRIES = {entries // 1024} * 1024` "
            f"({release}: {_CACHE})",
        ),
        Setting(
            "existence_cache.beliefs",
            "kv",
            f"`StorageExistenceCache` used with `PoolName.KV` only ({release}: {_CACHE})",
        ),
        Setting(
            "heal",
            "keep_pages",
            f"`invalidate_beyond(KV, keep_pages)` ({release}: {_TREE}."
            "_check_hybrid_prefetch_result)",
        ),
        _deadline(release, True),
    )


def _deadline(release: str, heals: bool) -> Setting:
    """Whether a prefetch its deadline stopped still heals (0.5.23: it does not)."""
    if heals:
        why = "no deadline check before either heal"
        where = "_check_hybrid_prefetch_result"
    else:
        why = "`operation.deadline_expired` skips both heals"
        where = "_mark_prefetch_deadline_expired"
    return Setting("prefetch.heal_after_deadline", heals, f"{why} ({release}: {_TREE}.{where})")


def _pool_beliefs(release: str) -> tuple[Setting, ...]:
    """0.5.22 on: `PoolExistenceBeliefs`, one LRU a pool, a node written pool by pool."""
    return (
        Setting(
            "existence_cache.entries",
            524288,
            f"`HICACHE_EXISTENCE_CACHE_MAX_ENTRIES = 512 * 1024` per pool ({release}: {_CACHE})",
        ),
        Setting(
            "existence_cache.beliefs",
            "per_pool",
            f"`StorageExistenceCache.pool` ({release}: {_CACHE}:PoolExistenceBeliefs)",
        ),
    )


def _anchor_cap(release: str, cap: float, why: str) -> Setting:
    return Setting("host.anchor_lock_cap", cap, f"{why} ({release}: environ.py:Envs)")


_PINS_ON = "`SGLANG_HICACHE_BUFFER_ANCHOR_LOCK_CAP` 0.5, pins on by default"


def _hit_query_error(release: str) -> Setting:
    """What the controller's prefetch thread does when a backend's hit query raises."""
    where = f"({release}: managers/cache_controller.py:HiCacheController.prefetch_thread_func)"
    if release_order(release) >= (0, 5, 22):
        return Setting(
            "prefetch.hit_query_error",
            "miss",
            f"the error is logged and the query counts 0 pages {where}",
        )
    return Setting(
        "prefetch.hit_query_error",
        "stop",
        f"nothing catches the error: the prefetch thread ends and is never restarted {where}",
    )


def _register(release: SGLangRelease, *aliases: str) -> None:
    for name in (release.name, *aliases):
        SGLANG_RELEASES.register(name, release)


_register(
    SGLangRelease(
        name="0.5.18",
        summary="before the existence cache: no buffer_only host mode, no beliefs, no retries",
        settings=(
            *_shared(_ARGS_0_5_18),
            Setting("host.mode", "cache", f"no `--hicache-host-memory-mode` ({_ARGS_0_5_18})"),
            Setting(
                "heal",
                "none",
                f"no existence beliefs to heal (0.5.18: {_TREE}."
                "_sync_and_check_hybrid_prefetch_result releases a discard's host memory only)",
            ),
            *_retries("0.5.18", 0, 0, "no retry arguments in server_args.py"),
            _short_span("0.5.18", "none"),
            _threshold_floor("0.5.18"),
            _sidecar_read("0.5.18"),
            *_host_fraction("0.5.18"),
            _hit_query_error("0.5.18"),
        ),
        buffer_only_pools=frozenset(),
        memory_tiers=TIERS_BEFORE_0_5_20,
    )
)
_register(
    SGLangRelease(
        name="0.5.19",
        summary="buffer_only mode and the KV-only existence cache of 128 Ki entries with the "
        "discard heal (PR #36386); retries present but off",
        settings=(
            *_shared("0.5.19: server_args.py:ServerArgs"),
            _host_mode("0.5.19", "server_args.py:ServerArgs"),
            *_kv_beliefs("0.5.19", 131072),
            *_retries("0.5.19", 4, 0, "server_args.py:ServerArgs"),
            *_retry_rules("0.5.19"),
            _short_span("0.5.19", "own_pages"),
            _threshold_floor("0.5.19"),
            _sidecar_read("0.5.19"),
            *_host_fraction("0.5.19"),
            _hit_query_error("0.5.19"),
            _anchor_cap(
                "0.5.19",
                0.0,
                "anchor pins opt-in behind `SGLANG_ENABLE_HICACHE_BUFFER_ANCHOR_LOCK`",
            ),
        ),
        buffer_only_pools=frozenset({"kv", "swa"}),
        memory_tiers=TIERS_BEFORE_0_5_20,
    ),
    "pr36386",
)
for _version in ("0.5.20", "0.5.21"):
    _register(
        SGLangRelease(
            name=_version,
            summary="retries on (8 attempts, 8 passes), 512 Ki KV-only beliefs, anchor pins on; "
            "Mamba still refused in buffer_only mode",
            settings=(
                *_shared(f"{_version}: {_ARGS}"),
                _host_mode(_version, _ARGS),
                *_kv_beliefs(_version, 524288),
                *_retries(_version, 8, 8, _ARGS),
                *_retry_rules(_version),
                _anchor_cap(_version, 0.5, _PINS_ON),
                _short_span(_version, "none"),
                _threshold_floor(_version),
                _sidecar_read(_version),
                *_host_fraction(_version),
                _hit_query_error(_version),
            ),
            buffer_only_pools=frozenset({"kv", "swa", "indexer"}),
            memory_tiers=TIERS_SINCE_0_5_20,
        )
    )
_register(
    SGLangRelease(
        name="0.5.22",
        summary="per-pool existence beliefs healed pool by pool; Mamba accepted in buffer_only "
        "mode; the file backend's read errors caught",
        settings=(
            *_shared(f"0.5.22: {_ARGS}"),
            _host_mode("0.5.22", _ARGS),
            *_pool_beliefs("0.5.22"),
            Setting(
                "heal",
                "per_pool",
                "each pool's beliefs past what it served, `heal_from_transfer` "
                f"(0.5.22: {_TREE}._check_hybrid_prefetch_result)",
            ),
            _deadline("0.5.22", True),
            *_retries("0.5.22", 8, 8, _ARGS),
            *_retry_rules("0.5.22"),
            _anchor_cap("0.5.22", 0.5, _PINS_ON),
            _short_span("0.5.22", "none"),
            _threshold_floor("0.5.22"),
            _sidecar_read("0.5.22"),
            *_host_fraction("0.5.22"),
            _hit_query_error("0.5.22"),
        ),
        buffer_only_pools=frozenset({"kv", "swa", "mamba", "indexer"}),
        memory_tiers=TIERS_SINCE_0_5_20,
    )
)
_register(
    SGLangRelease(
        name="0.5.23",
        summary="a deadline is not evidence (no heal after it); the file backend's hit query "
        "intersects the pools",
        settings=(
            *_shared(f"0.5.23: {_ARGS}"),
            _host_mode("0.5.23", _ARGS),
            *_pool_beliefs("0.5.23"),
            Setting(
                "heal",
                "per_pool",
                "each pool's beliefs past what it served, `heal_from_transfer` "
                f"(0.5.23: {_TREE}._check_hybrid_prefetch_result)",
            ),
            _deadline("0.5.23", False),
            *_retries("0.5.23", 8, 8, _ARGS),
            *_retry_rules("0.5.23"),
            _anchor_cap("0.5.23", 0.5, _PINS_ON),
            _short_span("0.5.23", "none"),
            _threshold_floor("0.5.23"),
            _sidecar_read("0.5.23"),
            *_host_fraction("0.5.23"),
            _hit_query_error("0.5.23"),
        ),
        buffer_only_pools=frozenset({"kv", "swa", "mamba", "indexer"}),
        memory_tiers=TIERS_SINCE_0_5_20,
    ),
    LATEST,
)
