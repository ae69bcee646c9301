"""Shared test helpers: small scenarios built in code, and the path to the repository's trace."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from sim.cli import cli
from sim.scenario.loading import apply_override, build_scenario
from sim.scenario.schema import Scenario
from tests.conformance import report, tally

REPO = Path(__file__).resolve().parents[1]
CONVERSATION_TRACE = REPO / "traces" / "mooncake_conversation_trace.jsonl.gz"
"""The Mooncake conversation trace as the repository ships it (traces/README.md)."""

BASE: dict[str, Any] = {
    "name": "test",
    "seed": 1,
    "duration_s": 120,
    "warmup_s": 0,
    "model": {
        "page_size": 64,
        "kv": {"bytes_per_token": 24576},
        "swa": {"window_tokens": 128, "bytes_per_token": 18432},
    },
    "device": {"kv_pages": 2000, "swa_pages": 2000},
    "host": {"mode": "buffer_only", "pages": 8000, "pcie_gbps": 50},
    "storage": {
        "hit_query": "kv_only",
        "pools": {"kv": {}, "swa": {}},
    },
    "prefetch": {"policy": "timeout", "threshold_tokens": 256},
    "heal": "keep_pages",
    "workload": {
        "kind": "shared_prefix",
        "prefixes": 20,
        "prefix_tokens": 2048,
        "zipf_s": 0.5,
        "suffix_tokens": 32,
        "output_tokens": 16,
        "arrival_rate_per_s": 4,
        "requests": 300,
    },
}


def make_doc(**overrides: Any) -> dict[str, Any]:
    """A copy of BASE with dotted-key overrides (`make_doc(**{"storage.read_gbps": 1})`)."""
    doc = copy.deepcopy(BASE)
    for key, value in overrides.items():
        apply_override(doc, key, value)
    return doc


QUEUED = {
    "workload.prefixes": 60,
    "workload.prefix_tokens": 4096,
    "workload.requests": 400,
    "workload.arrival_rate_per_s": 15,
    "device.kv_pages": 1200,
    "device.swa_pages": 1200,
}
"""A server that queues: more prefixes than the device holds, arriving faster than it serves."""


def make_scenario(**overrides: Any) -> Scenario:
    return build_scenario(make_doc(**overrides), "<test>")


@pytest.fixture
def scenario() -> Scenario:
    return make_scenario()


def invoke(*args: str) -> Result:
    """Run the CLI in-process (click's runner) with these arguments."""
    return CliRunner().invoke(cli, list(args))


def tiny_capacity(path: Path, out: Path, *more: str, seeds: int = 2) -> Result:
    """A capacity search of one value of `device.swa_pages` on `path` (a target every run
    meets), serial, into `out`: the smallest search the result-directory tests resume."""
    return invoke(
        "capacity", str(path), "--param", "device.swa_pages", "--target", "requests>=1",
        "--values", "400", "--seeds", str(seeds), "--executor", "serial", "--out", str(out),
        *more,
    )  # fmt: skip


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.stderr)
    return result


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TINY_SWEEP: dict[str, Any] = {
    "workload.requests": 120,
    "duration_s": 60,
    "workload.prefixes": 60,
    "device.kv_pages": 400,
    "device.swa_pages": 400,
    "host.pages": 800,
}
"""Small device and host, 60 prefixes of 32 pages: runs of a second, for sweeps and searches."""


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def read_summary(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "summary.json").read_text())


RUN_FILES = {
    ".hicache-sim",
    "summary.json",
    "config.resolved.yaml",
    "meta.json",
    "requests.parquet",
    "prefetches.parquet",
    "writes.parquet",
    "timeseries.parquet",
    "instances.parquet",
}
"""What a run directory holds (docs/metrics.md, "Tables")."""


@pytest.fixture(scope="session")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run directory with its storage trace, for the readers of result directories
    (copy it before damaging it)."""
    import yaml

    base = tmp_path_factory.mktemp("traced-run")
    path = base / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(duration_s=20, **{"workload.requests": 20})))
    assert invoke("run", str(path), "--out", str(base / "run"), "--storage-trace").exit_code == 0
    return base / "run"


# --- the conformance table across xdist workers ------------------------------------------------

LOST_WORKERS: list[str] = []
"""Workers that went down without handing back their conformance counts."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A worker hands its conformance counts to the controller; the controller (or a run
    without xdist) writes the table into docs/fidelity.md when asked to."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["conformance"] = tally.counts()
        return
    if not tally.RUN or os.environ.get("HICACHE_WRITE_CONFORMANCE") != "1":
        return
    if LOST_WORKERS:
        session.config.get_terminal_writer().line(
            f"conformance table not written: workers {LOST_WORKERS} lost their counts", red=True
        )
        return
    report.write_doc()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller: add a finished worker's conformance counts to its own."""
    output = getattr(node, "workeroutput", None)
    if error is not None or output is None or "conformance" not in output:
        LOST_WORKERS.append(node.gateway.id)
        return
    tally.add(output["conformance"])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if tally.RUN:
        terminalreporter.write_sep("-", "conformance: cases held / run, by release")
        terminalreporter.write_line(report.table())
