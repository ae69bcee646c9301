"""A request's life in the server, as the engine tracks it."""

from __future__ import annotations

from dataclasses import dataclass

from sim.engine.rows import RequestRecord
from sim.model.node import Node
from sim.model.prefetch import PrefetchOp
from sim.workload.kinds import Request


@dataclass
class Job:
    """A request's life in the server."""

    req: Request
    lock_node: Node
    device_pages: int
    host_pages: int
    op: PrefetchOp | None = None
    prefetch_outcome: str = "none"
    reserved_kv: int = 0
    admitted_s: float | None = None
    first_token_s: float | None = None
    l3_loaded_pages: int = 0
    recomputed_tokens: int = 0
    wake_at: float | None = None
    retries: int = 0
    """Prefetches re-issued for this request after a miss."""
    anchor_pages: int = 0
    """buffer_only: device pages this request's staged prefetch pins as its anchor."""
    refetch_end: int | None = None
    """A pending re-fetch: where the shrunk hold's span ended (absolute pages)."""
    next_token: int = 0
    """Where the prefill's next chunk starts (tokens)."""
    computed_from: int = 0
    """Pages up to which the device tree holds the prompt (the last insert's end)."""
    load_pages: int = 0
    """Pages the first chunk loads from the host (or from storage through it)."""
    device_change_pages: int = 0
    """Prefix pages the device (or host) gained (positive) or lost to eviction (negative)
    between arrival and admission, so the request's token counts add up to its prompt."""
    backoff_pages: int = 0
    """Device KV pages matched at arrival past the last legal resume point (recomputed)."""

    def record(self, outcome: str, finish_s: float | None, page_size: int) -> RequestRecord:
        """The request's row, token counts from its pages."""
        req, op = self.req, self.op
        return RequestRecord(
            rid=req.rid,
            arrival_s=req.arrival_s,
            prompt_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens,
            device_hit_tokens=self.device_pages * page_size,
            host_hit_tokens=(self.host_pages - self.device_pages) * page_size,
            device_backoff_tokens=self.backoff_pages * page_size,
            device_change_tokens=self.device_change_pages * page_size,
            l3_hit_tokens=(op.hit_pages if op is not None else 0) * page_size,
            l3_loaded_tokens=self.l3_loaded_pages * page_size,
            recomputed_tokens=self.recomputed_tokens,
            prefetch=self.prefetch_outcome,
            prefetch_retries=self.retries,
            admitted_s=self.admitted_s,
            first_token_s=self.first_token_s,
            finish_s=finish_s,
            outcome=outcome,
            session=req.session,
            turn=req.turn,
        )
