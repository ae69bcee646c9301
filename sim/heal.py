"""Healing rules: which existence beliefs to drop after a discarded hybrid prefetch.

`keep_pages` is the contract rule from SGLang's fix; the others exist to compare against it.
A rule is a function `(DiscardView) -> pages to drop`; registering one in `RULES` is all it
takes to make it selectable with the scenario key `heal`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    window_pages: int


HealRule = Callable[[DiscardView], list[int]]


def _none(view: DiscardView) -> list[int]:
    return []


def _keep_pages(view: DiscardView) -> list[int]:
    op = view.op
    span = op.hit_span
    aux = [(None if t.keys is None else len(t.keys), t.hit_pages) for t in op.aux]
    keep = keep_pages(op.completed_pages * view.page_size, view.page_size, len(span), aux)
    return list(span[keep:])


def _drop_chain(view: DiscardView) -> list[int]:
    return list(view.op.hit_span)


def _exact(view: DiscardView) -> list[int]:
    """Oracle: drop only the pages whose KV object, or whose aux tail object, is really missing."""
    span = view.op.hit_span
    kv = view.storage.pools["kv"]
    missing = {key for key in span if key not in kv}
    for pool in view.storage.aux_pools:
        n = view.storage.tail_len(pool, len(span))
        store = view.storage.pools[pool]
        missing.update(key for key in span[len(span) - n :] if key not in store)
    return [key for key in span if key in missing]


RULES: dict[str, HealRule] = {
    "none": _none,
    "keep_pages": _keep_pages,
    "drop_chain": _drop_chain,
    "exact": _exact,
}
