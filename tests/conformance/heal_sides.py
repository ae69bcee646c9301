"""Both sides of a heal case, shared by the discard-heal and hit-query-heal tests: the model's
write path and prefetcher holding the case's prior beliefs, and a release's own existence cache
holding the same ones, each read back as the beliefs left per pool."""

from __future__ import annotations

import types
from typing import Any

from sim.heal import RULES, DiscardView
from sim.model.backup import WritePath
from sim.model.existence import ExistenceCache
from sim.model.host import HostPool
from sim.model.loops import LoopTracker
from sim.model.pools import KV
from sim.model.prefetch import Prefetcher, PrefetchTimeout, RetryBudget
from sim.model.storage import Storage
from tests.model_helpers import make_tree

PAGE = 4
ENTRIES = 100
"""Large enough that no case evicts a belief on either side."""


class ModelSide:
    """The model's prefetcher over `storage`, its beliefs (per pool when `per_pool`) holding the
    case's prior keys."""

    def __init__(
        self,
        case: dict[str, Any],
        storage: Storage,
        *,
        per_pool: bool,
        heal: str,
        hit_query: str,
        heal_after_deadline: bool,
    ) -> None:
        self.aux_beliefs = {
            p: ExistenceCache(ENTRIES) for p in case["pools"] if p != KV and per_pool
        }
        self.path = WritePath(
            ExistenceCache(ENTRIES),
            storage,
            make_tree().root,
            buffer_only=True,
            aux_beliefs=self.aux_beliefs,
        )
        self.path.existence.add(case["prior"][KV])
        for pool, cache in self.aux_beliefs.items():
            cache.add(case["prior"][pool])
        rule = RULES[heal]
        self.prefetcher = Prefetcher(
            storage=storage,
            host=HostPool(1000),
            write_path=self.path,
            loops=LoopTracker(),
            heal=lambda o: rule(DiscardView(o, PAGE, storage)),
            hit_query=hit_query,
            policy="timeout",
            timeout=PrefetchTimeout(1.0, 0.25, PAGE),
            threshold_pages=1,
            retry=RetryBudget(0, 0),
            heal_after_deadline=heal_after_deadline,
        )

    def beliefs(self) -> dict[str, list[int]]:
        out = {KV: sorted(self.path.existence._lru)}
        out.update({p: sorted(c._lru) for p, c in self.aux_beliefs.items()})
        return out


class ReleaseSide:
    """A release's `StorageExistenceCache` holding the case's prior keys (one LRU of (pool, hash)
    keys through 0.5.21, `PoolExistenceBeliefs` per pool from 0.5.22)."""

    def __init__(
        self, store: types.ModuleType, sec: types.ModuleType, case: dict[str, Any]
    ) -> None:
        self.names = {
            KV: store.PoolName.KV,
            "swa": store.PoolName.SWA,
            "mamba": store.PoolName.MAMBA,
        }
        self.pools = case["pools"]
        self.cache = sec.StorageExistenceCache(ENTRIES)
        self.per_pool = hasattr(sec, "PoolExistenceBeliefs")
        for pool, keys in case["prior"].items():
            hashes = [str(k) for k in keys]
            if self.per_pool:
                self.cache.pool(self.names[pool]).add(hashes)
            else:
                self.cache.add(self.names[pool], hashes)

    def beliefs(self) -> dict[str, list[int]]:
        """The beliefs left per pool (KV alone where the release keeps no aux beliefs)."""
        out: dict[str, list[int]] = {}
        for pool in self.pools:
            if self.per_pool:
                held = list(self.cache.pool(self.names[pool])._entries)
            else:
                held = [h for p, h in self.cache._entries if p == self.names[pool]]
            if self.per_pool or pool == KV:
                out[pool] = sorted(int(h) for h in held)
        return out
