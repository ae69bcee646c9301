"""0.5.19's fixture: its wheel ships no unified-radix-cache test kit, so this builds its
`buffer_only` FULL+SWA UnifiedRadixCache with the file backend from 0.5.19's own classes
(pools, allocator, cache, `init_hicache`) and drives the same four things `Kit0523` does.

The scheduler's part (admission consuming a staged prefetch, the backup of a finished request's
path) is emulated as 0.5.19's scheduler and PrefillAdder call it
(`managers/scheduler.py:get_new_batch_prefill`, `managers/schedule_policy.py:add_one_req`); every
decision is SGLang's.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import tempfile
import time
from array import array
from types import SimpleNamespace
from typing import Any

from tests.real_sglang import cpu
from tests.real_sglang.kits import HANG_S, Kit0523, out_of_window

LAYERS = 24
FULL_LAYERS = (3, 7, 11, 15, 19, 23)
"""A small hybrid model: 24 layers, every fourth one full attention, the rest SWA."""


class Kit0519(Kit0523):
    def __init__(self) -> None:
        cpu.install()
        self._cleanups: list[Any] = []

    def storage_dir(self) -> str:
        path = tempfile.mkdtemp()
        self._cleanups.append(lambda: shutil.rmtree(path, ignore_errors=True))
        return path

    def _enter(self, manager: Any) -> None:
        manager.__enter__()
        self._cleanups.append(lambda: manager.__exit__(None, None, None))

    def build(self, storage_dir: str, case: dict[str, Any]) -> Any:
        import torch
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.runtime_context import get_parallel
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

        if not case.get("window_tokens") or case.get("mamba"):
            raise ValueError("the 0.5.19 fixture builds FULL+SWA only")
        page, size = case["page_size"], case.get("device_tokens", 1024)
        self._enter(get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1))
        self._enter(envs.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR.override(storage_dir))
        server_args = ServerArgs(
            model_path="dummy",
            page_size=page,
            hicache_io_backend="kernel",
            hicache_write_policy="write_through",
            hicache_storage_backend="file",
            hicache_storage_backend_extra_config=json.dumps({"prefetch_threshold": 1}),
            hicache_storage_prefetch_policy="wait_complete",
            hicache_host_memory_mode="buffer_only",
            context_length=1024,
        )
        set_global_server_args_for_scheduler(server_args)
        swa_layers = [i for i in range(LAYERS) if i not in FULL_LAYERS]
        req_to_token = ReqToTokenPool(
            size=10, max_context_len=1024, device="cpu", enable_memory_saver=False
        )
        kv_pool = SWAKVPool(
            size=size,
            size_swa=size,
            page_size=page,
            dtype=torch.bfloat16,
            head_num=2,
            head_dim=64,
            swa_attention_layer_ids=swa_layers,
            full_attention_layer_ids=list(FULL_LAYERS),
            device="cpu",
        )
        allocator = SWATokenToKVPoolAllocator(
            size=size,
            size_swa=size,
            page_size=page,
            dtype=torch.bfloat16,
            device="cpu",
            kvcache=kv_pool,
            need_sort=False,
        )
        params = CacheInitParams(
            req_to_token_pool=req_to_token,
            token_to_kv_pool_allocator=allocator,
            page_size=page,
            disable=False,
            sliding_window_size=case["window_tokens"],
            tree_components=(ComponentType.FULL, ComponentType.SWA),
        )
        cache = UnifiedRadixCache(params=params)
        cache.init_hicache(server_args, params)
        atexit.unregister(cache.shutdown)
        self._cleanups.append(cache.release_host_resources)
        self._cleanups.append(cache.cache_controller._stop_storage_threads)
        cache.write_through_threshold = 1 << 30  # backups are the driver's, at the end
        cache.load_back_threshold = 0
        controller = cache.cache_controller
        controller.prefetch_capacity_limit = max(
            controller.prefetch_capacity_limit, controller.mem_pool_host.size
        )
        entries = case.get("existence_entries")
        if entries:
            cache.storage_existence_cache.max_entries = entries
        return (cache, allocator, req_to_token, case)

    def _match(self, cache: Any, tokens: list[int]) -> Any:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))

    def _device(self, cache: Any, tokens: list[int]) -> int:
        return len(self._match(cache, tokens).device_indices)

    def _pump(self, cache: Any, done: Any, what: str) -> None:
        deadline = time.time() + HANG_S
        while not done():
            cache.check_hicache_events()
            if time.time() > deadline:
                raise TimeoutError(what)
            time.sleep(0.005)

    def _prefetch(self, cache: Any, tokens: list[int], rid: str, device: int, match: Any) -> None:
        anchor = match.last_device_node
        root = cache.root_node_handle()
        last_hash = None if anchor == root else cache.get_last_hash_value(anchor)
        cache.prefetch_from_storage(
            rid, anchor, tokens[device:], last_hash, None, matched_prefix_tokens=tokens[:device]
        )
        self._pump(cache, lambda: cache.check_prefetch_progress(rid), "prefetch did not complete")
        cache.pop_prefetch_loaded_tokens(rid)
        pipeline = cache.buffer_pipeline
        if not pipeline.has_staged(rid):
            return
        live = self._match(cache, tokens)
        held, held_swa = cache.plan_staged_splice(rid, len(live.device_indices))
        if held <= 0:
            return
        req = SimpleNamespace(
            rid=rid,
            last_node=live.last_device_node,
            prefix_indices=live.device_indices,
            extra_key=None,
            cache_salt=None,
            host_hit_length=held,
            swa_host_hit_length=held_swa,
        )
        with self._locked(cache, req.last_node):
            from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

            cache.init_load_back(
                InitLoadBackParams(best_match_node=None, host_hit_length=held, req=req)
            )
        cache.ready_to_load_host_cache()
        self._pump(cache, lambda: not pipeline.ongoing_buffer_load_back, "load-back did not commit")

    @contextlib.contextmanager
    def _locked(self, cache: Any, node: Any) -> Any:
        """The PrefillAdder's admission lock around init_load_back (`_lock_node`)."""
        params = cache.inc_lock_ref(node).to_dec_params()
        try:
            yield
        finally:
            cache.dec_lock_ref(node, params)

    def request(self, inst: Any, tokens: list[int], rid: str, observed: Any) -> dict[str, Any]:
        cache = inst[0]
        match = self._match(cache, tokens)
        device = len(match.device_indices)
        record: dict[str, Any] = {"device_tokens": device, "query": None, "outcome": "miss"}
        if device >= len(tokens):
            record.update(outcome="device", loaded_tokens=0)
            return record
        checks: list[tuple[int, dict[str, int], bool]] = []
        original = cache._check_hybrid_prefetch_result

        def check(req_id: Any, operation: Any, *args: Any, **kwargs: Any) -> bool:
            kept = original(req_id, operation, *args, **kwargs)
            hits = dict(operation.pool_storage_result.extra_pool_hit_pages or {})
            checks.append((int(operation.completed_tokens), hits, bool(kept)))
            return bool(kept)

        cache._check_hybrid_prefetch_result = check
        try:
            self._prefetch(cache, tokens, rid, device, match)
        finally:
            cache._check_hybrid_prefetch_result = original
        self._records(record, observed, checks)
        record["loaded_tokens"] = self._device(cache, tokens) - device
        return record

    @staticmethod
    def _records(record: dict[str, Any], observed: Any, checks: list[Any]) -> None:
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
                str(getattr(k, "value", k)): int(v) for k, v in hits.items() if v or k == "swa"
            }
            record["outcome"] = "success" if kept else "discarded"

    def insert(self, inst: Any, tokens: list[int]) -> None:
        """The finished request's sequence inserted, its out-of-window SWA already freed."""
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        cache, allocator, _, case = inst
        value = self._alloc(allocator, case["page_size"], len(tokens))
        live_from = out_of_window(case, len(tokens))
        cache.insert(
            InsertParams(
                key=RadixKey(array("q", tokens)), value=value, swa_evicted_seqlen=live_from
            )
        )
        if live_from:
            allocator.free_swa(value[:live_from])

    @staticmethod
    def _alloc(allocator: Any, page: int, need: int) -> Any:
        """FULL and SWA slots for `need` tokens with their FULL->SWA mapping (what the SWA
        allocator's `alloc_extend` does for a batch of one)."""
        aligned = -(-need // page) * page
        full = allocator.full_attn_allocator.alloc(aligned)
        swa = allocator.swa_attn_allocator.alloc(aligned)
        allocator.full_to_swa_index_mapping[full] = swa
        return full[:need]

    def backup(self, inst: Any, tokens: list[int]) -> None:
        """The sequence's path backed up, parent first (what a write-through does), until
        storage acknowledges every write."""
        from sglang.srt.mem_cache.unified_cache.cache_action import BackupKV

        cache = inst[0]
        path = self._path(cache, self._match(cache, tokens).last_device_node)
        cache._execute_and_commit_kv_backup(BackupKV(node_ids=path))
        pipeline = cache.buffer_pipeline
        self._pump(
            cache,
            lambda: not pipeline.inflight_backup_node_ids and not pipeline.ongoing_backup,
            "buffer backup pipeline did not drain",
        )

    @staticmethod
    def _path(cache: Any, node: Any) -> list[Any]:
        chain = []
        root = cache.root_node_handle()
        while node != root:
            chain.append(node)
            node = cache.tree_core.node_by_id(node).parent.id
        return chain[::-1]

    def page_hashes(self, inst: Any, tokens: list[int]) -> dict[tuple[int, ...], str]:
        cache = inst[0]
        hashes: list[str] = []
        for node in self._path(cache, self._match(cache, tokens).last_device_node):
            hashes.extend(cache.tree_core.get_hash_values(node))
        page = cache.page_size
        return {tuple(tokens[: (i + 1) * page]): h for i, h in enumerate(hashes)}

    def beliefs(self, inst: Any, page_hashes: list[str]) -> dict[str, list[int]]:
        """0.5.19 keeps one bounded LRU of (pool, page hash) entries; only KV is ever fed
        (`buffer_mode/pipeline.py`), so only the pools it holds are reported, KV always."""
        entries = inst[0].storage_existence_cache._entries
        pools = sorted({str(getattr(p, "value", p)) for p, _ in entries} | {"kv"})
        held = {(str(getattr(p, "value", p)), h) for p, h in entries}
        return {pool: [i for i, h in enumerate(page_hashes) if (pool, h) in held] for pool in pools}

    def cleanup(self) -> None:
        while self._cleanups:
            action = self._cleanups.pop()
            with contextlib.suppress(Exception):
                action()
