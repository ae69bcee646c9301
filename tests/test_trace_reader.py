"""The Mooncake trace reader: every bad line is a ScenarioError naming its line number.

Lines are JSON objects with `timestamp` (ms, non-decreasing), `input_length`, `output_length`
and `hash_ids`, where `len(hash_ids) == ceil(input_length / block_tokens)`. A gzip file reads
as its decompressed content, and a corrupt gzip stream is bad input like a bad line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sim.cli import cli
from sim.scenario.schema import ScenarioError
from sim.workload.kinds import iter_trace
from tests.conftest import CONVERSATION_TRACE, make_doc

BLOCK = 512


def rec(ts: Any = 0, inp: Any = 1000, out: Any = 10, ids: Any = None, **extra: Any) -> str:
    """One trace line; by default with the right number of hash ids."""
    if ids is None:
        ids = list(range(-(-inp // BLOCK)))
    obj = {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids, **extra}
    return json.dumps(obj)


def write_trace(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_gzip_trace(tmp_path: Path, lines: list[str], name: str = "trace.jsonl.gz") -> Path:
    path = tmp_path / name
    text = "".join(line + "\n" for line in lines)
    path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    return path


def read_until_error(path: Path, block: int = BLOCK) -> tuple[list[int], ScenarioError]:
    """The line numbers yielded before the reader raised, and the error."""
    seen: list[int] = []
    with pytest.raises(ScenarioError) as info:
        for line_no, _ in iter_trace(path, block):
            seen.append(line_no)
    return seen, info.value


# --- valid input ---------------------------------------------------------------------------------


def test_valid_lines_parse(tmp_path: Path):
    path = write_trace(
        tmp_path,
        [
            rec(0, 1000, 10, [0, 1]),
            rec(0, 512, 0, [0]),  # equal timestamps are fine
            rec(1500.5, 1025, 3, [0, 1, 2]),  # 1025 tokens -> 3 blocks; float ms timestamps
            rec(2000, 0, 5, []),  # an empty prompt has no blocks
        ],
    )
    got = list(iter_trace(path, BLOCK))
    assert [n for n, _ in got] == [1, 2, 3, 4]
    assert got[0][1] == (0.0, 1000, 10, [0, 1])
    assert got[1][1] == (0.0, 512, 0, [0])
    assert got[2][1] == (1500.5, 1025, 3, [0, 1, 2])
    assert got[3][1] == (2000.0, 0, 5, [])
    assert all(isinstance(r[0], float) for _, r in got)


def test_extra_fields_are_ignored(tmp_path: Path):
    path = write_trace(tmp_path, [rec(0, 100, 1, [7], session="abc")])
    assert list(iter_trace(path, BLOCK)) == [(1, (0.0, 100, 1, [7]))]


def test_block_tokens_decides_the_expected_id_count(tmp_path: Path):
    path = write_trace(tmp_path, [rec(0, 1000, 1, [0, 1, 2, 3])])  # ceil(1000 / 256) = 4
    assert len(list(iter_trace(path, 256))) == 1
    seen, err = read_until_error(path, BLOCK)  # ceil(1000 / 512) = 2
    assert seen == []
    assert "line 1" in str(err)


def test_blank_lines_are_skipped_and_numbering_counts_them(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "\n" + rec(0) + "\n   \n\t\n" + rec(5) + "\r\n\n" + rec(9) + "\n\n", encoding="utf-8"
    )
    got = list(iter_trace(path, BLOCK))
    assert [n for n, _ in got] == [2, 5, 7]
    assert [r[0] for _, r in got] == [0.0, 5.0, 9.0]


def test_empty_trace_yields_nothing(tmp_path: Path):
    path = write_trace(tmp_path, [])
    assert list(iter_trace(path, BLOCK)) == []


def test_last_line_without_newline(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    path.write_text(rec(0) + "\n" + rec(1), encoding="utf-8")
    assert [n for n, _ in iter_trace(path, BLOCK)] == [1, 2]


CONVERSATION_TRACE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
"""SHA-256 of the published conversation_trace.jsonl (traces/README.md)."""


def test_shipped_trace_is_the_published_file():
    data = gzip.decompress(CONVERSATION_TRACE.read_bytes())
    assert hashlib.sha256(data).hexdigest() == CONVERSATION_TRACE_SHA256
    assert data.count(b"\n") == 12031


def test_shipped_trace_reads_in_full():
    got = list(iter_trace(CONVERSATION_TRACE, BLOCK))
    assert [n for n, _ in got] == list(range(1, 12032))
    for _, (_, inp, _, ids) in got:
        assert len(ids) == -(-inp // BLOCK)


# --- bad lines: ScenarioError naming the line ----------------------------------------------------

BAD_LINES: list[tuple[str, str, str]] = [
    ("malformed-json", '{"timestamp": 0, "input_length": 1000,', "not valid JSON"),
    ("not-an-object", "[1, 2, 3]", "JSON object"),
    ("bare-number", "42", "JSON object"),
    (
        "missing-timestamp",
        json.dumps({"input_length": 1, "output_length": 1, "hash_ids": [0]}),
        "timestamp",
    ),
    (
        "missing-input-length",
        json.dumps({"timestamp": 1, "output_length": 1, "hash_ids": [0]}),
        "input_length",
    ),
    (
        "missing-output-length",
        json.dumps({"timestamp": 1, "input_length": 1, "hash_ids": [0]}),
        "output_length",
    ),
    (
        "missing-hash-ids",
        json.dumps({"timestamp": 1, "input_length": 1, "output_length": 1}),
        "hash_ids",
    ),
    ("too-few-hash-ids", rec(1, 1025, 1, [0, 1]), "hash_ids"),
    ("too-many-hash-ids", rec(1, 512, 1, [0, 1]), "hash_ids"),
    ("ids-for-empty-prompt", rec(1, 0, 1, [0]), "hash_ids"),
    ("negative-timestamp", rec(-1), "timestamp"),
    ("negative-input-length", rec(1, -5, 1, []), "input_length"),
    ("negative-output-length", rec(1, 100, -1, [0]), "output_length"),
    ("negative-hash-id", rec(1, 100, 1, [-3]), "hash_ids"),
    ("bool-timestamp", rec(True), "timestamp"),
    ("bool-input-length", rec(1, True, 1, [0]), "input_length"),
    ("bool-output-length", rec(1, 100, False, [0]), "output_length"),
    ("bool-hash-id", rec(1, 100, 1, [True]), "hash_ids"),
    ("float-input-length", rec(1, 100.5, 1, [0]), "input_length"),
    ("string-timestamp", rec("0"), "timestamp"),
    ("null-output-length", rec(1, 100, None, [0]), "output_length"),
    ("hash-ids-not-list", rec(1, 100, 1, 5), "hash_ids"),
    ("string-hash-id", rec(1, 100, 1, ["a"]), "hash_ids"),
    (
        "infinite-timestamp",
        '{"timestamp": Infinity, "input_length": 1, "output_length": 1, "hash_ids": [0]}',
        "timestamp",
    ),
    (
        "nan-timestamp",
        '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [0]}',
        "timestamp",
    ),
]


@pytest.mark.parametrize(("bad", "needle"), [pytest.param(b, n, id=i) for i, b, n in BAD_LINES])
def test_bad_line_names_its_line_number(tmp_path: Path, bad: str, needle: str):
    # two good lines and a blank one first, so the bad line is line 4 of the file
    path = write_trace(tmp_path, [rec(0), "", rec(1), bad, rec(2)])
    seen, err = read_until_error(path)
    assert seen == [1, 3], "the good lines before the bad one are still yielded"
    assert err.source == str(path)
    assert err.key is not None and err.key.startswith("line 4"), err.key
    assert "line 4" in str(err)
    assert needle in str(err)


def test_backwards_timestamp_names_the_line(tmp_path: Path):
    path = write_trace(tmp_path, [rec(100), rec(100), rec(250), rec(249.9), rec(300)])
    seen, err = read_until_error(path)
    assert seen == [1, 2, 3]
    assert "line 4" in str(err)
    assert "backwards" in str(err)


def test_non_utf8_line_names_the_line(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    path.write_bytes((rec(0) + "\n").encode() + b'{"timestamp": 1, "x": "\xff\xfe"}\n')
    seen, err = read_until_error(path)
    assert seen == [1]
    assert "line 2" in str(err)


def test_truncated_last_line(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    full = rec(0) + "\n" + rec(1) + "\n" + rec(2)
    path.write_text(full[: len(full) - 7], encoding="utf-8")  # cut the third line mid-object
    seen, err = read_until_error(path)
    assert seen == [1, 2]
    assert "line 3" in str(err)


def test_missing_trace_file(tmp_path: Path):
    with pytest.raises(ScenarioError) as info:
        list(iter_trace(tmp_path / "absent.jsonl", BLOCK))
    assert info.value.key == "workload.path"
    assert "absent.jsonl" in str(info.value)


# --- gzip ----------------------------------------------------------------------------------------


def small_trace_lines(n: int = 40) -> list[str]:
    return [rec(i * 10.5, 1000 - i, i % 7, [i % 3, 100 + i]) for i in range(n)] + ["", rec(999)]


def test_gzipped_trace_reads_as_the_plain_one(tmp_path: Path):
    plain = write_trace(tmp_path, small_trace_lines())
    packed = write_gzip_trace(tmp_path, small_trace_lines())
    assert list(iter_trace(packed, BLOCK)) == list(iter_trace(plain, BLOCK))
    assert len(list(iter_trace(packed, BLOCK))) == 41


def test_gzip_is_recognised_by_its_magic_bytes_under_any_name(tmp_path: Path):
    plain = write_trace(tmp_path, small_trace_lines())
    packed = write_gzip_trace(tmp_path, small_trace_lines(), name="packed.jsonl")
    assert list(iter_trace(packed, BLOCK)) == list(iter_trace(plain, BLOCK))


def test_empty_gzip_file_yields_nothing(tmp_path: Path):
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(b"")
    assert list(iter_trace(path, BLOCK)) == []
    assert list(iter_trace(write_gzip_trace(tmp_path, []), BLOCK)) == []


@pytest.mark.parametrize(("bad", "needle"), [pytest.param(b, n, id=i) for i, b, n in BAD_LINES])
def test_bad_line_in_a_gzipped_trace_names_the_same_line(tmp_path: Path, bad: str, needle: str):
    path = write_gzip_trace(tmp_path, [rec(0), "", rec(1), bad, rec(2)])
    seen, err = read_until_error(path)
    assert seen == [1, 3]
    assert err.source == str(path)
    assert err.key is not None and err.key.startswith("line 4"), err.key
    assert needle in str(err)


def test_truncated_gzip_stream_names_the_file_and_the_line(tmp_path: Path):
    lines = [rec(i, 1000, 5, [i % 1000, 5000 + i]) for i in range(2000)]
    whole = write_gzip_trace(tmp_path, lines).read_bytes()
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    seen, err = read_until_error(path)
    assert 0 < len(seen) < 2000
    assert seen == list(range(1, len(seen) + 1)), "the lines before the cut are still yielded"
    assert err.source == str(path)
    assert err.key == f"line {len(seen) + 1}"
    assert "not a valid gzip stream" in err.message
    assert "cut.jsonl.gz" in str(err)


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        pytest.param(lambda b: b[:-4], "ended before", id="trailer-cut"),
        pytest.param(lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:], "CRC", id="bad-crc"),
        pytest.param(lambda b: b[:5], "ended before", id="header-only"),
        pytest.param(lambda b: b[:10] + b"\xff" * 40 + b[50:], "", id="garbled-deflate"),
    ],
)
def test_corrupt_gzip_stream_is_bad_input_naming_the_file(
    tmp_path: Path, damage: Callable[[bytes], bytes], needle: str
):
    whole = write_gzip_trace(tmp_path, small_trace_lines()).read_bytes()
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(damage(whole))
    _, err = read_until_error(path)
    assert err.source == str(path)
    assert err.key is not None and err.key.startswith("line ")
    assert needle in err.message


def test_plain_text_named_gz_is_bad_input(tmp_path: Path):
    path = write_trace(tmp_path, [rec(0)], name="trace.jsonl.gz")
    seen, err = read_until_error(path)
    assert seen == []
    assert err.key == "line 1"
    assert "not a valid gzip stream" in err.message


# --- through the CLI -----------------------------------------------------------------------------


def mooncake_scenario(directory: Path, trace: str, **workload: Any) -> Path:
    doc = make_doc(
        duration_s=600,
        workload={"kind": "mooncake", "path": trace, "block_tokens": BLOCK, **workload},
    )
    path = directory / "mooncake.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_cli_validate_counts_a_good_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    scen_dir = tmp_path / "scenarios"
    scen_dir.mkdir()
    write_trace(scen_dir, [rec(0), rec(10), "", rec(20)])
    mooncake_scenario(scen_dir, "trace.jsonl")  # relative to the YAML's folder, not the cwd
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["validate", "scenarios/mooncake.yaml"])
    assert result.exit_code == 0, result.stderr
    assert "3 requests" in result.stdout


@pytest.mark.parametrize(
    ("content", "line"),
    [
        pytest.param(rec(0) + "\n" + rec(1) + "\n" + rec(2)[:-9], 3, id="truncated"),
        pytest.param(rec(0) + "\nnot json at all\n" + rec(1) + "\n", 2, id="malformed"),
        pytest.param(rec(0) + "\n" + rec(1, 1000, 1, [0]) + "\n", 2, id="wrong-id-count"),
        pytest.param(rec(50) + "\n" + rec(10) + "\n", 2, id="backwards"),
    ],
)
@pytest.mark.parametrize("name", ["trace.jsonl", "trace.jsonl.gz"])
def test_cli_validate_bad_trace_exits_2_naming_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, line: int, name: str
):
    data = content.encode("utf-8")
    (tmp_path / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    mooncake_scenario(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["validate", "mooncake.yaml"])
    assert result.exit_code == 2, (result.output, result.stderr)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stderr + result.output
    assert name in result.stderr
    assert f"line {line}" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["mooncake.yaml", name]


def test_cli_run_truncated_gzip_trace_exits_2_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    lines = [rec(i, 1000, 5, [i % 1000, 5000 + i]) for i in range(2000)]
    whole = write_gzip_trace(tmp_path, lines).read_bytes()
    (tmp_path / "trace.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    mooncake_scenario(tmp_path, "trace.jsonl.gz")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", "mooncake.yaml", "--out", "out"])
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "Traceback" not in result.stderr + result.output
    assert "trace.jsonl.gz" in result.stderr
    assert "not a valid gzip stream" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["mooncake.yaml", "trace.jsonl.gz"]


def test_cli_run_bad_trace_exits_2_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    work = tmp_path / "work"
    work.mkdir()
    lines = [rec(i * 100, 600, 4, [i * 2, i * 2 + 1]) for i in range(5)]
    lines.append('{"timestamp": 900, "input_length": 600')  # truncated sixth line
    write_trace(work, lines)
    mooncake_scenario(work, "trace.jsonl")
    monkeypatch.chdir(work)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", "mooncake.yaml", "--out", str(out)])
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "Traceback" not in result.stderr + result.output
    assert "line 6" in result.stderr
    assert not out.exists()
    assert sorted(os.listdir(work)) == ["mooncake.yaml", "trace.jsonl"]
    assert sorted(os.listdir(tmp_path)) == ["work"]


def test_cli_validate_shipped_trace(tmp_path: Path):
    path = mooncake_scenario(tmp_path, str(CONVERSATION_TRACE), limit=50)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "valid" in result.stdout
