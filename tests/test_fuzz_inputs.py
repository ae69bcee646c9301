"""Fuzzing the bad-input contract of `validate` and `run` (docs/scenarios.md, "Exit codes").

Hypothesis builds scenario files from small valid bases (shared prefix, multi-turn, Mooncake
replay, and a hybrid SWA + Mamba model with faults and a sweep section) and breaks them: wrong
types at any key path, deleted keys, extra keys at every depth, out-of-range and non-finite
numbers, very long strings, shared subtrees (YAML anchors and aliases), `--set` overrides, and
at the text level tags, duplicated lines, merge keys, non-mapping roots, other encodings, junk
bytes, multiple documents and deep nesting. A third family mutates the lines of the Mooncake
trace a scenario replays. Every case goes through the CLI in-process, in its own temporary
working directory, as `validate` and then `run --out out`, and must keep the contract:

* the exit code is 0 or 2, never 1, and no exception escapes click;
* on exit 2 the message names the file (or `--set`) and a dotted key or `line N`, without a
  traceback, and nothing is written: no `out`, no `results/`, no hidden staging directory
  (whole-file errors, not UTF-8, empty, not a mapping, name no key; PyYAML's reader errors for
  control characters give `position N` instead of a line: both are accepted);
* on exit 0 `out/summary.json` exists, and `validate` and `run` agree.

Cases that validate but would make a run huge (workload.requests=10**12, a Poisson eviction
source at 1e308 per second) are validated only; `run_exclusion` says why. Known bugs in
`sim/` have their own failing tests at the bottom of this file (`test_bug_*`); the fuzzers
recognise exactly those failures (by reproducing the failing call directly) and count them
instead of stopping there, so that one known bug does not hide the rest. The module prints a
one-line tally at the end (`fuzz_inputs: 664 cases ...`), which the docs can quote.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.scenario.loading import (
    apply_override,
    check_references,
    load_scenario,
    parse_override,
    read_document,
)
from sim.scenario.schema import (
    MooncakeWorkload,
    MultiturnWorkload,
    Scenario,
    ScenarioError,
    SharedPrefixWorkload,
)
from sim.workload.kinds import iter_trace
from tests.conftest import invoke, make_doc

SCENARIO = "fuzz-scenario.yaml"
TRACE = "fuzz-trace.jsonl"
OUT = "out"
BLOCK = 512
GB = 1e9

DOCUMENT_EXAMPLES = 260
TEXT_EXAMPLES = 200
TRACE_EXAMPLES = 200
FUZZ_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not os.environ.get("HICACHE_FUZZ_EXPLORE"),
)
"""The same cases on every run, so CI cannot fail on a case no one has seen; set
HICACHE_FUZZ_EXPLORE=1 to draw new ones (each found failure becomes a `test_bug_*` below)."""


# --- valid bases ---------------------------------------------------------------------------------


def _trace_records() -> list[dict[str, Any]]:
    """A valid 10-line Mooncake trace: prefix-chained ids (block 0 shared), 250 ms apart."""
    records: list[dict[str, Any]] = []
    next_id = 1
    sizes = [(700, 16), (1500, 32), (900, 8), (2600, 64), (512, 16), (1100, 0), (3000, 32)]
    sizes += [(80, 4), (1800, 16), (1025, 8)]
    for i, (inp, out) in enumerate(sizes):
        n = -(-inp // BLOCK)
        ids = [0, *range(next_id, next_id + n - 1)]
        next_id += n
        records.append(
            {"timestamp": i * 250, "input_length": inp, "output_length": out, "hash_ids": ids}
        )
    return records


TRACE_RECORDS = _trace_records()
VALID_TRACE = "".join(json.dumps(r) + "\n" for r in TRACE_RECORDS).encode()

TINY = {"workload.requests": 20, "duration_s": 5}
MULTITURN = {
    "kind": "multiturn",
    "sessions": 4,
    "turns": 3,
    "first_turn_tokens": 512,
    "turn_tokens": 128,
    "output_tokens": 16,
    "think_time_s": 0.5,
    "arrival_rate_per_s": 2,
}


def base_doc(kind: str) -> dict[str, Any]:
    """A valid tiny scenario document of one of `BASE_KINDS` (each runs in well under 0.1 s)."""
    if kind == "shared_prefix":
        return make_doc(**TINY)
    if kind == "multiturn":
        return make_doc(duration_s=5, workload=dict(MULTITURN))
    if kind == "mooncake":
        return make_doc(duration_s=5, workload={"kind": "mooncake", "path": TRACE, "limit": 8})
    assert kind == "hybrid"
    return make_doc(
        **TINY,
        **{
            "model.mamba": {"state_bytes": 1 << 20},
            "device.mamba_slots": 64,
            "host.mode": "cache",
            "storage.hit_query": "min_of_pools",
            "storage.pools.swa": {"put_fail_prob": 0.1, "put_outage_s": [1, 2]},
            "storage.pools.kv": {"get_fail_prob": 0.02, "evict_rate_per_s": 2, "capacity_gb": 1},
            "storage.pools.mamba": {"capacity_gb": 0.5},
            "existence_cache.entries": 1000,
            "compute.decode_ms_per_token": 5,
            "sweep": {"seeds": 2, "grid": {"heal": ["none", "exact"]}, "target": "heal_rate>=0.9"},
        },
    )


BASE_KINDS = ("shared_prefix", "multiturn", "mooncake", "hybrid")


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 30)


def flow(value: Any) -> str:
    """A value as one line of flow YAML (a `--set` value, or inline in a mapping)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return text.removesuffix("\n...\n").strip()


# --- the tally -----------------------------------------------------------------------------------


@dataclass
class Tally:
    cases: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    validate_only: Counter[str] = field(default_factory=Counter)
    known_bugs: Counter[str] = field(default_factory=Counter)

    def line(self, seconds: float) -> str:
        def fmt(counter: Counter[str]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"

        return (
            f"fuzz_inputs: {sum(self.cases.values())} cases ({fmt(self.cases)}) in {seconds:.1f} s;"
            f" exit codes: {fmt(self.exits)}; validated only (run too large): "
            f"{fmt(self.validate_only)}; known bugs hit: {fmt(self.known_bugs)}"
        )


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print how many cases were fuzzed (quotable in the docs) once the module is done."""
    started = time.perf_counter()
    yield
    line = TALLY.line(time.perf_counter() - started)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        sys.stdout.write(f"\n{line}\n")
        sys.stdout.flush()


# --- one case through the CLI --------------------------------------------------------------------


@dataclass
class Case:
    family: str
    scenario: bytes
    trace: bytes | None = None
    sets: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()

    def __repr__(self) -> str:
        def cut(data: bytes | None) -> str:
            if data is None:
                return "None"
            return repr(data if len(data) <= 3000 else data[:3000] + b"...<cut>")

        sets = tuple(s if len(s) <= 300 else s[:300] + "...<cut>" for s in self.sets)
        return (
            f"Case(family={self.family!r}, ops={self.ops!r}, sets={sets!r},\n"
            f"  scenario={cut(self.scenario)},\n  trace={cut(self.trace)})"
        )


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A fresh temporary directory as the current directory (default outputs go to ./results)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp, contextlib.chdir(tmp):
        yield Path(tmp)


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def set_args(sets: tuple[str, ...]) -> list[str]:
    return [arg for s in sets for arg in ("--set", s)]


def escaped(result: Result) -> str:
    """Why the result is not a clean exit: an exception other than SystemExit escaped click."""
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        return ""
    return f"{type(exc).__name__}: {exc}"


WHOLE_FILE = ("cannot read file", "the file is empty", "top level must be a mapping")
"""Errors about the whole file, where no key or line can be named (not UTF-8, empty, a list)."""


def check_bad_input(result: Result, sources: tuple[str, ...], top_keys: set[str]) -> None:
    """An exit-2 message: `error: SOURCE: KEY: message` or `SOURCE: line N...`, no traceback."""
    out = result.output
    assert "Traceback" not in out, out
    match = re.search(r"^error: (.*)", out, re.M | re.S)
    assert match, f"no error line: {out!r}"
    msg = match.group(1)
    source = next((s for s in sources if msg.startswith(f"{s}: ")), None)
    assert source is not None, f"the message names none of {sources}: {out[:2000]!r}"
    rest = msg[len(source) + 2 :]
    if rest.startswith(WHOLE_FILE):
        return
    if re.search(r"\bline \d+", rest):
        return
    if rest.startswith("not valid YAML"):
        # PyYAML's reader errors (control characters) carry a character position, not a line.
        assert re.search(r"\bposition \d+", rest), f"YAML error without a location: {out!r}"
        return
    if source == "--set":
        assert ": " in rest, out
        return
    if rest.startswith("'': ") and "" in top_keys:
        return  # an empty key ('' or `--set .seed=1`) is named as
    # A schema error: the dotted key starts with a top-level key of the document or the schema.
    assert any(rest.startswith((f"{k}: ", f"{k}.")) for k in top_keys), (
        f"no dotted key named: {out[:2000]!r} (top-level keys {sorted(top_keys)[:20]})"
    )


def top_level_keys(text: bytes, sets: tuple[str, ...]) -> set[str]:
    keys = set(Scenario.model_fields)
    with contextlib.suppress(Exception):
        doc = yaml.safe_load(text.decode("utf-8"))
        if isinstance(doc, dict):
            keys |= {str(k) for k in doc}
            # pydantic reports a `true:`/`false:` key as 1/0 ("0: Keys should be strings")
            keys |= {str(int(k)) for k in doc if isinstance(k, bool)}
    keys |= {s.partition("=")[0].strip().split(".")[0] for s in sets}
    return keys


def known_validate_bug(path: Path, sets: tuple[str, ...]) -> str | None:
    """Which known bug (tests `test_bug_*` below) explains an exit 1 of `validate`, if any.

    Each step repeats the CLI's own call; an exception other than ScenarioError there is the bug.
    """
    try:
        read_document(path)
    except ScenarioError:
        return None
    except Exception:
        return "yaml-loader-crash"
    for text in sets:
        try:
            parse_override(text)
        except ScenarioError:
            return None
        except Exception:
            return "yaml-loader-crash"
    try:
        scenario = load_scenario(path, list(sets))
    except ScenarioError:
        return None
    try:
        check_references(scenario, str(path))
    except ScenarioError:
        return None
    except OSError:
        return "long-trace-path-crash"
    trace = scenario.trace_path()
    if isinstance(scenario.workload, MooncakeWorkload) and trace is not None:
        try:
            for _ in iter_trace(trace, scenario.workload.block_tokens):
                pass
        except ScenarioError:
            return None
        except Exception:
            return "trace-reader-crash"
    return None


MAX_REQUESTS = 400
MAX_PAGES = 50_000


def run_exclusion(scenario: Scenario) -> str | None:
    """Why a valid scenario is only validated, not run; None when the run stays small.

    A run does work in proportion to requests × pages per request, to the interned prefix pages,
    and to backend evictions (evict_rate_per_s × duration_s Poisson events); a value like
    workload.requests=10**12 or evict_rate_per_s=1e308 would run for hours or exhaust memory.
    Two further exclusions are known bugs with their own failing tests: a duration_s so small
    that duration_s / 200 underflows to 0 makes the sampler loop forever at t=0 (a hang), and
    byte sizes past the float range crash the run (exit 1).
    """
    w, ps = scenario.workload, scenario.model.page_size
    # `requests` requests of `pages` page keys each are built, matched and written; `interned`
    # prefix pages are built up front (SharedPrefix interns prefixes x prefix pages; a Mooncake
    # block expands to block_tokens / page_size keys per hash id before it is cut to the prompt).
    if isinstance(w, SharedPrefixWorkload):
        requests = w.requests
        pages = (w.prefix_tokens + w.suffix_tokens + w.output_tokens) // ps
        interned = w.prefixes * (w.prefix_tokens // ps)
        if w.prefixes > MAX_PAGES:  # np.arange(prefixes) Zipf weights: 10**30 cannot allocate
            return "prefixes"
    elif isinstance(w, MultiturnWorkload):
        requests = w.sessions * w.turns
        pages = (w.first_turn_tokens + w.turns * (w.output_tokens + w.turn_tokens)) // ps
        interned = 0
    else:
        assert isinstance(w, MooncakeWorkload)
        requests, pages, interned = 0, 0, 0
        ppb = w.block_tokens // ps
        trace = scenario.trace_path()
        assert trace is not None
        with contextlib.suppress(ScenarioError):  # a bad line ends the run: count up to it
            for _, (_, inp, out, ids) in iter_trace(trace, w.block_tokens):
                requests += 1
                pages = max(pages, (inp + out) // ps, ppb * len(ids))
    if requests > MAX_REQUESTS:
        return "requests"
    if pages > MAX_PAGES or interned > MAX_PAGES * 4:
        return "pages per request"
    pools = scenario.model.pools
    evictions = sum(scenario.storage_pool(p).evict_rate_per_s for p in pools)
    if evictions * scenario.duration_s > 20_000:  # one event per eviction: 1e308/s never ends
        return "backend evictions"
    if scenario.duration_s / 200.0 == 0.0:
        TALLY.known_bugs["tiny-duration-hang"] += 1
        return "known bug: tiny-duration-hang"
    capacities = [scenario.storage_pool(p).capacity_gb for p in pools]
    if any(c is not None and not math.isfinite(c * GB) for c in capacities):
        TALLY.known_bugs["capacity-overflow-crash"] += 1
        return "known bug: capacity-overflow-crash"
    m = scenario.model
    sizes = [
        ps * m.kv.bytes_per_token,
        ps * m.swa.bytes_per_token if m.swa else 0,
        m.mamba.state_bytes if m.mamba else 0,
    ]
    if max(sizes) * max(pages, 1) > 1e300:
        TALLY.known_bugs["byte-size-overflow-crash"] += 1
        return "known bug: byte-size-overflow-crash"
    return None


def lazy_trace_read(scenario: Scenario) -> bool:
    """A bad trace line `run` never reads: the run stopped reading at `limit` or at the horizon.

    `run` streams the trace and stops after `limit` records or at the first arrival at or past
    duration_s, so it succeeds where `validate` (which reads every line) fails; the known bug of
    `test_bug_malformed_trace_line_run_never_reads_is_accepted`.
    """
    w = scenario.workload
    trace = scenario.trace_path()
    if not isinstance(w, MooncakeWorkload) or trace is None:
        return False
    try:
        for rid, (_, (ts, *_rest)) in enumerate(iter_trace(trace, w.block_tokens)):
            if w.limit is not None and rid >= w.limit:
                return True
            if ts / 1000.0 * w.time_scale >= scenario.duration_s:
                return True
    except ScenarioError:
        return False
    return False


class CaseTimeout(BaseException):
    """Raised by the watchdog; a BaseException so that the CLI's `except Exception` misses it."""


CASE_SECONDS = 60


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Turn a hang (a case takes well under a second) into a failure instead of a stuck suite."""

    def alarm(signum: int, frame: object) -> None:
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_case(case: Case) -> None:
    """Run one case through `validate` and `run` and check the whole contract."""
    TALLY.cases[case.family] += 1
    try:
        with watchdog(CASE_SECONDS):
            _check_case(case)
    except CaseTimeout:
        raise AssertionError(f"the case ran for {CASE_SECONDS} s: a hang") from None


def _check_case(case: Case) -> None:
    with workdir() as tmp:
        (tmp / SCENARIO).write_bytes(case.scenario)
        if case.trace is not None:
            (tmp / TRACE).write_bytes(case.trace)
        before = listing(tmp)
        sources = (SCENARIO, str(tmp / TRACE), str(tmp.resolve() / TRACE), "--set")
        top_keys = top_level_keys(case.scenario, case.sets)

        validated = invoke("validate", SCENARIO, *set_args(case.sets))
        assert not escaped(validated), escaped(validated)
        assert listing(tmp) == before, "validate wrote something"
        TALLY.exits[f"validate {validated.exit_code}"] += 1
        if validated.exit_code == 1:
            # Every crash family this classifies has been fixed; a new one fails here, named.
            known = known_validate_bug(tmp / SCENARIO, case.sets)
            raise AssertionError(f"validate exit 1 ({known}): {validated.output[-3000:]}")
        assert validated.exit_code in (0, 2), validated.output[-3000:]
        if validated.exit_code == 2:
            check_bad_input(validated, sources, top_keys)

        scenario: Scenario | None = None
        with contextlib.suppress(ScenarioError):
            scenario = load_scenario(tmp / SCENARIO, list(case.sets))
            check_references(scenario, SCENARIO)
        if validated.exit_code == 0:
            assert scenario is not None, "validate accepted what load_scenario refuses"
        if scenario is not None and (reason := run_exclusion(scenario)):
            TALLY.validate_only[reason] += 1
            return

        ran = invoke("run", SCENARIO, "--out", OUT, *set_args(case.sets))
        assert not escaped(ran), escaped(ran)
        TALLY.exits[f"run {ran.exit_code}"] += 1
        assert ran.exit_code in (0, 2), ran.output[-3000:]
        if ran.exit_code == 2:
            check_bad_input(ran, sources, top_keys)
            assert listing(tmp) == before, "run exited 2 but wrote something"
            assert validated.exit_code == 2, "run refused what validate accepted"
            return
        assert listing(tmp) == sorted([*before, OUT]), "run left something beside --out"
        summary = json.loads((tmp / OUT / "summary.json").read_text())
        assert isinstance(summary, dict) and "requests" in summary
        if validated.exit_code == 2 and scenario is not None and _sweep_refusal(validated):
            TALLY.exits["validate 2 on its sweep, run 0"] += 1
        elif validated.exit_code == 2:
            assert scenario is not None and lazy_trace_read(scenario), (
                f"run accepted what validate refused: {validated.output[-2000:]}"
            )
            TALLY.known_bugs["lazy-trace-read"] += 1


def _sweep_refusal(result: Result) -> bool:
    """`validate` plans a scenario's sweep and refuses a point or target that does not hold;
    `run` runs the scenario itself and ignores its sweep section."""
    return bool(re.search(r"^error: [^:]+: sweep\.", result.output, re.M))


# --- strategies: values --------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
SPECIAL_NUMBERS: list[int | float] = [
    -1,
    -1.5,
    0,
    0.0,
    -0.0,
    1,
    0.5,
    1.0000001,
    2,
    63,
    10**6,
    2**31,
    2**53 + 1,
    2**63,
    2**64,
    10**30,
    -(10**30),
    1e15,
    1e308,
    -1e308,
    1.7976931348623157e308,
    5e-324,
    1e-300,
    1e-9,
    NAN,
    INF,
    -INF,
]
numbers = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
)
long_strings = st.builds(
    lambda ch, n: ch * n,
    st.sampled_from(["a", "é", "7", " x", "-", "🙂", "\\", "'", '"']),
    st.sampled_from([101, 1025, 5000, 100_000]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.text(max_size=20),
    st.sampled_from(["", "~", "null", "yes", "no", "on", "0x1F", "1e3", "1_000", ".inf", "[]"]),
    st.binary(max_size=8),
    st.dates(),
)
extra_keys = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(
        ["<<", "kind", "Name", " name", "name ", "seed.x", "model.kv", "a: b", "[0]", "sweep"]
    ),
    st.integers(-3, 3),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, width=16),
)
odd_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(extra_keys, inner, max_size=3)
    ),
    max_leaves=6,
)


# --- strategies: scenario documents --------------------------------------------------------------

Path_ = tuple[Any, ...]


def node_paths(doc: Any) -> list[Path_]:
    """Every node below the root, as key paths (mapping keys and sequence indices)."""
    paths: list[Path_] = []

    def walk(node: Any, path: Path_) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            paths.append((*path, key))
            if isinstance(value, dict | list):
                walk(value, (*path, key))

    walk(doc, ())
    return paths


def get_at(doc: Any, path: Path_) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def set_at(doc: Any, path: Path_, value: Any) -> None:
    get_at(doc, path[:-1])[path[-1]] = value


def delete_at(doc: Any, path: Path_) -> None:
    parent = get_at(doc, path[:-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])


def dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


COST_KEYS = [
    "duration_s",
    "workload.requests",
    "workload.prefixes",
    "workload.prefix_tokens",
    "workload.output_tokens",
    "workload.sessions",
    "workload.turns",
    "workload.first_turn_tokens",
    "workload.block_tokens",
    "workload.arrival_rate_per_s",
    "workload.think_time_s",
    "workload.time_scale",
    "workload.limit",
    "model.page_size",
    "model.kv.bytes_per_token",
    "model.swa.window_tokens",
    "device.kv_pages",
    "host.pages",
    "host.pcie_gbps",
    "storage.read_gbps",
    "storage.pools.kv.evict_rate_per_s",
    "storage.pools.kv.capacity_gb",
    "storage.pools.swa.capacity_gb",
    "existence_cache.entries",
    "prefetch.timeout_base_s",
    "compute.prefill_tokens_per_s",
    "compute.decode_ms_per_token",
]
COST_VALUES = [1, 64, 4096, 100_000, 10**7, 10**12, 10**30, 2**63, 0.001, 1e300, 1e308]
COST_VALUES += [1e-300, 5e-324]


@st.composite
def document_cases(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(BASE_KINDS))
    doc = base_doc(kind)
    ops: list[str] = []
    shared = False  # one shared subtree at most: two could form a cycle
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        paths = node_paths(doc)
        choices = ["wrong_type", "delete", "extra", "number", "tweak", "tweak", "cost"]
        choices.append("long_string")
        if not shared:
            choices.append("share")
        op = draw(st.sampled_from(choices)) if paths else "extra"
        if op == "cost":
            # a value that validates but sizes the run (huge, or tiny where it divides)
            key = draw(st.sampled_from(COST_KEYS))
            value = draw(st.sampled_from(COST_VALUES))
            with contextlib.suppress(ScenarioError):  # a parent that is not a mapping
                apply_override(doc, key, value)
            ops.append(f"cost {key}={value!r}")
            continue
        if op == "extra":
            parents = [()] + [p for p in paths if isinstance(get_at(doc, p), dict)]
            parent = draw(st.sampled_from(parents))
            key = draw(extra_keys)
            get_at(doc, parent)[key] = draw(odd_values)
            ops.append(f"extra {dotted((*parent, key))}")
            continue
        path = draw(st.sampled_from(paths))
        if op == "wrong_type":
            set_at(doc, path, draw(odd_values))
        elif op == "delete":
            delete_at(doc, path)
        elif op == "number":
            leaves = [p for p in paths if isinstance(get_at(doc, p), int | float)]
            path = draw(st.sampled_from(leaves or paths))
            set_at(doc, path, draw(numbers))
        elif op == "tweak":
            # the right type, often in range: these validate and reach `run`
            leaves = [p for p in paths if type(get_at(doc, p)) in (int, float)]
            path = draw(st.sampled_from(leaves or paths))
            value = get_at(doc, path)
            if isinstance(value, int):
                new = draw(st.sampled_from([0, 1, 2, value + 1, value * 2, value // 2, 10**30]))
            else:
                new = draw(st.sampled_from([0.0, 5e-324, 1e-300, 0.5, value * 2, value / 3, 1e308]))
            set_at(doc, path, new)
        elif op == "long_string":
            set_at(doc, path, draw(long_strings))
        else:
            # the same subtree at two places: safe_dump writes an anchor and an alias
            others = [
                p
                for p in paths
                if p[: len(path)] != path and path[: len(p)] != p and isinstance(p[-1], str)
            ]
            if others:
                shared = True
                target = draw(st.sampled_from(others))
                set_at(doc, target, get_at(doc, path))
                op = f"share -> {dotted(target)}"
        ops.append(f"{op} {dotted(path)}")
    sets = draw(st.one_of(st.just([]), st.lists(set_overrides(doc), min_size=1, max_size=2)))
    trace = VALID_TRACE if kind == "mooncake" else None
    return Case("documents", dump(doc).encode(), trace, tuple(sets), (kind, *ops))


@st.composite
def set_overrides(draw: st.DrawFn, doc: dict[str, Any]) -> str:
    """A `--set KEY=VALUE`: a real or odd dotted key, a flow-YAML value or raw text."""
    keys = [dotted(p) for p in node_paths(doc) if all(isinstance(k, str) for k in p)]
    key = draw(
        st.one_of(
            st.sampled_from(keys or ["seed"]),
            st.text(max_size=12),
            st.sampled_from(["", ".", "a..b", "name.x", "model..kv", "=", " seed "]),
        )
    )
    value = draw(
        st.one_of(
            odd_values.map(flow),
            st.text(max_size=20),
            st.sampled_from(["[", "{a: 1, a: 2}", "!!python/object:os.system {}", "&a [*a]"]),
        )
    )
    return f"{key}={value}"


# --- strategies: YAML text -----------------------------------------------------------------------

TAGS = [
    "!!python/object:os.system",
    "!!python/object/apply:os.system",
    "!!python/name:os.system",
    "!!python/tuple",
    "!!binary",
    "!!set",
    "!!omap",
    "!!pairs",
    "!!timestamp",
    "!!str",
    "!!int",
    "!!float",
    "!!bool",
    "!!null",
    "!!map",
    "!!seq",
    "!custom",
    "!<tag:example.com,2000:x>",
]
TAG_VALUES = ["", "1", "0.5", "abc", "''", "0x", "2001-02-30", "[1]", "{a: 1}", "x", ".", "YQ=="]
ROOTS = [
    "",
    "# only a comment\n",
    "~\n",
    "null\n",
    "42\n",
    "3.5\n",
    "'a string'\n",
    "- 1\n- 2\n",
    "[]\n",
    "{}\n",
    "--- \n...\n",
    "a: 1\n---\nb: 2\n",
    "? [a, b]\n: 1\n",
    "!!set {a, b}\n",
    "!!binary aGVsbG8=\n",
]
YAML_SPECIALS = ":-?[]{},#&*!|>'\"%@` \t\n\r\x00\x07\x85\ufeff\u2028é"
SCALAR_LINE = re.compile(r"^(\s*(?:- )?[^\s:#][^:#]*: )(\S.*)$")


def nested(depth: int, kind: str) -> str:
    if kind == "seq":
        return "[" * depth + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


@st.composite
def text_cases(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(BASE_KINDS))
    doc = base_doc(kind)
    text = dump(doc)
    lines = text.splitlines(keepends=True)
    op = draw(
        st.sampled_from(
            [
                "dup_line",
                "tag",
                "root",
                "bytes",
                "encoding",
                "chars",
                "indent",
                "nest",
                "merge",
                "alias",
                "recursive",
                "multi_doc",
                "long_line",
                "big_int",
                "directive",
            ]
        )
    )
    data: bytes
    scalar_lines = [i for i, line in enumerate(lines) if SCALAR_LINE.match(line)]
    if op == "dup_line":
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
        data = "".join(lines).encode()
    elif op == "tag":
        i = draw(st.sampled_from(scalar_lines))
        m = SCALAR_LINE.match(lines[i])
        assert m
        tag = draw(st.sampled_from(TAGS))
        value = draw(st.one_of(st.just(m.group(2)), st.sampled_from(TAG_VALUES)))
        lines[i] = f"{m.group(1)}{tag} {value}\n"
        op = f"tag line {i + 1}: {lines[i].strip()}"
        data = "".join(lines).encode()
    elif op == "root":
        data = draw(st.sampled_from(ROOTS)).encode()
    elif op == "bytes":
        junk = draw(st.binary(min_size=1, max_size=64))
        where = draw(st.sampled_from(["whole", "insert", "prefix", "suffix"]))
        raw = text.encode()
        pos = draw(st.integers(0, len(raw)))
        data = {
            "whole": junk,
            "insert": raw[:pos] + junk + raw[pos:],
            "prefix": junk + raw,
            "suffix": raw + junk,
        }[where]
        op = f"bytes {where}"
    elif op == "encoding":
        codec = draw(st.sampled_from(["utf-16", "utf-32", "utf-8-sig", "latin-1", "cp1252"]))
        data = ("# café\n" + text).encode(codec)
        op = f"encoding {codec}"
    elif op == "chars":
        pos = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 8))
        ins = draw(st.text(alphabet=YAML_SPECIALS, max_size=4))
        data = (text[:pos] + ins + text[pos + cut :]).encode()
    elif op == "indent":
        i = draw(st.integers(0, len(lines) - 1))
        shift = draw(st.sampled_from([-2, -1, 1, 2, 4]))
        line = lines[i]
        lines[i] = line[-shift:] if shift < 0 else " " * shift + line
        data = "".join(lines).encode()
    elif op == "nest":
        # depth 5000 is far past any recursion limit: the known yaml-loader crash
        depth = draw(st.sampled_from([1, 2, 10, 50, 100, 5000]))
        shape = draw(st.sampled_from(["seq", "map"]))
        where = draw(st.sampled_from(["top", "model"]))
        line = f"deep: {nested(depth, shape)}\n"
        text = line + text if where == "top" else text.replace("model:\n", f"model:\n  {line}")
        data = text.encode()
        op = f"nest {shape} {depth} under {where}"
    elif op == "merge":
        # `<<` merges an anchored mapping into the other pools: valid unless the probability is
        prob = draw(numbers)
        doc.pop("storage", None)
        first, *rest = [p for p in ("kv", "swa", "mamba") if p in doc["model"]]
        storage = f"storage:\n  pools:\n    {first}: &pool {{get_fail_prob: 0.0}}\n" + "".join(
            f"    {p}: {{<<: *pool, put_fail_prob: {flow(prob)}}}\n" for p in rest
        )
        data = (dump(doc) + storage).encode()
        op = f"merge put_fail_prob={prob!r}"
    elif op == "alias":
        i, j = sorted(draw(st.lists(st.sampled_from(scalar_lines), min_size=2, max_size=2)))
        mi, mj = SCALAR_LINE.match(lines[i]), SCALAR_LINE.match(lines[j])
        assert mi and mj
        lines[i] = f"{mi.group(1)}&v {mi.group(2)}\n"
        lines[j] = f"{mj.group(1)}*v\n" if i != j else lines[j]
        op = f"alias line {i + 1} -> {j + 1}"
        data = "".join(lines).encode()
    elif op == "recursive":
        shape = draw(st.sampled_from(["&r [*r]", "&r {a: *r}", "&r [1, [2, *r]]"]))
        data = (text + f"deep: {shape}\n").encode()
        op = f"recursive {shape}"
    elif op == "multi_doc":
        data = (text + "---\n" + text).encode()
    elif op == "long_line":
        n = draw(st.sampled_from([1025, 100_000]))
        data = (
            text + draw(st.sampled_from(["k" * n + ": 1\n", "name: " + "n" * n + "\n"]))
        ).encode()
        op = f"long_line {n}"
    elif op == "big_int":
        digits = draw(st.sampled_from([19, 20, 40, 309, 400, 4300, 5000]))
        key = draw(st.sampled_from(["seed", "duration_s", "kv_pages", "bytes_per_token"]))
        data = re.sub(
            rf"^(\s*{key}: ).*$", lambda m: m.group(1) + "9" * digits, text, count=1, flags=re.M
        ).encode()
        op = f"big_int {key} {digits} digits"
    else:
        directive = draw(st.sampled_from(["%YAML 1.1\n---\n", "%YAML 2.0\n---\n", "%TAG ! x\n"]))
        data = (directive + text).encode()
        op = f"directive {directive!r}"
    trace = VALID_TRACE if kind == "mooncake" else None
    return Case("yaml_text", data, trace, (), (kind, op))


# --- strategies: Mooncake traces -----------------------------------------------------------------

JSON_ODD = [
    None,
    True,
    False,
    "7",
    "",
    -1,
    -0.5,
    0.5,
    1.5,
    10**30,
    2**64,
    1e300,
    NAN,
    INF,
    [],
    [1],
    {},
    {"a": 1},
    "x" * 1000,
]
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
TRACE_OPS = [
    "truncate",
    "junk",
    "wrong_type",
    "delete_field",
    "hash_count",
    "bad_hash_id",
    "not_object",
    "blank",
    "backwards",
    "extra_field",
    "non_utf8",
    "deep",
    "big_digits",
    "ts_overflow",
    "lengths",
    "float_ts",
    "bom",
]


def mutate_line(draw: st.DrawFn, records: list[dict[str, Any]], i: int, op: str) -> bytes:
    rec = copy.deepcopy(records[i])
    raw = json.dumps(rec).encode()
    if op == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if op == "junk":
        return draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b"")
    if op == "wrong_type":
        rec[draw(st.sampled_from(FIELDS))] = draw(st.sampled_from(JSON_ODD))
    elif op == "delete_field":
        del rec[draw(st.sampled_from(FIELDS))]
    elif op == "hash_count":
        delta = draw(st.sampled_from([-2, -1, 1, 5]))
        ids = rec["hash_ids"]
        rec["hash_ids"] = ids[:delta] if delta < 0 else ids + list(range(900, 900 + delta))
    elif op == "bad_hash_id":
        rec["hash_ids"][draw(st.integers(0, len(rec["hash_ids"]) - 1))] = draw(
            st.sampled_from([-1, "3", 1.0, True, None, [1], 2**70])
        )
    elif op == "not_object":
        return json.dumps(draw(st.sampled_from([[1, 2], 3, "s", None, [rec]]))).encode()
    elif op == "blank":
        return draw(st.sampled_from([b"", b" ", b"\t", b"\r"]))
    elif op == "backwards":
        rec["timestamp"] = draw(st.sampled_from([-1, 0, 10**7, 1e300]))
    elif op == "extra_field":
        rec[draw(st.text(max_size=8))] = draw(st.sampled_from(JSON_ODD))
    elif op == "non_utf8":
        pos = draw(st.integers(0, len(raw)))
        return raw[:pos] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + raw[pos:]
    elif op == "deep":
        # 100000 is past any recursion limit: the known trace-reader crash
        depth = draw(st.sampled_from([1, 10, 100, 100_000]))
        return raw[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
    elif op == "big_digits":
        digits = draw(st.sampled_from([20, 400, 4300, 5000]))
        key = draw(st.sampled_from(["input_length", "output_length"]))
        return raw.replace(f'"{key}": '.encode(), f'"{key}": {"9" * digits}, "was": '.encode())
    elif op == "ts_overflow":
        exponent = draw(st.sampled_from([300, 308, 309, 400]))
        return raw.replace(b'"timestamp": ', f'"timestamp": 1{"0" * exponent}, "was": '.encode())
    elif op == "lengths":
        inp = draw(st.sampled_from([0, 1, 511, 512, 513, 100_000]))
        rec["input_length"] = inp
        rec["hash_ids"] = list(range(5000 + i * 1000, 5000 + i * 1000 + -(-inp // BLOCK)))
        rec["output_length"] = draw(st.sampled_from([0, 1, 4096, 10**7]))
    elif op == "float_ts":
        rec["timestamp"] = rec["timestamp"] + draw(st.sampled_from([0.0, 0.5, 1e-9]))
    else:
        return b"\xef\xbb\xbf" + raw
    return json.dumps(rec).encode()


@st.composite
def trace_cases(draw: st.DrawFn) -> Case:
    lines = [json.dumps(r).encode() for r in TRACE_RECORDS]
    ops: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(TRACE_OPS))
        lines[i] = mutate_line(draw, TRACE_RECORDS, i, op)
        ops.append(f"line {i + 1}: {op}")
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = eol.join(lines) + (eol if draw(st.booleans()) else b"")
    if draw(st.integers(0, 30)) == 0:
        data = b""
        ops.append("empty trace")
    workload = {
        "kind": "mooncake",
        "path": TRACE,
        "block_tokens": draw(st.sampled_from([BLOCK] * 6 + [256, 1024])),
        "time_scale": draw(st.sampled_from([1.0] * 4 + [0.001, 1e6])),
        "limit": draw(st.sampled_from([None, None, 1, 3, 100])),
    }
    doc = make_doc(duration_s=5, workload=workload)
    ops.append(f"workload {workload}")
    return Case("traces", dump(doc).encode(), data, (), tuple(ops))


# --- the fuzzers ---------------------------------------------------------------------------------


def _fuzz(strategy: st.SearchStrategy[Case], examples: int, family: str) -> None:
    """Run `examples` cases and check that both outcomes (valid and refused) were reached."""
    before = Counter(TALLY.exits)
    cases = TALLY.cases[family]

    @settings(FUZZ_SETTINGS, max_examples=examples)
    @given(case=strategy)
    def fuzz(case: Case) -> None:
        check_case(case)

    fuzz()
    assert TALLY.cases[family] - cases >= examples // 2, "hypothesis generated too few cases"
    seen = TALLY.exits - before
    assert seen["validate 0"] > 0 and seen["validate 2"] > 0, f"one-sided fuzzing: {seen}"
    assert seen["run 0"] > 0 and seen["run 2"] > 0, f"one-sided fuzzing: {seen}"


def test_fuzz_scenario_documents():
    _fuzz(document_cases(), DOCUMENT_EXAMPLES, "documents")


def test_fuzz_scenario_yaml_text():
    _fuzz(text_cases(), TEXT_EXAMPLES, "yaml_text")


def test_fuzz_mooncake_traces():
    _fuzz(trace_cases(), TRACE_EXAMPLES, "traces")


@pytest.mark.parametrize("kind", BASE_KINDS)
def test_every_fuzz_base_is_valid_and_runs(kind: str):
    """The fuzzers start from these: each must validate and run, or the fuzzing only sees 2s."""
    trace = VALID_TRACE if kind == "mooncake" else None
    case = Case("bases", dump(base_doc(kind)).encode(), trace)
    exits = Counter(TALLY.exits)
    check_case(case)
    assert (TALLY.exits - exits) == Counter({"validate 0": 1, "run 0": 1})


# --- known bugs: each fails until sim/ is fixed --------------------------------------------------


def cli_in(tmp: Path, *args: str) -> Result:
    with contextlib.chdir(tmp):
        return invoke(*args)


def assert_exit_2_and_nothing_written(tmp: Path, *extra: str, names: str = SCENARIO) -> None:
    """validate and run both exit 2 with a message naming `names` and nothing is written."""
    before = listing(tmp)
    for args in (("validate", SCENARIO), ("run", SCENARIO, "--out", OUT)):
        result = cli_in(tmp, *args, *extra)
        assert result.exit_code == 2, (args[0], result.exit_code, result.output[-1000:])
        assert names in result.output and "Traceback" not in result.output
        assert listing(tmp) == before


YAML_LOADER_CRASHES = {
    # PyYAML's SafeLoader raises more than yaml.YAMLError; read_document catches only that
    # (sim/core/documents.py, read_document: `except yaml.YAMLError`), so these exit 1.
    "implicit-date-out-of-range": "extra: 2001-02-30\n",  # ValueError: day is out of range
    "timestamp-tag-on-number": "extra: !!timestamp 1\n",  # AttributeError (groupdict of None)
    "int-tag-on-word": "extra: !!int abc\n",  # ValueError
    "float-tag-on-dot": "extra: !!float .\n",  # ValueError
    "bool-tag-on-word": "extra: !!bool x\n",  # KeyError: 'x'
    "int-tag-on-empty": "extra: !!int ''\n",  # IndexError
    "int-of-5000-digits": f"extra: {'9' * 5000}\n",  # ValueError: int max str digits
    "nesting-20000-deep": f"deep: {nested(20_000, 'seq')}\n",  # RecursionError in yaml.compose
    "recursive-alias": "deep: &r [*r]\n",  # RecursionError in _check_document
}


@pytest.mark.parametrize("text", YAML_LOADER_CRASHES.values(), ids=YAML_LOADER_CRASHES.keys())
def test_bug_yaml_the_loader_chokes_on_exits_2_not_1(tmp_path: Path, text: str):
    (tmp_path / SCENARIO).write_text(dump(make_doc(**TINY)) + text, encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path)


def test_bug_binary_value_in_a_sweep_grid_exits_2_not_1(tmp_path: Path):
    # Found by the document fuzzer: a grid takes any values, so `!!binary` bytes passed
    # validation and `run` failed with UnicodeDecodeError while writing the resolved config.
    doc = dump(make_doc(**TINY, sweep={"grid": {"heal": ["BINARY", "exact"]}}))
    text = doc.replace("BINARY", "!!binary gA==")
    assert "!!binary gA==" in text
    (tmp_path / SCENARIO).write_text(text, encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path)
    result = cli_in(tmp_path, "validate", SCENARIO)
    assert "sweep.grid.heal.0" in result.output and "binary" in result.output


@pytest.mark.parametrize(
    "value",
    ["2001-02-30", "!!int abc", "&a [*a]", "9" * 5000],
    ids=["implicit-date-out-of-range", "int-tag-on-word", "recursive-alias", "int-of-5000-digits"],
)
def test_bug_set_values_the_yaml_loader_chokes_on_exit_2_not_1(tmp_path: Path, value: str):
    # sim/scenario/schema.py, parse_override: `except yaml.YAMLError` misses the same exceptions
    (tmp_path / SCENARIO).write_text(dump(make_doc(**TINY)), encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path, "--set", f"seed={value}", names="--set")


@pytest.mark.parametrize("path", ["t" * 300 + ".jsonl", "d/" * 3000 + "t.jsonl"])
def test_bug_overlong_trace_path_exits_2_not_1(tmp_path: Path, path: str):
    # sim/scenario/schema.py, check_references: Path.is_file() raises OSError ENAMETOOLONG (pathlib
    # only swallows ENOENT, ENOTDIR, EBADF, ELOOP), so validate and run exit 1.
    doc = make_doc(duration_s=5, workload={"kind": "mooncake", "path": path})
    (tmp_path / SCENARIO).write_text(dump(doc), encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path)


def ok_line(ts: Any = 0) -> bytes:
    return json.dumps({**TRACE_RECORDS[0], "timestamp": ts}).encode()


TRACE_READER_CRASHES = {
    # sim/workload/kinds.py, iter_trace: only json.JSONDecodeError is caught around json.loads
    "nesting-100000-deep": ok_line()[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "int-of-5000-digits": ok_line().replace(
        b'"output_length": 16', b'"output_length": ' + b"9" * 5000
    ),
    # sim/workload/kinds.py, _trace_record: math.isfinite(ts) raises OverflowError for a huge int
    "timestamp-int-past-float-range": ok_line().replace(
        b'"timestamp": 0', b'"timestamp": 1' + b"0" * 400
    ),
}


@pytest.mark.parametrize("line", TRACE_READER_CRASHES.values(), ids=TRACE_READER_CRASHES.keys())
def test_bug_trace_lines_the_reader_chokes_on_exit_2_not_1(tmp_path: Path, line: bytes):
    (tmp_path / TRACE).write_bytes(VALID_TRACE + line + b"\n")
    doc = make_doc(duration_s=5, workload={"kind": "mooncake", "path": TRACE})
    (tmp_path / SCENARIO).write_text(dump(doc), encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path, names=f"line {len(TRACE_RECORDS) + 1}")


RUN_CRASHES = {
    # sim/engine/simulation.py, _storage_pool: int(capacity_gb * GB // size) with
    # capacity_gb * 1e9 = inf gives inf // size = nan -> ValueError, exit 1
    "capacity-gb-1e300": {"storage.pools.kv.capacity_gb": 1e300},
    # sim/engine/simulation.py, backing_up: nbytes / (pcie_gbps * GB) with an int too large
    # for a float -> OverflowError, exit 1 (also `_transfer`: nbytes / bps)
    "bytes-per-token-10**400": {"model.kv.bytes_per_token": 10**400},
}


@pytest.mark.parametrize("overrides", RUN_CRASHES.values(), ids=RUN_CRASHES.keys())
def test_bug_run_crashes_on_values_validate_accepts(tmp_path: Path, overrides: dict[str, Any]):
    (tmp_path / SCENARIO).write_text(dump(make_doc(**TINY, **overrides)), encoding="utf-8")
    validated = cli_in(tmp_path, "validate", SCENARIO)
    ran = cli_in(tmp_path, "run", SCENARIO, "--out", OUT)
    assert validated.exit_code in (0, 2), validated.output
    assert ran.exit_code == validated.exit_code, (validated.exit_code, ran.output[-1000:])


def test_bug_tiny_duration_hangs_the_run(tmp_path: Path):
    """duration_s = 5e-324 validates (> 0), but duration_s / 200 underflows to 0.0
    (sim/engine/simulation.py, `_ts_interval`), so `sampling` yields timeout(0) forever at t=0
    and `env.run(until=duration_s)` never returns, appending time-series rows (~50 MB/s).
    A normal tiny run takes ~1 s here."""
    (tmp_path / SCENARIO).write_text(
        dump(make_doc(**{**TINY, "duration_s": 5e-324})), encoding="utf-8"
    )
    assert cli_in(tmp_path, "validate", SCENARIO).exit_code == 0
    command = [sys.executable, "-m", "sim", "run", SCENARIO, "--out", OUT]
    try:
        proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=8)
    except subprocess.TimeoutExpired:
        pytest.fail("run with duration_s=5e-324 did not finish within 8 s (hang)")
    assert proc.returncode in (0, 2), proc.stderr


@pytest.mark.parametrize("stop", ["horizon", "limit"])
def test_bug_malformed_trace_line_run_never_reads_is_accepted(tmp_path: Path, stop: str):
    """docs/scenarios.md: 'A malformed line stops with its line number (exit 2)'. `validate`
    does (it reads every line), but `run` streams the trace and stops at the first arrival past
    duration_s (sim/engine/simulation.py, `arriving`) or after `limit` records
    (sim/workload/kinds.py, `MooncakeTrace.arrivals`), so it never reads a bad line after that
    point, exits 0 and writes a result from a trace that `validate` refuses."""
    late = json.dumps({**TRACE_RECORDS[0], "timestamp": 60_000}).encode()
    (tmp_path / TRACE).write_bytes(VALID_TRACE + late + b"\nnot json\n")
    workload = {"kind": "mooncake", "path": TRACE}
    if stop == "limit":
        workload["limit"] = 3
    doc = make_doc(duration_s=5 if stop == "horizon" else 100, workload=workload)
    (tmp_path / SCENARIO).write_text(dump(doc), encoding="utf-8")
    assert_exit_2_and_nothing_written(tmp_path, names=f"line {len(TRACE_RECORDS) + 2}")


@pytest.mark.parametrize(
    ("text", "extra"),
    [("", ("--set", ".seed=1")), ('"": 1\n', ())],
    ids=["set-leading-dot", "empty-key-in-file"],
)
def test_bug_an_empty_key_is_not_named(tmp_path: Path, text: str, extra: tuple[str, ...]):
    """An unknown key that is the empty string is reported as `FILE: unknown key`, naming no key
    at all: ScenarioError.__str__ (sim/scenario/schema.py) drops a falsy key. `--set .seed=1`
    (a typo for `--set seed=1`) creates the top-level key '' through apply_override."""
    (tmp_path / SCENARIO).write_text(dump(make_doc(**TINY)) + text, encoding="utf-8")
    result = cli_in(tmp_path, "validate", SCENARIO, *extra)
    assert result.exit_code == 2, result.output
    assert re.search(rf"^error: {SCENARIO}: .+: unknown key", result.output), result.output
