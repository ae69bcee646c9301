"""A storage prefetch operation and its aux transfers: what it asked each pool for, what each
pool served, and the hybrid all-or-nothing check over them (SGLang's PrefetchOperation and
PoolTransfer). `sim.model.prefetch` decides what happens to an operation; this module only says
what one is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.model.pools import Pool


@dataclass
class AuxTransfer:
    """One aux pool's read: the tail keys it needs and the leading run it was served.

    `keys is None` means no transfer could be formed (a mid-tree span shorter than the pool's
    tail), which the hybrid check treats as a failure, as SGLang does.
    """

    pool: str
    keys: tuple[int, ...] | None
    hit_pages: int = 0
    read: bool = False
    """The read was made (KV completed and the op was not stopped first)."""

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
    attempt: int = 0
    """0 for the request's first prefetch, k for its k-th re-issue."""
    reported_pages: int = 0
    """What the hit query answered (pages), before staging was allocated for it."""
    hit_pages: int = 0
    completed_pages: int = 0
    aux: list[AuxTransfer] = field(default_factory=list)
    riders: tuple[str, ...] = ()
    """The sidecar pools read beside each KV batch, their runs clamping `completed_pages`."""
    clamped_by: str | None = None
    """The first sidecar whose shortfall cut the usable prefix below what KV served."""
    terminated: bool = False
    done: bool = False
    unanswered: bool = False
    """The hit query never answered (the prefetch thread had ended): the op waits for its
    policy and is recorded `unanswered` when its request is admitted."""
    kv_read_pages: int = 0
    aux_read_bytes: int = 0
    transfer_bytes: int = 0
    """Bytes this op's reads asked the backend's read channel for (a short read costs its
    whole batch)."""
    cross_instance_pages: int = 0
    """KV pages read from objects another server of the cluster stored."""
    staged_windows: dict[str, int] = field(default_factory=dict)
    """Host staging pages each aux pool's window took when the op was issued."""
    assumed_end: int | None = None
    """A re-fetch after a staged span shrank: storage is assumed to hold the span up to this
    absolute page, so no hit query is asked (SGLang's `assume_stored`)."""

    @property
    def issued(self) -> bool:
        """Reads started: the hit met the threshold and host staging was allocated for it."""
        return self.hit_pages > 0

    @property
    def hit_span(self) -> tuple[int, ...]:
        """The prefetched keys truncated to the hit (`span` of the hybrid check)."""
        return self.span[: self.hit_pages]


def plan_aux_transfers(
    aux: Sequence[Pool], op: PrefetchOp, *, buffer_only: bool = False
) -> list[AuxTransfer]:
    """Tail-key transfers for the hit endpoint (SGLang's _sync_trailing_keys).

    With `buffer_only` (SGLang 0.5.19's buffer_only mode) a span that starts mid-tree and is
    shorter than a pool's tail asks for the span's own pages, the device prefix holding the rest
    of the window (SWAComponent.prepare_prefetch); otherwise, as in 0.5.20 on, such a span gets
    no transfer.
    """
    hit_span = op.hit_span
    return [
        AuxTransfer(
            pool.name, pool.transfer_keys(hit_span, len(op.span), op.start_page, buffer_only)
        )
        for pool in aux
    ]


def hybrid_check(op: PrefetchOp) -> bool:
    """All-or-nothing: KV delivered the whole hit and every aux transfer served all its keys."""
    return op.completed_pages == op.hit_pages and all(t.served_all for t in op.aux)
