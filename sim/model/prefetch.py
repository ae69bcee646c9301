"""A storage prefetch (L3 -> host staging) and the hybrid all-or-nothing check.

The aux transfers are explicit: each names the page keys it asks its pool for (the tail of the
hit span, section 2.2 of the design), so a reader can see why a prefetch was discarded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.model.chain import tail_keys


@dataclass
class AuxTransfer:
    """One aux pool's read: the tail keys it needs and the leading run it was served.

    `keys is None` means no transfer could be formed (a mid-tree span shorter than the SWA
    window), which the hybrid check treats as a failure, as SGLang does.
    """

    pool: str
    keys: tuple[int, ...] | None
    hit_pages: int = 0

    @property
    def served_all(self) -> bool:
        return self.keys is not None and self.hit_pages == len(self.keys)


@dataclass
class PrefetchOp:
    """A request's prefetch of the pages after its device/host match (SGLang: PrefetchOperation)."""

    rid: int
    start_page: int
    span: tuple[int, ...]
    issued_s: float
    hit_pages: int = 0
    completed_pages: int = 0
    aux: list[AuxTransfer] = field(default_factory=list)
    terminated: bool = False
    done: bool = False
    kv_read_pages: int = 0
    aux_read_bytes: int = 0

    @property
    def issued(self) -> bool:
        """Reads started: the hit met the threshold and host staging was allocated for it."""
        return self.hit_pages > 0

    @property
    def hit_span(self) -> tuple[int, ...]:
        """The prefetched keys truncated to the hit (`span` of the hybrid check)."""
        return self.span[: self.hit_pages]

    @property
    def end_page(self) -> int:
        """Absolute page index of the hit endpoint."""
        return self.start_page + self.hit_pages


def plan_aux_transfers(
    aux_pools: Sequence[str], op: PrefetchOp, window_pages: int
) -> list[AuxTransfer]:
    """Tail-key transfers for the hit endpoint (SGLang's _sync_trailing_keys).

    SWA needs min(window, hit) trailing pages; a span that starts mid-tree and is shorter than the
    window gets no SWA transfer at all. Mamba needs the last page's state.
    """
    hit_span = op.hit_span
    transfers = []
    for pool in aux_pools:
        if pool == "swa":
            if op.start_page > 0 and len(op.span) < window_pages:
                transfers.append(AuxTransfer(pool, None))
            else:
                transfers.append(
                    AuxTransfer(pool, tail_keys(hit_span, len(hit_span), window_pages))
                )
        else:
            transfers.append(AuxTransfer(pool, tail_keys(hit_span, len(hit_span), 1)))
    return transfers


def hybrid_check(op: PrefetchOp) -> bool:
    """All-or-nothing: KV delivered the whole hit and every aux transfer served all its keys."""
    return op.completed_pages == op.hit_pages and all(t.served_all for t in op.aux)
