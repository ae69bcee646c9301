"""Hit-query folds: each release's `batch_exists_v2` of the file, Mooncake, hf3fs and nixl
backends against the model's `HIT_QUERIES`, on seeded random stored sets per pool.

The backend code is SGLang's; only what it talks to is a stand-in: real files in a temporary
directory for `HiCacheFile` (built by its own constructor), and a fake store client answering
`exists` from a set of object names for Mooncake (`batch_is_exist`), hf3fs (the metadata
client's `exists`, one namespace per pool) and nixl (the agent's `query_memory`). Those three
are built without their constructors (which connect to the store) and given the attributes the
query reads. The object names are written out here from the naming each backend uses, so a
change of naming shows up as a disagreement too.

Each case compares, for one release and backend, the pages the query reports with the model
fold the backend's profile gives in that release (`fold`), and each pool's heal cut (the pool's
own boundary the query reports; the folded cut for a pool it leaves out, as the per-pool
beliefs heal) with the model's `Storage.boundaries`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import sys
import tempfile
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from unittest import mock

import pytest

from sim.model.heals import query_cuts
from sim.model.storage import HIT_QUERIES
from tests.conformance import releases
from tests.conformance.profiles import profile
from tests.conformance.tally import agree
from tests.model_helpers import make_storage

CASES = 300
"""Cases a release and backend: 1-6 pages, an SWA window of 1-3 pages, Mamba one page."""
BACKENDS = ("file", "mooncake", "hf3fs", "nixl")
POOL_SETS = (("kv", "swa"), ("kv", "mamba"), ("kv", "swa", "mamba"))
MODEL_NAME = "org/model"
"""The served model's name, which the file and nixl backends put in every object name."""


def fold(release: str, backend: str) -> str:
    """The model fold the backend's profile gives in that release (`storage.hit_query`)."""
    return str(profile(release, backend)["storage.hit_query"])


class _Unset:
    """`envs`: every SGLang environment variable unset."""

    def __getattr__(self, name: str) -> Any:
        return types.SimpleNamespace(get=lambda: None)


class _ExistsClient:
    """The fake store: a set of object names (one set per namespace for hf3fs)."""

    def __init__(self) -> None:
        self.objects: dict[str, set[str]] = {}

    def put(self, names: Sequence[str], namespace: str = "kv") -> None:
        self.objects.setdefault(namespace, set()).update(names)

    def batch_is_exist(self, names: Sequence[str]) -> list[int]:
        """Mooncake's `MooncakeDistributedStore.batch_is_exist`: 1 per stored key."""
        stored = self.objects.get("kv", set())
        return [1 if name in stored else 0 for name in names]

    def exists(self, rank: int, names: Sequence[str], namespace: Any = "kv") -> list[bool]:
        """hf3fs' `Hf3fsMetadataInterface.exists`."""
        stored = self.objects.get(str(namespace), set())
        return [name in stored for name in names]

    def query_memory(self, tuples: Sequence[tuple[Any, ...]], backend: str, mem_type: str) -> list:
        """nixl's `nixl_agent.query_memory`: None for an absent object."""
        stored = self.objects.get("kv", set())
        return [{} if t[3] in stored else None for t in tuples]


class _Backend:
    """One release's backend, its stored objects and its query."""

    def __init__(self, release: str, kind: str, folder: str) -> None:
        self.release, self.kind, self.folder = release, kind, folder
        self.hs: Any = releases.module(release, "hicache_storage")
        self.client = _ExistsClient()
        self.store: Any = getattr(self, f"_{kind}")()

    def _file(self) -> Any:
        hs = self.hs
        fields = {f.name for f in dataclasses.fields(hs.HiCacheStorageConfig)}
        config: dict[str, Any] = {
            "tp_rank": 0,
            "tp_size": 1,
            "pp_rank": 0,
            "pp_size": 1,
            "attn_cp_rank": 0,
            "attn_cp_size": 1,
            "is_mla_model": False,
            "enable_storage_metrics": False,
            "is_page_first_layout": False,
            "model_name": MODEL_NAME,
        }
        if "dcp_size" in fields:
            config.update(dcp_size=1, dcp_rank=0, logical_page_size=1)
        with self._unset_environment():
            return hs.HiCacheFile(hs.HiCacheStorageConfig(**config), file_path=self.folder)

    @contextlib.contextmanager
    def _unset_environment(self) -> Iterator[None]:
        environ = sys.modules["sglang.srt.environ"]
        with (
            mock.patch.object(self.hs, "envs", _Unset()),
            mock.patch.object(environ, "envs", _Unset(), create=True),
        ):
            yield

    def _mooncake(self) -> Any:
        mod: Any = releases.module(self.release, "storage.mooncake_store.mooncake_store")
        store = mod.MooncakeStore.__new__(mod.MooncakeStore)
        store.__dict__.update(
            store=self.client,
            config_prefix=None,
            is_mla_backend=False,
            mha_suffix="0",
            mla_suffix="",
            should_split_heads=False,
            split_factor=0,
            pp_rank=0,
            mem_pool_host=types.SimpleNamespace(kv_buffer=[0]),
            registered_pools={
                self.hs.PoolName.SWA: types.SimpleNamespace(v_buffer=[0]),
                self.hs.PoolName.MAMBA: types.SimpleNamespace(
                    conv_buffer=[0], temporal_state_elem_size=1
                ),
            },
        )
        return store

    def _hf3fs(self) -> Any:
        mod: Any = releases.module(self.release, "storage.hf3fs.storage_hf3fs")
        store = mod.HiCacheHF3FS.__new__(mod.HiCacheHF3FS)
        pools = (self.hs.PoolName.SWA, self.hs.PoolName.MAMBA)
        store.__dict__.update(
            rank=0,
            tp_rank=0,
            tp_size=1,
            is_mla_model=False,
            mha_zero_copy=False,
            metadata_client=self.client,
            _pool_storage_ctx={p: types.SimpleNamespace(namespace=p) for p in pools},
        )
        return store

    def _nixl(self) -> Any:
        mod: Any = releases.module(self.release, "storage.nixl.hicache_nixl")
        store = mod.HiCacheNixl.__new__(mod.HiCacheNixl)
        pools = (self.hs.PoolName.SWA, self.hs.PoolName.MAMBA)
        suffix = f"_{MODEL_NAME.replace('/', '-')}_0_1"
        store.__dict__.update(
            is_zero_copy=False,
            is_mla_model=False,
            config_suffix=suffix,
            tp_config_suffix=suffix,
            agent=self.client,
            backend_selector=types.SimpleNamespace(mem_type="OBJ", backend_name="OBJ"),
            registered_pools={p: object() for p in pools},
            _hybrid_pool_ctx={
                p: types.SimpleNamespace(is_zero_copy=False, host_pool=None) for p in pools
            },
        )
        return store

    def names(self, pool: str, key: str) -> list[str]:
        """The objects one page of one pool is stored as."""
        if self.kind == "file":
            tag = "" if pool == "kv" else f".{pool}"
            return [f"{key}{tag}_{MODEL_NAME.replace('/', '-')}_0_1.bin"]
        if self.kind == "mooncake":
            parts = {"kv": ("k", "v"), "swa": ("swa_k", "swa_v"), "mamba": ("temporal", "conv_0")}
            return [f"{key}_0_{part}" for part in parts[pool]]
        if self.kind == "hf3fs":
            return [key if pool == "kv" else f"{key}_{pool}"]
        suffix = f"_{MODEL_NAME.replace('/', '-')}_0_1"
        return [f"{key}{suffix}" + ("" if pool == "kv" else f"_{pool}")]

    def hold(self, contents: Mapping[str, Sequence[int]]) -> None:
        """Store exactly these pages per pool (nothing else)."""
        self.client.objects.clear()
        for name in os.listdir(self.folder):
            os.remove(os.path.join(self.folder, name))
        for pool, pages in contents.items():
            names = [n for page in pages for n in self.names(pool, _key(page))]
            if self.kind == "file":
                for name in names:
                    open(os.path.join(self.folder, name), "wb").close()
            else:
                namespace = pool if self.kind == "hf3fs" else "kv"
                self.client.put(names, namespace)

    def query(self, pages: int, tails: Mapping[str, int]) -> tuple[int, dict[str, int]]:
        """`batch_exists_v2` over pages 0..pages-1 with one trailing-pages transfer per aux
        pool (its keys as many as the pool's tail, as the prefetch plans them): the pages
        reported and each pool's own boundary where reported."""
        hs = self.hs
        transfers = trailing_transfers(hs, tails)
        info = hs.HiCacheStorageExtraInfo(prefix_keys=None)
        with self._unset_environment():
            result = self.store.batch_exists_v2([_key(i) for i in range(pages)], transfers, info)
        return result.kv_hit_pages, {str(k): v for k, v in result.extra_pool_hit_pages.items()}


def trailing_transfers(hs: Any, tails: Mapping[str, int]) -> list[Any]:
    """One trailing-pages transfer per aux pool, its keys as many as the pool's tail (the
    query reads only how many there are)."""
    return [
        hs.PoolTransfer(
            name=hs.PoolName(pool),
            keys=["__placeholder__"] * n,
            hit_policy=hs.PoolHitPolicy.TRAILING_PAGES,
        )
        for pool, n in tails.items()
    ]


def _key(page: int) -> str:
    return f"h{page:04d}"


def _case(rng: random.Random) -> dict[str, Any]:
    pools = rng.choice(POOL_SETS)
    pages = rng.randint(1, 6)
    window = rng.randint(1, 3)
    stored = {}
    for pool in pools:
        share = rng.choice((0.5, 0.8, 1.0)) if pool == "kv" else rng.choice((0.3, 0.6, 0.9))
        stored[pool] = [p for p in range(pages) if rng.random() < share]
    return {"pages": pages, "window_pages": window, "stored": stored}


def _ours(case: dict[str, Any], kind: str) -> tuple[int, dict[str, int]]:
    storage = make_storage(case["stored"], window_pages=case["window_pages"])
    span = list(range(case["pages"]))
    return HIT_QUERIES[kind](storage, span, 0.0), storage.boundaries(span, 0.0)


def _tails(case: dict[str, Any]) -> dict[str, int]:
    """Tail keys a prefetch plans per aux pool: min(window, span) for SWA, one for Mamba."""
    tails = {}
    for pool in case["stored"]:
        if pool == "swa":
            tails[pool] = min(case["window_pages"], case["pages"])
        elif pool == "mamba":
            tails[pool] = 1
    return tails


def _queried(
    release: str, backend: str, seed: str
) -> Iterator[tuple[dict[str, Any], int, dict[str, int]]]:
    """CASES seeded random stored sets, each held by the release's real backend and queried:
    (case, the pages it reports, each pool's boundary where it reports one)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder, releases.active(release):
        theirs = _Backend(release, backend, folder)
        for _ in range(CASES):
            case = _case(rng)
            theirs.hold(case["stored"])
            yield (case, *theirs.query(case["pages"], _tails(case)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", releases.RELEASES)
def test_hit_query_fold_and_pool_boundaries(release: str, backend: str) -> None:
    kind = fold(release, backend)
    function = {
        "file": "HiCacheFile.batch_exists_v2",
        "mooncake": "MooncakeStore.batch_exists_v2",
        "hf3fs": "HiCacheHF3FS.batch_exists_v2",
        "nixl": "HiCacheNixl.batch_exists_v2",
    }[backend]
    separating = 0
    for case, hit, reported in _queried(release, backend, f"folds-{release}-{backend}"):
        ours_hit, bounds = _ours(case, kind)
        separating += _ours(case, "min_of_pools")[0] != _ours(case, "intersect")[0]
        shown = {**case, "backend": backend, "fold": kind}
        agree(release, f"hit query ({backend})", function, shown, ours_hit, hit)
        ours_reported = {pool: bounds[pool] for pool in reported}
        agree(release, f"pool boundaries ({backend})", function, shown, ours_reported, reported)
    assert separating > 0, "no case told min_of_pools from intersect"


PER_POOL_HEAL = [r for r in releases.RELEASES if r >= "0.5.22"]
"""Releases whose hit-query heal uses each pool's verdict (`query_pool_hit_pages`)."""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", PER_POOL_HEAL)
def test_hit_query_heal_cut_per_pool(release: str, backend: str) -> None:
    """The cut each pool's beliefs are healed at after a query (0.5.22 on: the pool's
    reported boundary, else the folded cut, as `_invalidate_absent_from_hit_query` reads
    `query_pool_hit_pages`) against the model's `query_cuts`: a pool after the one that left
    nothing restorable gets no verdict and heals from the folded cut."""
    kind = fold(release, backend)
    for case, hit, reported in _queried(release, backend, f"heal-cuts-{release}-{backend}"):
        storage = make_storage(case["stored"], window_pages=case["window_pages"])
        span = list(range(case["pages"]))
        bounds = query_cuts(storage, span, hit, 0.0, kind)
        cuts = {pool: reported.get(pool, hit) for pool in case["stored"]}
        shown = {**case, "backend": backend, "fold": kind}
        agree(release, f"heal cuts ({backend})", "batch_exists_v2", shown, bounds, cuts)


@pytest.mark.parametrize("release", ["0.5.22", "0.5.23"])
def test_the_known_case_separates_the_folds(release: str) -> None:
    """kv+swa+mamba, 4 pages, a 2-page window; KV 0-3, SWA 2-3, Mamba at 2: SWA is legal only
    at 4 and Mamba only at 3, so the minimum reports 3 (the file backend to 0.5.22) and the
    intersection 0 (0.5.23)."""
    stored = {"kv": [0, 1, 2, 3], "swa": [2, 3], "mamba": [2]}
    case = {"pages": 4, "window_pages": 2, "stored": stored}
    assert _ours(case, "min_of_pools")[0] == 3
    assert _ours(case, "intersect")[0] == 0
    with tempfile.TemporaryDirectory() as folder, releases.active(release):
        file = _Backend(release, "file", folder)
        file.hold(stored)
        hit, reported = file.query(4, _tails(case))
    assert hit == (0 if release == "0.5.23" else 3)
    assert reported == {"kv": 4, "swa": 4, "mamba": 3}
