"""Flat records appended during a run; they become DataFrames once, at the end.

Rows are appended as named tuples (one list append each) and packed into typed column arrays
every `Table.CHUNK_ROWS` rows, so a long run holds 8 bytes per number instead of a Python
object per cell: the record tables are most of a long run's memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple, get_type_hints

import numpy as np
import pandas as pd


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


_DTYPES: dict[object, type] = {
    int: np.int64,
    float: np.float64,
    float | None: np.float64,
    bool: np.bool_,
}
"""Column dtypes by a record field's annotation; other fields (text, key lists) stay objects."""

Column = np.ndarray | list[Any]


class Table:
    """An append-only table of one record type, packed into typed columns as it grows.

    Rows are packed every CHUNK_ROWS rows (few rows are ever held as tuples) and small chunks
    are merged every MERGE_ROWS rows into large arrays, which the allocator maps on their own
    and so gives back to the system when `drain` releases them.
    """

    CHUNK_ROWS = 8_192
    MERGE_ROWS = 131_072

    def __init__(self, row_type: type[tuple[Any, ...]]) -> None:
        types = get_type_hints(row_type)
        self.columns: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
        self._dtypes = [_DTYPES.get(types[name]) for name in self.columns]
        self._rows: list[tuple[Any, ...]] = []
        self._small: list[list[Column]] = []
        self._chunks: list[list[Column]] = []
        self._packed = 0

    def append(self, row: tuple[Any, ...]) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) >= self.CHUNK_ROWS:
            self._pack()

    def __len__(self) -> int:
        return self._packed + len(self._rows)

    def drain(self) -> pd.DataFrame:
        """The table as a DataFrame, leaving the table empty (None in a float column is NaN).

        Each column's chunks are released as soon as the column is built, so the rows are held
        about once, not twice, while a long run's tables are made.
        """
        self._pack()
        self._merge()
        chunks, self._chunks, self._packed = self._chunks, [], 0
        if not chunks:
            return pd.DataFrame.from_records([], columns=list(self.columns))
        return pd.DataFrame(_merged_columns(chunks, self.columns), copy=False)

    def _pack(self) -> None:
        if not self._rows:
            return
        columns = zip(*self._rows, strict=True)
        dtypes = self._dtypes
        packed = [_column(values, dtype) for values, dtype in zip(columns, dtypes, strict=True)]
        self._small.append(packed)
        self._packed += len(self._rows)
        self._rows = []
        if len(self._small) * self.CHUNK_ROWS >= self.MERGE_ROWS:
            self._merge()

    def _merge(self) -> None:
        if self._small:
            merged = _merged_columns(self._small, self.columns)
            self._chunks.append(list(merged.values()))
            self._small = []


def _merged_columns(chunks: list[list[Column]], names: Sequence[str]) -> dict[str, Column]:
    """Concatenate chunks column by column, emptying each chunk's column once it is copied."""
    data: dict[str, Column] = {}
    for i, name in enumerate(names):
        parts = [chunk[i] for chunk in chunks]
        for chunk in chunks:
            chunk[i] = []
        if all(isinstance(part, np.ndarray) for part in parts):
            data[name] = np.concatenate(parts)
        else:
            data[name] = list(chain.from_iterable(_as_list(part) for part in parts))
    return data


def _column(values: tuple[Any, ...], dtype: type | None) -> Column:
    """A typed array, or the values themselves when they do not all fit the type exactly.

    Floats take ints and None (as NaN); ints and bools take only their own kind, so a float in
    an int field, a None in a bool field or an int beyond int64 keeps the column as objects
    instead of being truncated or coerced.
    """
    if dtype is None:
        return list(values)
    if dtype is np.float64:
        try:
            return np.array(values, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return list(values)
    inferred = np.array(values)
    return inferred if inferred.dtype == dtype else list(values)


def _as_list(part: Column) -> list[Any]:
    return part.tolist() if isinstance(part, np.ndarray) else part


@dataclass
class Records:
    requests: Table = field(default_factory=lambda: Table(RequestRecord))
    prefetches: Table = field(default_factory=lambda: Table(PrefetchRecord))
    writes: Table = field(default_factory=lambda: Table(WriteRecord))
    timeseries: list[tuple[Any, ...]] = field(default_factory=list)
