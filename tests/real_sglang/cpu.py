"""CPU shims for SGLang's HiCache: hardware glue only, installed by monkeypatching.

SGLang's cache runs on CPU once five things that only exist on an accelerator are replaced:
the device name, host-memory pinning, the MHA, MLA and DSA-indexer host pools' CUDA copy
kernels (here plain torch indexing between the same per-layer tensors the kernels read: on CPU
the `sgl_kernel.kvcacheio` functions those pools call are never imported), the Mamba host
pool's copies (SGLang's own torch fallback: its `kernel_ascend` io backend in the default `sync`
mode) and stream synchronisation (`torch.cpu.Stream` has none). Nothing here decides anything SGLang
decides; no SGLang code is copied.

`prepare()` runs before the first `sglang` import (with it, one import-time clash of 0.5.19
with the installed transformers is let through), `install()` after it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import sys
import types
from typing import Any

ABSENT = ("torchvision",)
"""Packages SGLang imports at top level on paths the cache never takes, and that would pull a
multi-GB accelerator build of torch: stubbed."""

ABSENT_BY_RELEASE: dict[str, tuple[str, ...]] = {}
"""Per release, more such packages (none so far: 0.5.19's server arguments import xgrammar
at top level, and a stub does not pass pydantic, so run.sh installs its pinned wheel)."""


class _Anything:
    """A stand-in value: every attribute and call gives another stand-in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, absent: tuple[str, ...]) -> None:
        self.absent = absent

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.partition(".")[0] in self.absent:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """A stub has no code to run."""


def prepare(release: str = "") -> None:
    """Before SGLang is imported: transformers decides once, at its own import, whether
    torchvision is installed, so it is imported first and sees none; the stub only serves
    SGLang's imports after that."""
    import transformers.utils.import_utils  # noqa: F401

    sys.meta_path.insert(0, _AbsentFinder(ABSENT + ABSENT_BY_RELEASE.get(release, ())))
    _config_names_may_repeat()


def _config_names_may_repeat() -> None:
    """Older releases (0.5.19) register model configs (`qwen3_asr`) that the installed
    transformers has since taken in; SGLang's registration then wins instead of raising at
    import. Only model configs the cache never reads are concerned."""
    from transformers import AutoConfig

    original = AutoConfig.register

    def register(model_type: str, config: Any, exist_ok: bool = False) -> None:
        original(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(register)  # type: ignore[method-assign]


def install() -> None:
    """After SGLang is imported: the device, pinning, copy and stream shims."""
    import torch

    _device_cpu()
    _no_pinning()
    _mha_copies_as_indexing()
    _mla_copies_as_indexing()
    _dsa_indexer_copies_as_indexing()
    _mamba_copies_by_torch()
    torch.cpu.Stream.synchronize = lambda self: None  # CPU work is done when it returns


def _device_cpu() -> None:
    from sglang.srt import utils

    utils.get_device = lambda *args, **kwargs: "cpu"
    kit = sys.modules.get("sglang.test.kits.unified_radix_cache.fixtures")
    if kit is not None:
        kit.get_device = utils.get_device  # type: ignore[attr-defined]


def _no_pinning() -> None:
    """Host pools allocate plain memory: no `cudaHostRegister`, no pinned pages."""
    from sglang.srt.mem_cache import memory_pool_host

    base = getattr(memory_pool_host, "HostKVCache", None)
    try:
        from sglang.srt.mem_cache.pool_host import base as pool_host_base

        base = pool_host_base.HostKVCache
    except ImportError:
        pass
    assert base is not None
    _unpinned(base)
    try:  # the Mamba host pool sets its own pinning (it does not pass it to the base)
        from sglang.srt.mem_cache.pool_host import mamba

        _unpinned(mamba.MambaPoolHost)
    except (ImportError, AttributeError):
        pass
    try:  # and so does the DSA indexer's (0.5.23)
        from sglang.srt.mem_cache.pool_host import dsa

        _unpinned(dsa.DSAIndexerPoolHost)
    except (ImportError, AttributeError):
        pass


def _unpinned(cls: Any) -> None:
    """`cls(..., pin_memory=...)` always builds with `pin_memory=False` (once per class)."""
    original = cls.__dict__["__init__"]
    if getattr(original, "_unpinned", False):
        return
    signature = inspect.signature(original)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["pin_memory"] = False
        original(*bound.args, **bound.kwargs)

    init._unpinned = True  # type: ignore[attr-defined]
    cls.__init__ = init


def _mha_host_class() -> Any:
    try:
        from sglang.srt.mem_cache.pool_host import mha

        return mha.MHATokenToKVPoolHost
    except ImportError:
        from sglang.srt.mem_cache import memory_pool_host

        return memory_pool_host.MHATokenToKVPoolHost


def _mha_copies_as_indexing() -> None:
    """The host pool's per-layer views and the device pool's per-layer buffers are the tensors
    the CUDA kernels copy between; on CPU the same copy is an indexed assignment."""
    host = _mha_host_class()

    def host_layers(pool: Any) -> tuple[list[Any], list[Any]]:
        if getattr(pool, "k_data_refs", None):
            return pool.k_data_refs, pool.v_data_refs
        if pool.layout == "page_first":
            return (
                [pool.k_buffer[:, i] for i in range(pool.layer_num)],
                [pool.v_buffer[:, i] for i in range(pool.layer_num)],
            )
        return (
            [pool.k_buffer[i] for i in range(pool.layer_num)],
            [pool.v_buffer[i] for i in range(pool.layer_num)],
        )

    def device_layers(pool: Any, device_pool: Any) -> tuple[list[Any], list[Any]]:
        if getattr(pool, "device_k_buffers", None) is not None:
            return pool.device_k_buffers, pool.device_v_buffers
        return device_pool.k_buffer, device_pool.v_buffer

    def backup(
        self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any
    ) -> None:
        host_k, host_v = host_layers(self)
        device_k, device_v = device_layers(self, device_pool)
        for layer in range(self.layer_num):
            host_k[layer][host_indices] = device_k[layer][device_indices]
            host_v[layer][host_indices] = device_v[layer][device_indices]

    def load(
        self: Any,
        device_pool: Any,
        host_indices: Any,
        device_indices: Any,
        layer_id: int,
        io_backend: Any,
        *,
        is_draft: bool = False,
    ) -> None:
        layers = getattr(self, "target_layer_num", self.layer_num)
        if not is_draft and not 0 <= layer_id < layers:
            return
        host_k, host_v = host_layers(self)
        device_k, device_v = device_layers(self, device_pool)
        device_k[layer_id][device_indices] = host_k[layer_id][host_indices]
        device_v[layer_id][device_indices] = host_v[layer_id][host_indices]

    host.backup_from_device_all_layer = backup
    host.load_to_device_per_layer = load


def _mla_copies_as_indexing() -> None:
    """The MLA host pool's per-layer views (`data_refs`, whatever the layout) and the device
    latent buffers it captured (`device_kv_buffers`) are what `transfer_kv_*_mla*` copy
    between, token rows by index."""
    try:
        from sglang.srt.mem_cache.pool_host import mla
    except ImportError:
        return
    host = mla.MLATokenToKVPoolHost

    def backup(
        self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any
    ) -> None:
        for layer, slot in self._buffer_index_by_layer.items():
            host_layer = self._host_layer_by_controller[layer]
            self.data_refs[host_layer][host_indices] = self.device_kv_buffers[slot][device_indices]

    def load(
        self: Any,
        device_pool: Any,
        host_indices: Any,
        device_indices: Any,
        layer_id: int,
        io_backend: Any,
        *,
        is_draft: bool = False,
    ) -> None:
        if not is_draft and layer_id not in self._target_layer_indices:
            return
        device = self.device_kv_buffers[self._buffer_index_by_layer[layer_id]]
        device[device_indices] = self.data_refs[self._host_layer_by_controller[layer_id]][
            host_indices
        ]

    host.backup_from_device_all_layer = backup
    host.load_to_device_per_layer = load


def _dsa_indexer_copies_as_indexing() -> None:
    """The DSA indexer's host pool copies whole index pages (keys and scales, uint8) between its
    host buffer and the device pool's per-layer `index_k_with_scale_buffer`, at the page indices
    SGLang derives from the KV slots (`_get_indexer_page_indices`)."""
    try:
        from sglang.srt.mem_cache.pool_host import dsa
    except ImportError:
        return
    host = dsa.DSAIndexerPoolHost

    def host_layer(pool: Any, index: int) -> Any:
        if pool.layout == "layer_first":
            return pool.index_k_with_scale_buffer[index]
        return pool.index_k_with_scale_buffer[:, index, 0]

    def backup(
        self: Any, device_pool: Any, host_indices: Any, device_indices: Any, io_backend: Any
    ) -> None:
        host_pages, device_pages = self._get_indexer_page_indices(host_indices, device_indices)
        for index, device in enumerate(self.packed_device_index_buffers):
            host_layer(self, index)[host_pages] = device[device_pages]

    def load(
        self: Any,
        device_pool: Any,
        host_indices: Any,
        device_indices: Any,
        layer_id: int,
        io_backend: Any,
        *,
        is_draft: bool = False,
    ) -> None:
        if not is_draft and not self._is_device_layer_owned(device_pool, layer_id):
            return
        index = self._draft_host_layer(layer_id) if is_draft else self._host_layer_index(layer_id)
        host_pages, device_pages = self._get_indexer_page_indices(host_indices, device_indices)
        device = device_pool.index_k_with_scale_buffer[0 if is_draft else layer_id]
        device[device_pages] = host_layer(self, index)[host_pages]

    host.backup_from_device_all_layer = backup
    host.load_to_device_per_layer = load


def _mamba_copies_by_torch() -> None:
    """Mamba's host pool copies down SGLang's own torch branch: the one its `kernel_ascend`
    io backend takes in the default `sync` mode (`pool_host/mamba.py:_copy_tensor_pf_lf`,
    `_copy_tensor_all_layers_lf_pf`), index_select/index_copy between the same tensors."""
    try:
        from sglang.srt.mem_cache.pool_host import mamba
    except ImportError:
        return
    host = mamba.MambaPoolHost
    for name in ("backup_from_device_all_layer", "load_to_device_per_layer"):
        original = host.__dict__[name]
        if getattr(original, "_torch", False):
            continue
        signature = inspect.signature(original)

        def copy(
            *args: Any, _original: Any = original, _sig: Any = signature, **kwargs: Any
        ) -> Any:
            bound = _sig.bind(*args, **kwargs)
            bound.arguments["io_backend"] = "kernel_ascend"
            return _original(*bound.args, **bound.kwargs)

        copy._torch = True  # type: ignore[attr-defined]
        setattr(host, name, copy)
