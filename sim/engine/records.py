"""Flat records appended during a run; they become DataFrames once, at the end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class RequestRecord(NamedTuple):
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    device_hit_tokens: int
    host_hit_tokens: int
    l3_hit_tokens: int
    l3_loaded_tokens: int
    recomputed_tokens: int
    prefetch: str
    admitted_s: float | None
    first_token_s: float | None
    finish_s: float | None
    outcome: str
    session: int
    turn: int


class PrefetchRecord(NamedTuple):
    rid: int
    issued_s: float
    resolved_s: float
    outcome: str
    start_page: int
    span_pages: int
    hit_pages: int
    completed_pages: int
    terminated: bool
    endpoint_key: int
    swa_keys: list[int] | None
    swa_hit_pages: int
    mamba_keys: list[int] | None
    mamba_hit_pages: int
    dropped_beliefs: int
    read_bytes: int


class WriteRecord(NamedTuple):
    t_s: float
    node_id: int
    pages: int
    verdict: str
    kv_failed: int
    swa_keys: int
    swa_failed: int
    mamba_keys: int
    mamba_failed: int
    rewrite_pages: int
    bytes: int

    @classmethod
    def skipped(cls, t_s: float, node_id: int, pages: int, verdict: str) -> WriteRecord:
        return cls(t_s, node_id, pages, verdict, 0, 0, 0, 0, 0, 0, 0)

    @classmethod
    def written(
        cls,
        t_s: float,
        node_id: int,
        pages: Sequence[int],
        kv_ok: Sequence[bool],
        aux_keys: dict[str, tuple[int, ...]],
        aux_ok: dict[str, list[bool]],
        rewrite_pages: int,
        nbytes: int,
    ) -> WriteRecord:
        def failed(pool: str) -> int:
            oks = aux_ok.get(pool, [])
            return len(oks) - sum(oks)

        return cls(
            t_s,
            node_id,
            len(pages),
            "write",
            len(kv_ok) - sum(kv_ok),
            len(aux_keys.get("swa", ())),
            failed("swa"),
            len(aux_keys.get("mamba", ())),
            failed("mamba"),
            rewrite_pages,
            nbytes,
        )


TIMESERIES_COLUMNS = (
    "t_s",
    "discards",
    "existence_entries",
    "stale_beliefs_recent_4096",
    "healed_beliefs_pending",
    "device_kv_pages",
    "device_swa_pages",
    "host_pages",
)


@dataclass
class Records:
    requests: list[RequestRecord] = field(default_factory=list)
    prefetches: list[PrefetchRecord] = field(default_factory=list)
    writes: list[WriteRecord] = field(default_factory=list)
    timeseries: list[tuple[Any, ...]] = field(default_factory=list)
