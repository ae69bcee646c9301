"""Small model objects for unit tests: trees, pool descriptions and storages built by hand."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sim.model.components import AuxDevice
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.model.pools import KV, POOL_KINDS, Pool, Residency
from sim.model.radix import Node, RadixTree
from sim.model.storage import Storage


def make_tree(
    kv: int = 100,
    swa: int | None = None,
    mamba: int | None = None,
    host: int | None = None,
    *,
    window: int | None = None,
    swa_checkpoint: int | None = None,
    mamba_checkpoint: int | None = None,
) -> RadixTree:
    """A tree with a device SWA pool of `swa` pages and a Mamba pool of `mamba` slots; with a
    `window` (in pages), SWA values are kept only in windows (window retention)."""
    aux = {}
    if swa is not None:
        aux["swa"] = AuxDevice(Residency.PAGE_VALUES, swa, window, swa_checkpoint)
    if mamba is not None:
        aux["mamba"] = AuxDevice(Residency.END_STATE, mamba, None, mamba_checkpoint)
    return RadixTree(
        kv_pages=kv, aux=aux, host_cache_pages=host, window_retention=window is not None
    )


def held_units(node: Node, name: str) -> int:
    """Device units a node holds of an aux pool (every page, or its points' units)."""
    if name not in node.resident_aux:
        return 0
    points = node.resident_aux[name]
    return len(node.pages) if points is None else sum(points.values())


def points(node: Node, name: str) -> list[int]:
    """The resume points a node holds of an aux pool (absolute page indices)."""
    return sorted(node.resident_aux.get(name) or ())


def pool(name: str, tail_pages: int | None = None, object_bytes: int = 1) -> Pool:
    """A pool description: KV and a sidecar (every page), SWA (a window of `tail_pages`),
    Mamba (one page)."""
    if name == "mamba":
        tail_pages = 1
    every_page = name == KV or POOL_KINDS[name].rides_on_kv
    return Pool(POOL_KINDS[name], object_bytes, None if every_page else tail_pages)


def layout(names: Iterable[str], window_pages: int = 2) -> dict[str, Pool]:
    return {name: pool(name, window_pages) for name in names}


def make_storage(
    contents: Mapping[str, Iterable[int]], window_pages: int = 2, object_bytes: int = 1
) -> Storage:
    """A storage whose pools hold exactly `contents` (unbounded, fault-free)."""
    stores: dict[str, StoragePool] = {}
    for name, keys in contents.items():
        store = StoragePool(name, object_bytes, None, 0.0, 0.0, FaultStreams.seeded(0))
        assert all(store.put(list(keys), 0.0))
        stores[name] = store
    return Storage(stores, layout(contents, window_pages), 1e9, 1e9, 0.5)


def resident(node: Node, name: str) -> bool:
    """Does the node hold this aux pool's state on the device?"""
    return name in node.resident_aux
