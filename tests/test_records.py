"""Record tables: packing rows into typed columns must not change a single cell or dtype."""

from __future__ import annotations

import weakref
from typing import Any

import pandas as pd
import pytest

from sim.engine import runner
from sim.engine.records import Table, sorted_by
from sim.engine.rows import PrefetchRecord, RequestRecord
from sim.engine.runner import run
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


def test_a_table_drained_in_order_equals_the_frame_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ordering the columns as they are built must give pandas' stable sort, cell for cell."""
    monkeypatch.setattr(Table, "CHUNK_ROWS", 3)
    monkeypatch.setattr(Table, "MERGE_ROWS", 6)
    rids = [7, 3, 9, 3, 0, 12, 5, 3, 1, 8, 2]
    rows = [request_row(rid, None if i % 4 == 0 else i + 0.25) for i, rid in enumerate(rids)]
    rows = [row._replace(outcome=f"o{i}") for i, row in enumerate(rows)]
    unsorted, ordered = Table(RequestRecord), Table(RequestRecord)
    for row in rows:
        unsorted.append(row)
        ordered.append(row)
    expected = unsorted.drain().sort_values("rid", kind="stable").reset_index(drop=True)
    frame = ordered.drain(order_by="rid")
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["outcome"].tolist()[3:6] == ["o1", "o3", "o7"]


def test_sorted_by_equals_a_stable_sort_values() -> None:
    """Ties keep their order, NaN goes last; text, key-list and bool columns keep their dtype."""
    frame = pd.DataFrame(
        {
            "instance": [0, 1, 0, 1, 2, 2],
            "t_s": [2.0, float("nan"), 1.0, 2.0, 0.5, float("nan")],
            "verdict": ["a", "b", "c", "d", "e", "f"],
            "keys": [[1], None, [2, 3], None, [4], [5]],
            "ok": [True, False, True, True, False, True],
        }
    )
    expected = frame.sort_values("t_s", kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(sorted_by(frame.copy(), "t_s"), expected)
    assert expected["verdict"].tolist() == ["e", "c", "a", "d", "b", "f"]


def test_the_model_is_released_before_the_tables_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tables' peak is a long run's peak: the trees, pools and beliefs must be gone by then
    (for a long run: a short one skips the full collection that frees them)."""
    models: list[weakref.ref[object]] = []
    seen: list[bool] = []

    class Watched(runner.Simulation):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            models.extend(weakref.ref(server.model) for server in self.servers)

    build_tables = runner._cluster_tables

    def watched_tables(*args: Any) -> dict[str, pd.DataFrame]:
        seen.extend(model() is None for model in models)
        return build_tables(*args)

    monkeypatch.setattr(runner, "Simulation", Watched)
    monkeypatch.setattr(runner, "_cluster_tables", watched_tables)
    monkeypatch.setattr(runner, "COLLECT_AFTER_REQUESTS", 10)
    result = run(make_scenario(**{"workload.requests": 50, "duration_s": 30}))
    assert seen == [True] and len(result.tables["requests"]) > 0
