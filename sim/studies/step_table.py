"""Reading a measured step-time table for `hicache-sim calibrate --step-times`: a CSV of
forward times, or the JSONL that SGLang's `bench_one_batch` appends its results to.

Every row becomes a `StepRow` in the engine's terms (`Timing.decode_batch_step_s`): a decode
step of `batch_size` requests attending `tokens` in all, or a prefill pass computing `tokens`.
Anything that is not such a row is bad input naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.core.safe_io import UnreadableFile, read_bounded
from sim.core.spec import ScenarioError

PHASES = ("decode", "prefill")
COLUMNS = ("phase", "batch_size", "tokens", "ms")
"""The CSV's columns, in any order; other columns are ignored (a note, the model's name)."""

BENCH_KEYS = ("batch_size", "input_len", "output_len", "prefill_latency")
"""What every line of `bench_one_batch`'s JSONL carries and the fit needs; the decode row also
needs `median_decode_latency`, which the benchmark writes only when `output_len` > 1
(0.5.23: sglang/benchmark/one_batch.py:latency_test_run_once)."""


@dataclass(frozen=True)
class StepRow:
    """One measured forward: `ms` for a `phase` of `batch_size` requests over `tokens`."""

    phase: str
    batch_size: int
    tokens: float
    ms: float
    where: str
    """Where it is in the file ("row 3", "line 2 decode"), for messages and the printed table."""


@dataclass
class StepTable:
    name: str
    sha256: str
    form: str
    """"csv" or "bench_one_batch"."""
    rows: list[StepRow]
    warnings: list[str] = field(default_factory=list)

    def phase(self, phase: str) -> list[StepRow]:
        return [row for row in self.rows if row.phase == phase]


def read_step_table(path: Path) -> StepTable:
    """The table at `path`: `bench_one_batch` JSONL if its first non-blank character opens a
    JSON object, a CSV otherwise. Refuses (ScenarioError) a missing, unreadable, empty or
    malformed file, and any row whose numbers are not positive."""
    source = str(path)
    try:
        data = read_bounded(path)
    except FileNotFoundError:
        raise ScenarioError(source, None, "no such file") from None
    except (UnreadableFile, OSError) as exc:
        raise ScenarioError(source, None, f"cannot read it ({exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(source, None, f"not UTF-8 text ({exc.reason})") from None
    sha = hashlib.sha256(data).hexdigest()
    if text.lstrip().startswith("{"):
        table = StepTable(path.name, sha, "bench_one_batch", [])
        _read_bench_jsonl(source, text, table)
    else:
        table = StepTable(path.name, sha, "csv", [])
        _read_csv(source, text, table)
    if not table.rows:
        raise ScenarioError(source, None, "holds no measured rows")
    return table


def _read_csv(source: str, text: str, table: StepTable) -> None:
    """Lines whose first cell starts with `#` are comments; blank lines are skipped."""
    lines = [
        (n, line)
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise ScenarioError(source, None, "is empty (expected a header: " + ",".join(COLUMNS) + ")")
    try:
        parsed = list(csv.reader(io.StringIO("\n".join(line for _, line in lines))))
    except csv.Error as exc:
        raise ScenarioError(source, None, f"not a CSV file ({exc})") from None
    header = [cell.strip() for cell in parsed[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ScenarioError(
            source,
            f"row {lines[0][0]}",
            f"the header lacks column {', '.join(missing)} (expected {','.join(COLUMNS)})",
        )
    index = {c: header.index(c) for c in COLUMNS}
    for (n, _), cells in zip(lines[1:], parsed[1:], strict=True):
        where = f"row {n}"
        if len(cells) != len(header):
            raise ScenarioError(source, where, f"has {len(cells)} cells, the header {len(header)}")
        cell = {c: cells[i].strip() for c, i in index.items()}
        phase = cell["phase"].lower()
        if phase not in PHASES:
            raise ScenarioError(
                source, f"{where}, phase", f"{cell['phase']!r} is not decode or prefill"
            )
        batch = _cell(source, where, cell, "batch_size", whole=True)
        tokens = _cell(source, where, cell, "tokens")
        ms = _cell(source, where, cell, "ms")
        _check_tokens(source, f"{where}, tokens", tokens, int(batch))
        table.rows.append(StepRow(phase, int(batch), tokens, ms, where))


def _read_bench_jsonl(source: str, text: str, table: StepTable) -> None:
    """Each line gives a prefill row (`batch_size` × `input_len` tokens in `prefill_latency`
    seconds) and, where it has `median_decode_latency`, a decode row: the median of its
    `output_len - 1` steps, the middle one of which attends `input_len + output_len / 2`
    tokens a request (the prompt, the prefill's token and half the steps)."""
    runs: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(source, where, f"not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ScenarioError(source, where, "not a JSON object")
        for key in BENCH_KEYS:
            if key not in record:
                raise ScenarioError(source, f"{where}, {key}", "missing")
        batch = int(_positive(source, f"{where}, batch_size", record["batch_size"], whole=True))
        input_len = _positive(source, f"{where}, input_len", record["input_len"], whole=True)
        output_len = _positive(source, f"{where}, output_len", record["output_len"], whole=True)
        prefill_s = _positive(source, f"{where}, prefill_latency", record["prefill_latency"])
        table.rows.append(
            StepRow("prefill", batch, batch * input_len, prefill_s * 1000, f"{where} prefill")
        )
        if output_len > 1:
            key = "median_decode_latency"
            if key not in record:
                raise ScenarioError(source, f"{where}, {key}", "missing (output_len is above 1)")
            decode_s = _positive(source, f"{where}, {key}", record[key])
            tokens = batch * (input_len + output_len / 2)
            table.rows.append(StepRow("decode", batch, tokens, decode_s * 1000, f"{where} decode"))
        if isinstance(record.get("run_name"), str):
            runs.add(record["run_name"])
    if len(runs) > 1:
        table.warnings.append(
            f"the file holds {len(runs)} runs ({', '.join(sorted(runs))}); all are fitted together"
        )


def _cell(
    source: str, where: str, cells: dict[str, str], column: str, whole: bool = False
) -> float:
    """A CSV cell as a positive number; a message quotes the cell as written."""
    text = cells[column]
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError(source, f"{where}, {column}", f"{text!r} is not a number") from None
    return _positive(source, f"{where}, {column}", value, whole, shown=text)


def _positive(
    source: str, key: str, value: Any, whole: bool = False, shown: str | None = None
) -> float:
    """`value` as a finite positive number (a whole one with `whole`), else bad input."""
    said = shown if shown is not None else repr(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(source, key, f"{said} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise ScenarioError(source, key, f"{said} is not positive")
    if whole and value != int(value):
        raise ScenarioError(source, key, f"{said} is not a whole number")
    return float(value)


def _check_tokens(source: str, key: str, tokens: float, batch: int) -> None:
    """Every request of a batch attends (or computes) at least one token."""
    if tokens < batch:
        raise ScenarioError(
            source, key, f"{tokens:g} is fewer than the batch's {batch} requests (one each)"
        )
