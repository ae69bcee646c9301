"""Record tables: packing rows into typed columns must not change a single cell or dtype."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.engine.records import PrefetchRecord, RequestRecord, Table
from sim.runner import run
from tests.conftest import make_scenario


def request_row(rid: int, admitted_s: float | None) -> RequestRecord:
    tokens = (1024, 16, 0, 0, 128, 0, 64, 64, 960)
    return RequestRecord(
        rid, rid * 0.5, *tokens, "success", rid % 3, admitted_s, None, None, "finished", 0, 0
    )


def test_drained_chunks_equal_the_rows_they_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Table, "CHUNK_ROWS", 3)
    monkeypatch.setattr(Table, "MERGE_ROWS", 6)
    rows = [request_row(i, None if i % 4 == 0 else i + 0.25) for i in range(10)]
    table = Table(RequestRecord)
    for row in rows:
        table.append(row)
    assert len(table) == 10
    frame = table.drain()
    assert len(table) == 0
    expected = pd.DataFrame.from_records(rows, columns=list(RequestRecord._fields))
    # A float column of None only is float (all NaN), where pandas alone would make it object.
    expected = expected.astype({"first_token_s": float, "finish_s": float})
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["admitted_s"].isna().tolist() == [i % 4 == 0 for i in range(10)]


def test_key_lists_and_huge_integers_survive_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Table, "CHUNK_ROWS", 2)
    huge = 2**70
    rows = [
        (
            *PrefetchRecord(i, 0, 0.0, 1.0, "discarded", 0, 8, 8, 8, False, k, 1, 512, 512, 0),
            [k],
            None,
        )
        for i, k in enumerate([5, huge, 7])
    ]
    table = Table(PrefetchRecord, [("swa_keys", None), ("mamba_keys", None)])
    for row in rows:
        table.append(row)
    frame = table.drain()
    assert frame["endpoint_key"].tolist() == [5, huge, 7]
    assert frame["swa_keys"].tolist() == [[5], [huge], [7]]
    assert frame["mamba_keys"].tolist() == [None, None, None]
    assert frame["terminated"].dtype == bool


def test_values_that_do_not_fit_a_column_type_are_kept_as_they_are() -> None:
    """No silent truncation or coercion: the column falls back to objects instead."""
    fits = PrefetchRecord(1, 0, 0, 1, "success", 3, 8, 8, 8, True, 6, 0, 512, 512, 0)
    rows = [fits._replace(rid=0, start_page=2.5, terminated=None), fits]
    table = Table(PrefetchRecord)
    for row in rows:
        table.append(row)
    frame = table.drain()
    assert frame["start_page"].tolist() == [2.5, 3]
    assert frame["terminated"].tolist() == [None, True]
    assert frame["issued_s"].dtype == float and frame["span_pages"].dtype == "int64"


def test_an_empty_table_has_its_columns() -> None:
    assert list(Table(RequestRecord).drain().columns) == list(RequestRecord._fields)


def test_extra_columns_follow_the_record_fields_with_their_types() -> None:
    table = Table(PrefetchRecord, [("swa_keys", None), ("swa_hit_pages", int)])
    table.append(
        (*PrefetchRecord(1, 0, 0.0, 1.0, "success", 3, 8, 8, 8, True, 6, 0, 512, 512, 0), [4], 2)
    )
    frame = table.drain()
    assert list(frame.columns) == [*PrefetchRecord._fields, "swa_keys", "swa_hit_pages"]
    assert frame["swa_hit_pages"].dtype == "int64" and frame["swa_keys"].tolist() == [[4]]


def test_a_run_packed_in_tiny_chunks_gives_the_same_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = make_scenario(**{"workload.requests": 300, "duration_s": 60})
    whole = run(scenario).tables
    monkeypatch.setattr(Table, "CHUNK_ROWS", 7)
    monkeypatch.setattr(Table, "MERGE_ROWS", 21)
    chunked = run(scenario).tables
    for name in ("requests", "prefetches", "writes"):
        assert len(whole[name]) > 7, name
        pd.testing.assert_frame_equal(whole[name], chunked[name], obj=name)
