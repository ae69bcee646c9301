"""The record tables' row types: one named tuple per table, a field per column.

A field's annotation chooses its column's dtype (`sim.engine.records`), so these stay Python in
the compiled build (`bench/compile.py`): mypyc keeps a class's annotations only as far as
`float | None` reads `type` at run time, which would leave those columns unpacked.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.model.backup import Acknowledgement, StagedWrite
from sim.model.prefetch import PrefetchOp


class RequestRecord(NamedTuple):
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    device_hit_tokens: int
    host_hit_tokens: int
    device_backoff_tokens: int
    device_change_tokens: int
    l3_hit_tokens: int
    l3_loaded_tokens: int
    recomputed_tokens: int
    prefetch: str
    prefetch_retries: int
    admitted_s: float | None
    first_token_s: float | None
    finish_s: float | None
    outcome: str
    session: int
    turn: int


class DecodeGap(NamedTuple):
    """`tokens` output tokens decoded at `t_s`, each `gap_s` after its request's previous one
    (the inter-token latency; a prefill batch between two steps is in the gap)."""

    t_s: float
    gap_s: float
    tokens: int


class PrefetchRecord(NamedTuple):
    """A settled prefetch; each aux pool adds `<pool>_keys` and `<pool>_hit_pages`."""

    rid: int
    attempt: int
    issued_s: float
    resolved_s: float
    outcome: str
    start_page: int
    span_pages: int
    hit_pages: int
    completed_pages: int
    terminated: bool
    endpoint_key: int
    dropped_beliefs: int
    read_bytes: int
    transfer_bytes: int
    """Bytes the read channel carried for it (`read_bytes` counts what was served)."""
    cross_instance_pages: int
    """KV pages read from objects another server of the cluster stored."""

    @classmethod
    def of(
        cls,
        op: PrefetchOp,
        rid: int,
        outcome: str,
        resolved_s: float,
        dropped_beliefs: int,
        read_bytes: int,
    ) -> PrefetchRecord:
        return cls(
            rid=rid,
            attempt=op.attempt,
            issued_s=op.issued_s,
            resolved_s=resolved_s,
            outcome=outcome,
            start_page=op.start_page,
            span_pages=len(op.span),
            hit_pages=op.hit_pages,
            completed_pages=op.completed_pages,
            terminated=op.terminated,
            endpoint_key=op.hit_span[-1] if op.hit_pages else -1,
            dropped_beliefs=dropped_beliefs,
            read_bytes=read_bytes,
            transfer_bytes=op.transfer_bytes,
            cross_instance_pages=op.cross_instance_pages,
        )


class WriteRecord(NamedTuple):
    """A backup decision; each aux pool adds `<pool>_keys` and `<pool>_failed` (object counts)."""

    t_s: float
    node_id: int
    pages: int
    verdict: str
    kv_failed: int
    rewrite_pages: int
    bytes: int
    """Bytes staged for the write (all pools); they cross PCIe."""
    written_bytes: int
    """Bytes storage really wrote: keys it did not already report as stored."""
    kv_staged: int
    """KV pages staged (per-pool beliefs may write a node's aux objects alone)."""
    kv_written: int
    cross_instance_objects: int
    """Objects put that another server of the cluster had already stored."""

    @classmethod
    def skipped(cls, t_s: float, node_id: int, pages: int, verdict: str) -> WriteRecord:
        return cls(t_s, node_id, pages, verdict, 0, 0, 0, 0, 0, 0, 0)

    @classmethod
    def written(
        cls, t_s: float, node_id: int, pages: int, staged: StagedWrite, ack: Acknowledgement
    ) -> WriteRecord:
        kv_failed = len(ack.kv_ok) - sum(ack.kv_ok)
        return cls(
            t_s,
            node_id,
            pages,
            "write",
            kv_failed,
            ack.rewrite_pages,
            staged.nbytes,
            staged.write_bytes,
            staged.kv_pages,
            staged.kv_to_write,
            ack.cross_instance_objects,
        )


class Sample(NamedTuple):
    """A time-series row; per pool `device_<pool>_<unit>` (aux) and `storage_<pool>_bytes`."""

    t_s: float
    discards: int
    existence_entries: int
    stale_beliefs_recent_4096: int
    healed_beliefs_pending: int
    host_pages: int
    device_kv_pages: int
