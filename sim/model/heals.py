"""The belief heals a prefetch runs besides the discard rule: the hit-query heal, and the
per-pool heals from what each transfer served.

Beliefs are a `buffer_only` server's only memory of what storage holds, so each storage verdict
a prefetch gets is a chance to correct them. The hit query's answer drops the beliefs past it
(every release with beliefs). With per-pool beliefs (SGLang's `PoolExistenceBeliefs`) each pool
heals from its own verdict instead, and a discarded prefetch heals each pool past what it
served. `PoolDrops` is what a heal decides: the keys to forget, per pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.model.operation import PrefetchOp
from sim.model.pools import KV, Pool
from sim.model.storage import ZERO_VERDICT_QUERIES, Storage

PoolDrops = Mapping[str, Sequence[int]]
"""Keys whose beliefs a heal drops, by pool (KV beliefs under `KV`)."""


def served_drops(op: PrefetchOp) -> dict[str, list[int]]:
    """Each pool past what it served (SGLang 0.5.22 on, `heal_from_transfer`): KV and the
    sidecars read with it past the pages it completed, each aux pool past the leading keys of
    its transfer it got.

    An aux transfer that was never read (KV fell short, or the op was stopped first) served
    none of its keys, so all of them are dropped; a pool that formed no transfer (keys None)
    drops nothing of its own. A KV shortfall is evidence whether or not the op was stopped.
    """
    span = op.hit_span
    drops: dict[str, list[int]] = {}
    if op.completed_pages < len(span):
        drops[KV] = list(span[op.completed_pages :])
        for name in op.riders:
            drops[name] = list(span[op.completed_pages :])
    for t in op.aux:
        if t.keys is not None and t.hit_pages < len(t.keys):
            drops[t.pool] = list(t.keys[t.hit_pages :])
    return drops


def by_pool(drops: Sequence[int] | PoolDrops) -> PoolDrops:
    """A rule's answer by pool: a KV rule's keys are KV's (under per-pool beliefs the aux
    pools then keep theirs: `none` drops nothing anywhere); a rule that answers by pool decides
    every pool itself."""
    if isinstance(drops, Mapping):
        return drops
    return {KV: list(drops)}


def merge(*drops: PoolDrops) -> dict[str, list[int]]:
    """One pool's drops from several heals, each key once, in first-seen order."""
    out: dict[str, list[int]] = {}
    for part in drops:
        for pool, keys in part.items():
            seen = out.setdefault(pool, [])
            seen.extend(k for k in keys if k not in seen)
    return out


def query_cuts(
    storage: Storage, span: Sequence[int], folded: int, now_s: float, fold: str
) -> dict[str, int]:
    """Where each pool's beliefs are cut after a hit query, with per-pool beliefs.

    A pool heals past its own boundary (the verdict `batch_exists_v2` reports for it), but
    only while the backend's fold is still going: the fold stops at the first pool that leaves
    nothing restorable (0.5.22: the minimum reached 0; 0.5.23: no endpoint legal for every pool
    so far), and a pool with boundary 0 gets no verdict. A pool with no verdict heals past the
    folded answer, `folded`. `fold` is the hit query's name (`intersect` or a minimum; the
    cascading minimum asks each pool only up to the running minimum, a query that reports no
    pool's boundary heals every pool past `folded`).
    """
    if fold in ZERO_VERDICT_QUERIES:
        return {name: folded for name in storage.layout}
    kv_hit = storage.kv.leading_run(span, now_s)
    cuts = {KV: kv_hit}
    running = kv_hit
    seen: list[Pool] = []
    for pool in storage.aux:
        asked_to = running if fold == "cascading_min" else kv_hit
        bound = storage.pool_boundary(pool, span, asked_to, now_s) if running > 0 else 0
        cuts[pool.name] = bound if bound > 0 else folded
        if running > 0:
            seen.append(pool)
            running = (
                _legal_at_or_below(storage, seen, span, kv_hit, now_s)
                if fold == "intersect"
                else min(running, bound)
            )
    return cuts


def _legal_at_or_below(
    storage: Storage, pools: Sequence[Pool], span: Sequence[int], end: int, now_s: float
) -> int:
    """Greatest E <= end legal for every one of `pools` (0 if none)."""
    e = end
    while e > 0:
        lowest = min(storage.pool_boundary(p, span, e, now_s) for p in pools)
        if lowest == e:
            return e
        e = lowest
    return 0
