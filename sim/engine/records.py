"""Flat records appended during a run; they become DataFrames once, at the end.

Rows are appended as named tuples (one list append each) and packed into typed column arrays
every `Table.CHUNK_ROWS` rows, so a long run holds 8 bytes per number instead of a Python
object per cell: the record tables are most of a long run's memory.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, get_type_hints

import numpy as np
import pandas as pd

from sim.engine.rows import DecodeGap, PrefetchRecord, RequestRecord, Sample, WriteRecord
from sim.model.pools import KV, Pool
from sim.model.prefetch import AuxTransfer

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

    def __init__(
        self, row_type: type[tuple[Any, ...]], extra: Sequence[tuple[str, object]] = ()
    ) -> None:
        """Columns of a NamedTuple, then `extra` (name, annotation) columns after them."""
        types = get_type_hints(row_type)
        fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
        self.columns = (*fields, *(name for name, _ in extra))
        self._dtypes = [_DTYPES.get(types[name]) for name in fields]
        self._dtypes += [_DTYPES.get(kind) for _, kind in extra]
        self._rows: list[tuple[Any, ...]] = []
        self._small: list[list[Column]] = []
        self._chunks: list[list[Column]] = []
        self._packed = 0

    def append(self, row: tuple[Any, ...]) -> None:
        rows = self._rows
        rows.append(row)
        if len(rows) >= self.CHUNK_ROWS:
            self._pack()

    def extend(self, rows: Sequence[tuple[Any, ...]]) -> None:
        for row in rows:
            self.append(row)

    def __len__(self) -> int:
        return self._packed + len(self._rows)

    def drain(self, order_by: str | None = None) -> pd.DataFrame:
        """The table as a DataFrame, leaving the table empty (None in a float column is NaN);
        with `order_by`, its rows in that column's order (stable: ties keep their order).

        Each column's chunks are released as soon as the column is built, and each column is
        built in order directly (no sorted copy of the whole frame), so the rows are held about
        once, not twice, while a long run's tables are made.
        """
        self._pack()
        self._merge()
        chunks, self._chunks, self._packed = self._chunks, [], 0
        if not chunks:
            return pd.DataFrame.from_records([], columns=list(self.columns))
        order = None if order_by is None else _order(chunks, self.columns.index(order_by))
        return pd.DataFrame(_merged_columns(chunks, self.columns, order), copy=False)

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


def _merged_columns(
    chunks: list[list[Column]], names: Sequence[str], order: np.ndarray | None = None
) -> dict[str, Column]:
    """Concatenate chunks column by column, emptying each chunk's column once it is copied;
    with `order`, each column's rows are taken in that order."""
    data: dict[str, Column] = {}
    for i, name in enumerate(names):
        parts = [chunk[i] for chunk in chunks]
        for chunk in chunks:
            chunk[i] = []
        arrays = [part for part in parts if isinstance(part, np.ndarray)]
        if len(arrays) == len(parts):
            merged = _own_pages_concatenate(arrays)
            if order is not None:
                merged = np.take(merged, order, out=_own_pages_empty(len(order), merged.dtype))
            data[name] = merged
        else:
            values = list(chain.from_iterable(_as_list(part) for part in parts))
            data[name] = values if order is None else [values[j] for j in order.tolist()]
        del parts, arrays
    return data


def _order(chunks: list[list[Column]], index: int) -> np.ndarray | None:
    """The stable order of the rows by column `index` of the chunks (None: already in order).

    NaN sorts last, as in pandas' `sort_values`.
    """
    parts = [chunk[index] for chunk in chunks]
    if all(isinstance(part, np.ndarray) for part in parts):
        key = np.concatenate(parts)
        order = np.argsort(key, kind="stable")
    else:
        values = list(chain.from_iterable(_as_list(part) for part in parts))
        order = np.array(sorted(range(len(values)), key=values.__getitem__), dtype=np.intp)
    return None if np.array_equal(order, np.arange(len(order))) else order


OWN_PAGES_MIN_BYTES = 128 * 1024
"""Smaller arrays stay on the heap (a map per small column of a short run would waste pages)."""


def _own_pages_empty(rows: int, dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialised array in memory mapped for it alone, which the system takes back as
    soon as the array is freed.

    A large heap block often is not given back: once a process has freed a large block, the C
    allocator serves later ones of that size from its heap, where freed holes stay with the
    process. A long run's packed chunks would then stay resident beside the frames built from
    them (at 1M requests that was about 340 MiB).
    """
    nbytes = rows * dtype.itemsize
    private = getattr(mmap, "MAP_PRIVATE", None)
    if nbytes < OWN_PAGES_MIN_BYTES or private is None:
        return np.empty(rows, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=private), dtype=dtype)


def _own_pages_concatenate(parts: list[np.ndarray]) -> np.ndarray:
    """`np.concatenate(parts)` into an array of its own pages (parts of one dtype)."""
    dtype = parts[0].dtype
    if any(part.dtype != dtype for part in parts):
        return np.concatenate(parts)
    out = _own_pages_empty(sum(len(part) for part in parts), dtype)
    return np.concatenate(parts, out=out)


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


def sorted_by(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """`frame.sort_values(column, kind="stable").reset_index(drop=True)`, built one column at a
    time out of `frame`, which it empties: each source column is released once its sorted copy
    is made, so the table is held about once, not twice (NaN sorts last, as in pandas)."""
    key = frame[column].to_numpy()
    if key.dtype == object:
        return frame.sort_values(column, kind="stable").reset_index(drop=True)
    order = np.argsort(key, kind="stable")
    del key
    columns = {n: frame.pop(n).take(order).reset_index(drop=True) for n in list(frame.columns)}
    return pd.DataFrame(columns, copy=False)


def _as_list(part: Column) -> list[Any]:
    return part.tolist() if isinstance(part, np.ndarray) else part


class Records:
    """The run's tables, with a column group per aux pool of the model."""

    def __init__(self, pools: Sequence[Pool]) -> None:
        aux = [pool for pool in pools if pool.name != KV]
        self.aux = [pool.name for pool in aux]
        slotted = [pool for pool in aux if not pool.rides_on_kv]
        self.device_aux = [pool.name for pool in slotted]
        """The aux pools with device slots of their own (a sidecar rides on KV's)."""
        self.pools = [pool.name for pool in pools]
        self.requests = Table(RequestRecord)
        self.prefetches = Table(
            PrefetchRecord,
            [c for p in aux for c in ((f"{p.name}_keys", None), (f"{p.name}_hit_pages", int))],
        )
        self.writes = Table(
            WriteRecord,
            [c for p in aux for c in ((f"{p.name}_keys", int), (f"{p.name}_failed", int))],
        )
        self.timeseries = Table(
            Sample,
            [(f"device_{p.name}_{p.residency.unit}", int) for p in slotted]
            + [(f"storage_{p.name}_bytes", int) for p in pools],
        )
        self.decode_gaps = Table(DecodeGap)

    def add_prefetch(self, row: PrefetchRecord, transfers: Sequence[AuxTransfer]) -> None:
        """A prefetch row with each aux pool's keys (None: no transfer) and hit pages."""
        by_pool = {t.pool: t for t in transfers}
        cells: list[Any] = []
        for name in self.aux:
            t = by_pool.get(name)
            keys = None if t is None or t.keys is None else list(t.keys)
            cells += [keys, 0 if t is None else t.hit_pages]
        self.prefetches.append((*row, *cells))

    def add_write(
        self,
        row: WriteRecord,
        aux_keys: Mapping[str, Sequence[int]] | None = None,
        aux_ok: Mapping[str, Sequence[bool]] | None = None,
    ) -> None:
        """A write row with each aux pool's object count and failed puts."""
        if not self.aux:
            self.writes.append(row)
            return
        cells: list[int] = []
        for name in self.aux:
            oks = aux_ok.get(name, ()) if aux_ok else ()
            keys = aux_keys.get(name, ()) if aux_keys else ()
            cells += [len(keys), len(oks) - sum(oks)]
        self.writes.append((*row, *cells))

    def add_sample(
        self, sample: Sample, device_units: Mapping[str, int], stored_bytes: Mapping[str, int]
    ) -> None:
        """A time-series row with each aux pool's device units and each pool's stored bytes."""
        self.timeseries.append(
            (
                *sample,
                *(device_units[name] for name in self.device_aux),
                *(stored_bytes[name] for name in self.pools),
            )
        )

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table as a DataFrame (requests in id order), leaving the records empty."""
        return {
            "requests": self.requests.drain(order_by="rid"),
            "prefetches": self.prefetches.drain(),
            "writes": self.writes.drain(),
            "timeseries": self.timeseries.drain(),
            "decode_gaps": self.decode_gaps.drain(),
        }
