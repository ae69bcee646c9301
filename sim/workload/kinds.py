"""Workloads: seeded request streams as page chains (no SimPy).

A workload yields `Request`s in arrival order and may add follow-ups when a request finishes
(multi-turn sessions are closed loops: the next turn starts a think time after the answer).
Pages are prefix-chained keys (`sim.model.chain`), so requests share keys exactly where they
share a prefix. Page keys that can never be shared (unique suffixes, generated output) come
from a counter instead of the interner, which keeps memory proportional to the shared pages.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import Field

from sim.core.safe_io import UnreadableFile, open_regular
from sim.core.spec import (
    KeyedError,
    NonNegFloat,
    PositiveFloat,
    PositiveInt,
    ScenarioError,
    Strict,
)
from sim.model.chain import ROOT_KEY, ChainInterner

MAX_REQUEST_TOKENS = 2**24
"""Tokens one request may hold (prompt plus output): 16.8 M, past any served context; larger
values would only make a run run out of memory."""
MAX_REQUESTS = 10**7
"""Requests of a generated workload (1 M take about three minutes)."""
MAX_CONTEXTS = 10**6
"""Distinct shared contexts or conversations of a generated workload."""
Tokens = Annotated[int, Field(strict=True, ge=0, le=MAX_REQUEST_TOKENS)]

FRESH_KEY_BASE = 1 << 62
"""Unshareable page keys start here. Interned keys count up from 1 and a trace's keys stay
below it (`MAX_TRACE_TOKEN_KEY` bounds the hash ids), so the spaces are disjoint by
construction, and every key fits a signed 64-bit column."""

MAX_TRACE_TOKEN_KEY = 1 << 62
"""(hash id + 1) × block_tokens must stay below this: trace page keys are then below
`FRESH_KEY_BASE` whatever the page size."""

GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip stream."""


@dataclass(slots=True)
class Request:
    """One request: its whole pages (prompt then output) and token counts."""

    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    pages: list[int]
    prompt_pages: int
    session: int = -1
    turn: int = 0


class Workload(Protocol):
    def arrivals(self) -> Iterator[Request]: ...

    def follow_up(self, request: Request, finish_s: float) -> Request | None: ...


class WorkloadSpec(Strict):
    """A workload's part of the scenario (`workload:`), told apart by its `kind`."""

    kind: str

    def build(self, page_size: int, rng: np.random.Generator) -> Workload:
        raise NotImplementedError

    def check(self, page_size: int) -> None:
        """Cross-field rules against the model; raise KeyedError naming the key."""

    def trace_path(self) -> Path | None:
        """The file this workload replays, if any (`validate` checks that it is there)."""
        return None

    def scan(self) -> int:
        """Read the whole file this workload replays, so a bad line is bad input before anything
        runs; returns its request count (0 without a file)."""
        return 0


class SharedPrefixWorkload(WorkloadSpec):
    kind: Literal["shared_prefix"]
    prefixes: Annotated[int, Field(strict=True, ge=1, le=MAX_CONTEXTS)] = 16
    prefix_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_REQUEST_TOKENS)] = 4096
    zipf_s: NonNegFloat = 1.0
    suffix_tokens: Tokens = 32
    output_tokens: Tokens = 64
    arrival_rate_per_s: PositiveFloat = 4.0
    requests: Annotated[int, Field(strict=True, ge=1, le=MAX_REQUESTS)] = 1000

    def check(self, page_size: int) -> None:
        total = self.prefix_tokens + self.suffix_tokens + self.output_tokens
        if total > MAX_REQUEST_TOKENS:
            raise KeyedError(
                "workload.prefix_tokens",
                f"a request of {total:,} tokens (prefix + suffix + output) is over the "
                f"{MAX_REQUEST_TOKENS:,} a request may hold",
            )

    def build(self, page_size: int, rng: np.random.Generator) -> Workload:
        return SharedPrefix(self, page_size, rng)


class MultiturnWorkload(WorkloadSpec):
    kind: Literal["multiturn"]
    sessions: Annotated[int, Field(strict=True, ge=1, le=MAX_CONTEXTS)] = 100
    turns: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 5
    first_turn_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_REQUEST_TOKENS)] = 2048
    turn_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_REQUEST_TOKENS)] = 512
    output_tokens: Tokens = 128
    think_time_s: NonNegFloat = 5.0
    arrival_rate_per_s: PositiveFloat = 1.0

    def check(self, page_size: int) -> None:
        last = self.first_turn_tokens + (self.turns - 1) * self.turn_tokens
        total = last + self.turns * self.output_tokens
        if total > MAX_REQUEST_TOKENS:
            raise KeyedError(
                "workload.turns",
                f"the last turn re-sends {total:,} tokens, over the {MAX_REQUEST_TOKENS:,} a "
                "request may hold",
            )

    def build(self, page_size: int, rng: np.random.Generator) -> Workload:
        return Multiturn(self, page_size, rng)


class MooncakeWorkload(WorkloadSpec):
    kind: Literal["mooncake"]
    path: str
    """Made absolute by `load_scenario`: relative to the scenario file's folder when written in
    the file, to the current directory when given as an override. A `.gz` file is read as gzip."""
    block_tokens: Annotated[int, Field(strict=True, ge=1, le=2**20)] = 512
    time_scale: PositiveFloat = 1.0
    limit: PositiveInt | None = None

    def build(self, page_size: int, rng: np.random.Generator) -> Workload:
        return MooncakeTrace(self, Path(self.path), page_size)

    def check(self, page_size: int) -> None:
        if self.block_tokens % page_size:
            raise KeyedError(
                "workload.block_tokens",
                f"{self.block_tokens} is not a multiple of model.page_size ({page_size})",
            )

    def trace_path(self) -> Path:
        return Path(self.path)

    def scan(self) -> int:
        return sum(1 for _ in iter_trace(self.trace_path(), self.block_tokens))

    def arrivals_s(self) -> list[float]:
        """Every replayed request's arrival in seconds (after `limit` and `time_scale`), for
        `validate` to say how many a horizon leaves out."""
        times = []
        for i, (_line, rec) in enumerate(iter_trace(self.trace_path(), self.block_tokens)):
            if self.limit is not None and i >= self.limit:
                break
            times.append(rec[0] / 1000.0 * self.time_scale)
        return times


class _FreshKeys:
    def __init__(self) -> None:
        self._next = itertools.count(FRESH_KEY_BASE)

    def take(self, n: int) -> list[int]:
        return [next(self._next) for _ in range(n)]


class SharedPrefix:
    """Poisson arrivals; each request is a Zipf-chosen shared prefix plus a unique suffix."""

    def __init__(self, spec: SharedPrefixWorkload, page_size: int, rng: np.random.Generator):
        self.spec = spec
        self.page_size = page_size
        self.rng = rng
        self.fresh = _FreshKeys()
        chains = ChainInterner()
        n_prefix_pages = spec.prefix_tokens // page_size
        self.prefix_pages = [
            chains.extend(ROOT_KEY, ((i, j) for j in range(n_prefix_pages)))
            for i in range(spec.prefixes)
        ]
        ranks = np.arange(1, spec.prefixes + 1, dtype=float)
        weights = ranks ** (-spec.zipf_s)
        self.prefix_probs = weights / weights.sum()

    def arrivals(self) -> Iterator[Request]:
        s, ps = self.spec, self.page_size
        prompt = s.prefix_tokens + s.suffix_tokens
        prompt_pages = prompt // ps
        total_pages = (prompt + s.output_tokens) // ps
        now = 0.0
        chunk = 4096
        for base in range(0, s.requests, chunk):
            n = min(chunk, s.requests - base)
            gaps = self.rng.exponential(1.0 / s.arrival_rate_per_s, n)
            choice = self.rng.choice(s.prefixes, size=n, p=self.prefix_probs)
            for k in range(n):
                now += float(gaps[k])
                prefix = self.prefix_pages[int(choice[k])]
                pages = prefix + self.fresh.take(total_pages - len(prefix))
                yield Request(base + k, now, prompt, s.output_tokens, pages, prompt_pages)

    def follow_up(self, request: Request, finish_s: float) -> Request | None:
        return None


class Multiturn:
    """Sessions start as a Poisson process; each turn re-sends the whole conversation so far."""

    def __init__(self, spec: MultiturnWorkload, page_size: int, rng: np.random.Generator):
        self.spec = spec
        self.page_size = page_size
        starts = np.cumsum(rng.exponential(1.0 / spec.arrival_rate_per_s, spec.sessions))
        self.starts = starts.tolist()
        self.think_s = (
            rng.exponential(spec.think_time_s, (spec.sessions, spec.turns)).tolist()
            if spec.think_time_s > 0
            else [[0.0] * spec.turns for _ in range(spec.sessions)]
        )
        self.fresh = _FreshKeys()
        self.session_pages: dict[int, list[int]] = {}

    def _turn(self, session: int, turn: int, arrival_s: float) -> Request:
        s, ps = self.spec, self.page_size
        prompt = s.first_turn_tokens + turn * (s.output_tokens + s.turn_tokens)
        total_pages = (prompt + s.output_tokens) // ps
        pages = self.session_pages.setdefault(session, [])
        pages.extend(self.fresh.take(total_pages - len(pages)))
        rid = session * s.turns + turn
        if turn == s.turns - 1:
            self.session_pages.pop(session)
        return Request(
            rid, arrival_s, prompt, s.output_tokens, list(pages), prompt // ps, session, turn
        )

    def arrivals(self) -> Iterator[Request]:
        for session, start in enumerate(self.starts):
            yield self._turn(session, 0, start)

    def follow_up(self, request: Request, finish_s: float) -> Request | None:
        turn = request.turn + 1
        if turn >= self.spec.turns:
            return None
        return self._turn(request.session, turn, finish_s + self.think_s[request.session][turn])


class MooncakeTrace:
    """Streams a Mooncake JSONL trace, re-blocking 512-token blocks into pages.

    Page j of a block with hash id h gets key h * pages_per_block + j + 1: the trace's hash ids
    are already prefix-chained, so equal ids at equal positions mean the same prefix and the
    derived page keys inherit that property without an interner.
    """

    def __init__(self, spec: MooncakeWorkload, path: Path, page_size: int):
        self.spec = spec
        self.path = path
        self.page_size = page_size
        self.pages_per_block = spec.block_tokens // page_size
        self.fresh = _FreshKeys()

    def arrivals(self) -> Iterator[Request]:
        ps, ppb = self.page_size, self.pages_per_block
        offsets = range(1, ppb + 1)
        for rid, (_line_no, rec) in enumerate(iter_trace(self.path, self.spec.block_tokens)):
            if self.spec.limit is not None and rid >= self.spec.limit:
                return
            timestamp_ms, input_len, output_len, hash_ids = rec
            prompt_pages = input_len // ps
            pages = [base + j for base in [h * ppb for h in hash_ids] for j in offsets]
            del pages[prompt_pages:]
            total_pages = (input_len + output_len) // ps
            pages.extend(self.fresh.take(total_pages - prompt_pages))
            arrival = timestamp_ms / 1000.0 * self.spec.time_scale
            yield Request(rid, arrival, input_len, output_len, pages, prompt_pages)

    def follow_up(self, request: Request, finish_s: float) -> Request | None:
        return None


TraceRecord = tuple[float, int, int, list[int]]


def iter_trace(path: Path, block_tokens: int) -> Iterator[tuple[int, TraceRecord]]:
    """Validated trace records with their line numbers; a bad line raises ScenarioError.

    A gzip file (a `.gz` suffix, or the gzip magic bytes under any name) is decompressed as it
    is read, line by line, so memory stays bounded by the longest line either way. A corrupt or
    truncated gzip stream is bad input like a bad line: it names the line it could not read.
    """
    with ExitStack() as stack:
        try:
            raw = stack.enter_context(open_regular(path))
            compressed = path.suffix == ".gz" or raw.peek(2)[:2] == GZIP_MAGIC
        except (OSError, UnreadableFile) as exc:
            raise ScenarioError(str(path), "workload.path", f"cannot read trace: {exc}") from None
        handle: gzip.GzipFile | io.BufferedReader = (
            stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")) if compressed else raw
        )
        yield from _records(_lines(handle, compressed, str(path)), block_tokens, str(path))


MAX_TRACE_LINES = MAX_REQUESTS
"""One request a line: a trace of more lines than a workload may hold requests is not replayed."""
MAX_BLANK_LINES = 1_000_000
"""Blank lines are skipped, but each costs a read: a gzip file of newlines (10 GiB in 10 MB)
must end in seconds, not minutes."""
MAX_TRACE_BYTES = 16 * 2**30
"""Decompressed bytes a trace may hold (about 50 million Mooncake lines)."""
MAX_TRACE_FILE_BYTES = MAX_TRACE_BYTES
"""The file itself, compressed or not."""
MAX_LINE_BYTES = 4 * 2**20
"""A trace line longer than this is bad input: a request of MAX_REQUEST_TOKENS has at most
32,768 hash ids, well under it, and a file without newlines must not grow memory unbounded."""


def _lines(
    handle: gzip.GzipFile | io.BufferedReader, compressed: bool, source: str
) -> Iterator[tuple[int, bytes]]:
    """Numbered raw lines, each read with a bound; a read or decompression failure names the
    line it stopped at."""
    line_no = blank = read = 0
    while True:
        try:
            raw = handle.readline(MAX_LINE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            what = "not a valid gzip stream" if compressed else "cannot read trace"
            raise ScenarioError(source, f"line {line_no + 1}", f"{what}: {exc}") from None
        if not raw:
            return
        line_no += 1
        read += len(raw)
        blank += not raw.strip()
        if line_no > MAX_TRACE_LINES or blank > MAX_BLANK_LINES or read > MAX_TRACE_BYTES:
            what = "decompressed " if compressed else ""
            raise ScenarioError(
                source,
                f"line {line_no}",
                f"the trace is over its bounds ({MAX_TRACE_LINES:,} lines, {MAX_BLANK_LINES:,} "
                f"of them blank, {MAX_TRACE_BYTES:,} {what}bytes): no replayable trace is this "
                "large; cut it into parts",
            )
        if len(raw) > MAX_LINE_BYTES:
            raise ScenarioError(
                source,
                f"line {line_no}",
                f"longer than {MAX_LINE_BYTES:,} bytes (no trace line is)",
            )
        yield line_no, raw


def _records(
    lines: Iterator[tuple[int, bytes]], block_tokens: int, source: str
) -> Iterator[tuple[int, TraceRecord]]:
    last_ts = -math.inf
    for line_no, raw in lines:
        where = f"line {line_no}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ScenarioError(source, where, "not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(source, where, f"not valid JSON: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:
            raise ScenarioError(source, where, f"not usable JSON: {exc}") from None
        rec = _trace_record(obj, block_tokens, source, where)
        if rec[0] < last_ts:
            raise ScenarioError(source, where, "timestamp goes backwards")
        last_ts = rec[0]
        yield line_no, rec


def _trace_record(obj: object, block_tokens: int, source: str, where: str) -> TraceRecord:
    if not isinstance(obj, dict):
        raise ScenarioError(source, where, "each line must be a JSON object")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in obj:
            raise ScenarioError(source, f"{where}: {key}", "missing")
    ts, inp, out, ids = obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not _finite(ts) or ts < 0:
        raise ScenarioError(source, f"{where}: timestamp", "must be a finite number >= 0")
    for key, val in (("input_length", inp), ("output_length", out)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 0:
            raise ScenarioError(source, f"{where}: {key}", "must be an integer >= 0")
    if inp + out > MAX_REQUEST_TOKENS:
        raise ScenarioError(
            source,
            f"{where}: input_length",
            f"input_length + output_length is over the {MAX_REQUEST_TOKENS:,} tokens a request "
            "may hold",
        )
    if not isinstance(ids, list) or not {int}.issuperset(map(type, ids)) or min(ids, default=0) < 0:
        raise ScenarioError(source, f"{where}: hash_ids", "must be a list of integers >= 0")
    if ids and (max(ids) + 1) * block_tokens >= MAX_TRACE_TOKEN_KEY:
        limit = MAX_TRACE_TOKEN_KEY // block_tokens - 1
        raise ScenarioError(
            source,
            f"{where}: hash_ids",
            f"ids must be below {limit} (2**62 / block_tokens - 1)",
        )
    expected = -(-inp // block_tokens)
    if len(ids) != expected:
        raise ScenarioError(
            source,
            f"{where}: hash_ids",
            f"has {len(ids)} ids; ceil(input_length / {block_tokens}) = {expected}",
        )
    return float(ts), inp, out, ids


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
