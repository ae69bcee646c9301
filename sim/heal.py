"""Healing rules: which existence beliefs to drop after a discarded hybrid prefetch.

`keep_pages` is the contract rule from SGLang's fix (0.5.19-0.5.21); `per_pool` is what SGLang
does with per-pool beliefs (0.5.22 on); the others exist to compare against them. A rule is a
function `(DiscardView) -> KV pages to drop`, or `-> keys to drop by pool` for a rule that
decides every pool, registered in `RULES` under the name the scenario key `heal` selects it by;
the schema accepts exactly the registered names.

Under KV-only beliefs only the KV drops act (there are no aux beliefs). Under per-pool beliefs a
rule that decides by pool is the whole discard heal, and a KV rule drops KV beliefs only, the
aux pools keeping theirs: `none` is a server with no discard heal at all, `keep_pages` 0.5.19's
rule on a per-pool server (both what-ifs: no release ships either with per-pool beliefs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.core.registry import Registry
from sim.model.heals import PoolDrops, served_drops
from sim.model.prefetch import PrefetchOp
from sim.model.storage import Storage


def keep_pages(
    completed_tokens: int,
    page_size: int,
    span_pages: int,
    aux: Sequence[tuple[int | None, int]],
) -> int:
    """Leading pages of the span that every pool really served.

    `aux` holds `(keys_len or None, hit_pages)` per non-KV pool. An aux pool keyed by the span's
    tail vouches for nothing before its keys, so a short aux read keeps only the pages before
    the tail; a pool that had no keys at all keeps nothing.
    """
    keep = completed_tokens // page_size
    for keys_len, hit in aux:
        if keys_len is None:
            keep = 0
        elif hit < keys_len:
            keep = min(keep, max(0, span_pages - keys_len))
    return keep


@dataclass(frozen=True)
class DiscardView:
    """What a rule may look at: the discarded op, the page size and (for the oracle) storage."""

    op: PrefetchOp
    page_size: int
    storage: Storage


HealRule = Callable[[DiscardView], Sequence[int] | PoolDrops]

RULES: Registry[HealRule] = Registry("heal rule")


@RULES.register("none")
def _none(view: DiscardView) -> list[int]:
    """SGLang before the fix: nothing is dropped."""
    return []


@RULES.register("keep_pages")
def _keep_pages(view: DiscardView) -> list[int]:
    """The fix: drop the beliefs past what every pool really served."""
    op = view.op
    span = op.hit_span
    aux = [(None if t.keys is None else len(t.keys), t.hit_pages) for t in op.aux]
    keep = keep_pages(op.completed_pages * view.page_size, view.page_size, len(span), aux)
    return list(span[keep:])


@RULES.register("per_pool")
def _per_pool(view: DiscardView) -> PoolDrops:
    """Each pool past what it served: KV past its completed pages, each aux pool past the keys
    of its transfer it got (SGLang 0.5.22 on). Under KV-only beliefs only the KV part acts."""
    return served_drops(view.op)


@RULES.register("drop_chain")
def _drop_chain(view: DiscardView) -> list[int]:
    """Drop every belief of the hit span."""
    return list(view.op.hit_span)


@RULES.register("exact")
def _exact(view: DiscardView) -> list[int]:
    """Oracle: drop only the pages whose KV object, or whose aux tail object, is really missing."""
    span = view.op.hit_span
    storage = view.storage
    kv = storage.kv
    missing = {key for key in span if key not in kv}
    for pool in storage.aux:
        store = storage.pools[pool.name]
        missing.update(key for key in pool.tail_keys(span, len(span)) if key not in store)
    return [key for key in span if key in missing]
