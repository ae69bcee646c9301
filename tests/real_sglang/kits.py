"""Per-release builders of a real `buffer_only` UnifiedRadixCache with the file backend.

0.5.23 ships test kits (`sglang/test/kits/unified_radix_cache/`) that build the cache, its
pools and its HiCache controller; `Kit0523` drives them (FULL+SWA; FULL+Mamba, which the kit's
buffer_only builder skips, and DSA's MLA KV with its indexer sidecar (`dsa.py`), which it does
not build, both finished with the kit's own `_init_hicache`).
Each method is one thing the driver needs (build an instance, play one request, back a sequence
up, read the beliefs); 0.5.19 ships no kit and supplies its own fixture behind the same methods
(`kit0519.py`).
"""

from __future__ import annotations

import time
import unittest
from array import array
from typing import Any

from tests.real_sglang import cpu

HANG_S = 120.0
"""How long a pump waits before it calls the step hung (the first prefetch of a process waits
for the storage threads' lazy imports, slow on a loaded machine)."""


def for_release(release: str) -> Any:
    if release == "0.5.23":
        return Kit0523()
    if release == "0.5.19":
        from tests.real_sglang.kit0519 import Kit0519

        return Kit0519()
    raise ValueError(f"no real-SGLang fixture for {release}")


def _test_case(bases: tuple[type, ...]) -> Any:
    """An instance of the kit's fixture mixins as a TestCase (their assertions and cleanups)."""

    def run_test(self: Any) -> None:
        """Never run."""

    cls = type("RealCase", (*bases, unittest.TestCase), {"runTest": run_test})
    return cls()


def out_of_window(case: dict[str, Any], tokens: int) -> int:
    """Where a finished request's live SWA starts: a running request frees the SWA slots that
    fell out of its window (page by page), so its insert carries only the window's tail."""
    window = case.get("window_tokens")
    if not window:
        return 0
    page = case["page_size"]
    return max(0, tokens - -(-window // page) * page)


def aux_pools(case: dict[str, Any]) -> set[str]:
    """The case's aux pools (their served pages are recorded even when none)."""
    return {
        name
        for name, on in (("swa", case.get("window_tokens")), ("mamba", case.get("mamba")))
        if on
    }


class Kit0523:
    def __init__(self) -> None:
        from sglang.test.kits.unified_radix_cache import storage

        cpu.install()
        self.storage = storage
        self.fixture = _test_case((storage.UnifiedRadixCacheStorageFixtures,))

    def storage_dir(self) -> str:
        return str(self.fixture._make_storage_dir())

    def build(self, storage_dir: str, case: dict[str, Any]) -> Any:
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
        from sglang.test.kits.unified_radix_cache.config import CacheConfig

        components = [ComponentType.FULL]
        if case.get("window_tokens"):
            components.append(ComponentType.SWA)
        mamba = bool(case.get("mamba"))
        if mamba:
            components.append(ComponentType.MAMBA)
        self.fixture.cfg = CacheConfig(
            page_size=case["page_size"],
            components=tuple(components),
            sliding_window_size=case.get("window_tokens"),
            kv_size=case.get("device_tokens", 1024),
            max_context_len=1024,
            # Mamba with pages over one token needs the extra (ping-pong) buffer
            enable_mamba_extra_buffer=mamba and case["page_size"] > 1,
            mamba_cache_size=60,
        )
        if case.get("dsa"):
            from tests.real_sglang import dsa

            built = self._build_buffer_only(dsa.build_fixture(self.fixture.cfg), storage_dir)
        elif mamba:
            from sglang.test.kits.unified_radix_cache.fixtures import build_fixture

            built = self._build_buffer_only(build_fixture(self.fixture.cfg), storage_dir)
        else:
            built = self.fixture._build_buffer_hicache_fixture(storage_dir)
        cache, allocator, req_to_token = built
        entries = case.get("existence_entries")
        if entries:
            cache.storage_existence_cache.max_entries = entries
            for pool in cache.storage_existence_cache._pools.values():
                pool.max_entries = entries
        return (cache, allocator, req_to_token, case)

    def _build_buffer_only(self, fixture: Any, storage_dir: str) -> Any:
        """The kit's buffer_only build skips Mamba (its load-back requests are Mocks, and
        its Mamba coverage is a GPU bit-exact suite) and builds MHA pools only; here the same
        `_init_hicache` call it makes on a fixture built elsewhere (FULL+Mamba, DSA), with real
        requests at admission (`_consume_staged_prefetch` builds them)."""
        self.fixture._init_hicache(
            fixture[0],
            storage_backend="file",
            storage_dir=storage_dir,
            prefetch_threshold=1,
            host_memory_mode="buffer_only",
            prefetch_policy="wait_complete",
        )
        return fixture

    def backend(self, inst: Any) -> Any:
        return inst[0].cache_controller.storage_backend

    def _match(self, cache: Any, tokens: list[int]) -> Any:
        from sglang.test.kits.unified_radix_cache.fixtures import match_prefix

        return match_prefix(cache, tokens)

    def request(self, inst: Any, tokens: list[int], rid: str, observed: Any) -> dict[str, Any]:
        """One request's admission: device match, prefetch of the rest, its completion and
        its admission (the staged prefetch consumed, as the PrefillAdder does)."""
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

        cache = inst[0]
        match = self._match(cache, tokens)
        device = int(match.device_prefix_len)
        record: dict[str, Any] = {"device_tokens": device, "query": None, "outcome": "miss"}
        if device >= len(tokens):
            record["outcome"] = "device"
            record["loaded_tokens"] = 0
            return record
        anchor = match.last_device_node
        root = cache.root_node_handle()
        last_hash = None if anchor == root else cache.get_last_hash_value(anchor)
        handle = CacheRequestHandle(rid, 0)
        checks: list[tuple[int, dict[str, int], bool]] = []
        original = cache._check_hybrid_prefetch_result

        def check(request: Any, operation: Any, *args: Any, **kwargs: Any) -> bool:
            kept = original(request, operation, *args, **kwargs)
            result = operation.pool_storage_result
            hits = dict(getattr(result, "extra_pool_hit_pages", None) or {})
            checks.append((int(operation.completed_tokens), hits, bool(kept)))
            return bool(kept)

        cache._check_hybrid_prefetch_result = check
        try:
            cache.prefetch_from_storage(
                handle,
                anchor,
                array("q", tokens[device:]),
                last_hash,
                None,
                matched_prefix_tokens=tokens[:device],
            )
            deadline = time.time() + HANG_S
            while not cache.check_prefetch_progress(handle):
                cache.check_hicache_events()
                if time.time() > deadline:
                    raise TimeoutError("prefetch did not complete")
                time.sleep(0.005)
            pipeline = cache.buffer_pipeline
            if pipeline is not None and pipeline.has_staged(handle):
                self.fixture._consume_staged_prefetch(cache, handle, timeout=HANG_S)
        finally:
            cache._check_hybrid_prefetch_result = original
        if observed.queries:
            answer = observed.queries[0]
            pools = answer.extra_pool_hit_pages or {}
            record["query"] = {
                "pages": int(answer.kv_hit_pages),
                "pools": {str(getattr(k, "value", k)): int(v) for k, v in pools.items()},
            }
        if checks:
            completed, hits, kept = checks[-1]
            record["completed_tokens"] = completed
            record["aux_hit_pages"] = {
                str(getattr(k, "value", k)): int(v)
                for k, v in hits.items()
                if v or k in aux_pools(inst[3])
            }
            record["outcome"] = "success" if kept else "discarded"
        after = int(self._match(cache, tokens).device_prefix_len)
        record["loaded_tokens"] = after - device
        return record

    def insert(self, inst: Any, tokens: list[int]) -> None:
        """The finished request's sequence inserted, its out-of-window SWA already freed."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.mem_cache.unified_cache.components.base import ComponentType

        cache, allocator, req_to_token, case = inst
        value = self.fixture._alloc(allocator, len(tokens))[: len(tokens)]
        live_from = out_of_window(case, len(tokens))
        params = InsertParams(key=RadixKey(array("q", tokens)), value=value)
        if case.get("mamba"):  # the finished request's state slot (the kit's `_insert`)
            params.mamba_value = self.fixture._make_req(req_to_token).kv.mamba_pool_idx[None]
        if live_from:
            params.component_evicted_seqlens = {ComponentType.SWA: live_from}
        cache.insert(params)
        if live_from:
            allocator.free_swa(value[:live_from])

    def backup(self, inst: Any, tokens: list[int]) -> None:
        """The sequence backed up, parent first, until storage acknowledges every write."""
        from sglang.test.kits.unified_radix_cache.fixtures import write_backup

        cache = inst[0]
        leaf = self._match(cache, tokens).last_device_node
        write_backup(cache, leaf)
        pipeline = cache.buffer_pipeline
        self.fixture._pump_hicache_until(
            cache,
            lambda: not pipeline.inflight_backup_node_ids and not pipeline.ongoing_backup,
            "buffer backup pipeline did not drain",
            timeout=HANG_S,
        )

    def page_hashes(self, inst: Any, tokens: list[int]) -> dict[tuple[int, ...], str]:
        cache = inst[0]
        leaf = self._match(cache, tokens).last_device_node
        hashes = self.fixture._all_page_hashes(cache, leaf)
        page = cache.page_size
        return {tuple(tokens[: (i + 1) * page]): h for i, h in enumerate(hashes)}

    def beliefs(self, inst: Any, page_hashes: list[str]) -> dict[str, list[int]]:
        pools = inst[0].storage_existence_cache._pools
        out = {}
        for name, pool in pools.items():
            entries = pool._entries
            out[str(getattr(name, "value", name))] = [
                i for i, h in enumerate(page_hashes) if h in entries
            ]
        return out

    def cleanup(self) -> None:
        self.fixture.doCleanups()
