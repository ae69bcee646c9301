"""The rest of SGLang's storage backends, release by release: which names each release's
`StorageBackendFactory` registers, each backend's `batch_exists_v2` (its fold, or its raise)
against the model's hit query on seeded random stored sets, and what the release's prefetch
thread does when a hit query raises.

The backend code is SGLang's; each store is built without its constructor (which connects to
the store, or in the sim backend's case sleeps) and given the attributes its query reads, and
the store it talks to is a stand-in answering `exists` from the pages held per pool. The
stand-in tells an object's pool and page from its name (`h0003_0_k` is KV page 3,
`h0003_0_temporal` Mamba's, `h0003.swa` SWA's), so a backend's own naming decides which objects
it asks for, and a query that asks another pool's objects, or another page's, disagrees.

Each case compares, for one release and backend, the pages the query reports (or that it
raised) with the model's hit query from the backend's profile in that release, and the cut each
pool's beliefs heal at (the pool's reported boundary, else the folded answer) with
`query_cuts`. The prefetch thread is the release's own `HiCacheController.prefetch_thread_func`
driven with the real aibrix backend's query: it either lets the error end the thread, leaving
the later operation unanswered, or answers both operations with 0 pages.

Mutations tried, each failing here: mori folded as `min_of_pools`; npu_memcache as
`min_of_pools` (its SWA pool raises in the release); the cascade asking each pool at the KV
hit in `query_cuts`; 0.5.21 given `prefetch.hit_query_error: miss`; seaweedfs `since` 0.5.21.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from queue import Queue
from typing import Any

import pytest

from sim.deployment.profiles import STORAGE_BACKENDS, release_order
from sim.model.heals import query_cuts
from sim.model.storage import HIT_QUERIES, HitQueryRaised
from tests.conformance import releases
from tests.conformance.profiles import profile
from tests.conformance.tally import agree
from tests.conformance.test_folds import trailing_transfers
from tests.model_helpers import make_storage

CASES = 300
"""Cases a release and backend: 1-6 pages, an SWA window of 1-3 pages, Mamba one page."""
POOL_SETS = (("kv", "swa"), ("kv", "mamba"), ("kv", "swa", "mamba"))
RAISED = "raised"
"""What a query that raised answers, on either side."""
MODULES = {
    "mori": ("storage.umbp.umbp_store", "UMBPStore"),
    "npu_memcache": ("storage.npu_memcache.npu_memcache_store", "NpuMemcacheStore"),
    "seaweedfs": ("storage.seaweedfs.seaweedfs_store", "SeaweedFSStore"),
    "sim": ("storage.sim_storage", "SimHiCacheStorage"),
    "shm": ("storage.shm.hicache_shm", "HiCacheShm"),
    "tensorcast": ("storage.tensorcast_store.tensorcast_store", "TensorcastStore"),
    "aibrix": ("storage.aibrix_kvcache.aibrix_kvcache_storage", "AibrixKVCacheStorage"),
    "eic": ("storage.eic.eic_storage", "EICStorage"),
    "simm": ("storage.simm.hicache_simm", "HiCacheSiMM"),
}


def _pool_page(name: str) -> tuple[str, int]:
    """The pool and page an object name stands for."""
    lowered = name.lower()
    pool = "swa" if "swa" in lowered else "kv"
    if any(part in lowered for part in ("mamba", "temporal", "conv")):
        pool = "mamba"
    return pool, int(name[1:5])


class _Held:
    """The stand-in store: the pages held per pool, asked by object name."""

    def __init__(self) -> None:
        self.pages: set[tuple[str, int]] = set()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _pool_page(name) in self.pages

    def copy(self) -> _Held:
        return self

    def batch_exists(self, names: Sequence[str]) -> list[bool]:
        return [name in self for name in names]

    def batch_exists_consecutive(self, names: Sequence[str]) -> int:
        found = self.batch_exists(names)
        return found.index(False) if False in found else len(found)

    def batch_is_exist(self, names: Sequence[str]) -> list[int]:
        return [int(name in self) for name in names]


class _Missing(Exception):
    """boto3's ClientError for an absent object."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.response = {"Error": {"Code": "404"}}


class _Inline:
    """An executor that runs each call at once."""

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(fn(*args))
        return future


def _store(release: str, backend: str, held: _Held) -> Any:
    """The release's backend, built without its constructor, talking to `held`."""
    hs: Any = releases.module(release, "hicache_storage")
    path, name = MODULES[backend]
    cls = getattr(releases.module(release, path), name)
    store = cls.__new__(cls)
    config = types.SimpleNamespace(should_split_heads=False, bucket="b", extra_config=None)
    mamba = types.SimpleNamespace(conv_buffer=[0], temporal_state_elem_size=1)
    store.__dict__.update(
        storage_config=config,
        config=config,
        is_mla_backend=False,
        mha_suffix="0",
        mla_suffix="0",
        split_factor=1,
        config_prefix=None,
        extra_backend_tag=None,
        key_prefix="",
        _mamba_rank_tag="",
        _kv_anchor_is_logical=False,
        _kv_anchor_is_page_envelope=False,
        registered_pools={
            hs.PoolName.SWA: types.SimpleNamespace(v_buffer=[0]),
            hs.PoolName.MAMBA: mamba,
        },
        client=held,
        store=held,
        _keys=held,
        _lock=threading.Lock(),
        read_gbps=0.0,
        op_latency_s=0.0,
        _executor=_Inline(),
    )
    if backend == "seaweedfs":

        def head_object(Bucket: str, Key: str) -> dict[str, Any]:
            if Key not in held:
                raise _Missing(Key)
            return {}

        store._s3 = types.SimpleNamespace(
            head_object=head_object, exceptions=types.SimpleNamespace(ClientError=_Missing)
        )
    return store


def _query(release: str, store: Any, pages: int, tails: Mapping[str, int]) -> Any:
    """`batch_exists_v2` over pages 0..pages-1 with one trailing-pages transfer per aux pool:
    (pages reported, each pool's reported boundary), or RAISED."""
    hs: Any = releases.module(release, "hicache_storage")
    transfers = trailing_transfers(hs, tails)
    info = hs.HiCacheStorageExtraInfo(prefix_keys=None)
    try:
        result = store.batch_exists_v2([f"h{i:04d}" for i in range(pages)], transfers, info)
    except (NotImplementedError, ValueError):
        return RAISED
    return result.kv_hit_pages, {
        str(getattr(k, "value", k)): v for k, v in result.extra_pool_hit_pages.items()
    }


def _case(rng: random.Random) -> dict[str, Any]:
    pools = rng.choice(POOL_SETS)
    pages = rng.randint(1, 6)
    stored = {}
    for pool in pools:
        share = rng.choice((0.5, 0.8, 1.0)) if pool == "kv" else rng.choice((0.3, 0.6, 0.9))
        stored[pool] = [p for p in range(pages) if rng.random() < share]
    return {"pages": pages, "window_pages": rng.randint(1, 3), "stored": stored}


def _tails(case: dict[str, Any]) -> dict[str, int]:
    tails = {"swa": min(case["window_pages"], case["pages"]), "mamba": 1}
    return {pool: tails[pool] for pool in case["stored"] if pool != "kv"}


def _ours(case: dict[str, Any], kind: str) -> Any:
    storage = make_storage(case["stored"], window_pages=case["window_pages"])
    try:
        return HIT_QUERIES[kind](storage, list(range(case["pages"])), 0.0)
    except HitQueryRaised:
        return RAISED


def _registered(backend: str) -> list[str]:
    since = STORAGE_BACKENDS[backend].since
    return [r for r in releases.RELEASES if release_order(r) >= release_order(since)]


CASES_BY = [(release, backend) for backend in MODULES for release in _registered(backend)]


def _queried(release: str, backend: str) -> Iterator[tuple[dict[str, Any], Any]]:
    rng = random.Random(f"backend-queries-{release}-{backend}")
    held = _Held()
    with releases.active(release):
        store = _store(release, backend, held)
        for _ in range(CASES):
            case = _case(rng)
            held.pages = {(pool, page) for pool, pages in case["stored"].items() for page in pages}
            yield case, _query(release, store, case["pages"], _tails(case))


@pytest.mark.parametrize("release", releases.RELEASES)
def test_each_release_registers_the_backends_the_model_accepts(release: str) -> None:
    factory: Any = releases.module(release, "storage.backend_factory")
    theirs = sorted(factory.StorageBackendFactory._registry)
    ours = sorted(name for name in STORAGE_BACKENDS if release in _registered(name))
    agree(
        release, "registered backends", "StorageBackendFactory.register_backend", {}, ours, theirs
    )


@pytest.mark.parametrize(("release", "backend"), CASES_BY)
def test_hit_query_and_heal_cuts_of_every_other_backend(release: str, backend: str) -> None:
    kind = str(profile(release, backend)["storage.hit_query"])
    function = f"{MODULES[backend][1]}.batch_exists_v2"
    for case, theirs in _queried(release, backend):
        shown = {**case, "backend": backend, "fold": kind}
        ours = _ours(case, kind)
        agree(
            release,
            f"hit query ({backend})",
            function,
            shown,
            ours,
            RAISED if theirs == RAISED else theirs[0],
        )
        if theirs == RAISED:
            continue
        hit, reported = theirs
        storage = make_storage(case["stored"], window_pages=case["window_pages"])
        cuts = query_cuts(storage, list(range(case["pages"])), hit, 0.0, kind)
        expected = {pool: reported.get(pool, hit) for pool in case["stored"]}
        agree(release, f"heal cuts ({backend})", function, shown, cuts, expected)


def _controller(release: str, store: Any, ops: Sequence[Any]) -> Any:
    """A stand-in for the controller's state that `prefetch_thread_func` reads, whose hit query
    is the backend's own `batch_exists_v2` for a hybrid transfer."""
    hs: Any = releases.module(release, "hicache_storage")
    stop = threading.Event()
    stop.set()
    queue: Queue[Any] = Queue()
    for op in ops:
        queue.put(op)
    transfer = hs.PoolTransfer(
        name=hs.PoolName.SWA, keys=["k"], hit_policy=hs.PoolHitPolicy.TRAILING_PAGES
    )

    def hit_query(operation: Any) -> tuple[list[str], int]:
        result = store.batch_exists_v2(["h0000"], [transfer], None)
        return ["h0000"][: result.kv_hit_pages], result.kv_hit_pages

    return types.SimpleNamespace(
        storage_stop_event=stop,
        prefetch_queue=queue,
        prefetch_hit_queue=Queue(),
        page_size=1,
        _storage_hit_query=hit_query,
        _sync_prefetch_hit_query=lambda operation, count: count,
        prefetch_io_aux_func=lambda: None,
    )


@pytest.mark.parametrize("release", releases.RELEASES)
def test_a_raised_hit_query_ends_the_prefetch_thread_or_counts_zero(release: str) -> None:
    """Two queued operations, the aibrix backend's query raising for the first: through 0.5.21
    the error leaves the thread function (the thread ends) and the second never gets an
    answer; from 0.5.22 both are answered with 0 pages."""
    mode = str(profile(release)["prefetch.hit_query_error"])
    ops = [types.SimpleNamespace(is_terminated=lambda: False, request_id=f"r{i}") for i in range(2)]
    cls: Any = releases.controller(release).HiCacheController
    with releases.active(release):
        state = _controller(release, _store(release, "aibrix", _Held()), ops)
        try:
            cls.prefetch_thread_func(state)
            ended = False
        except NotImplementedError:
            ended = True
    answered = []
    while not state.prefetch_hit_queue.empty():
        answered.append(state.prefetch_hit_queue.get().storage_hit_count)
    theirs = "stop" if ended and not answered and state.prefetch_queue.qsize() == 1 else None
    if not ended and answered == [0, 0]:
        theirs = "miss"
    shown = {"release": release, "answered": answered, "ended": ended}
    agree(
        release, "raised hit query", "HiCacheController.prefetch_thread_func", shown, mode, theirs
    )
