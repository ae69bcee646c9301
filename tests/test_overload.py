"""A run whose server could not keep up is told, not silently answered from: unfinished
requests, prefill offered faster than the compute rate, or a median TTFT that is a queue, on
stderr from run, compare, sweep, capacity and plan, and first among the report's findings;
`validate` says when a trace replay's horizon ends before the trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.outputs.overload import TTFT_P50_LIMIT_S, overload_reasons
from tests.conftest import REPO, TINY_SWEEP, invoke, make_doc, ok

HEALTHY: dict[str, Any] = {
    "requests": 1000,
    "requests_unfinished": 3,
    "prompt_tokens": 1_000_000,
    "device_hit_tokens": 300_000,
    "host_hit_tokens": 0,
    "l3_loaded_tokens": 200_000,
    "ttft_p50_s": 0.05,
}


def test_a_healthy_run_has_no_reason() -> None:
    assert overload_reasons(HEALTHY, prefill_tokens_per_s=1000.0, window_s=600.0) == []


@pytest.mark.parametrize(
    ("change", "rate", "said"),
    [
        ({"requests_unfinished": 50}, 1000.0, "50 of 1,000 requests (5.0%) never finished"),
        ({}, 500.0, "offered 833 tokens/s"),
        ({"ttft_p50_s": TTFT_P50_LIMIT_S + 1}, 1000.0, "TTFT p50 is 11.0 s"),
    ],
)
def test_each_sign_of_overload_is_a_reason(change: dict[str, Any], rate: float, said: str) -> None:
    reasons = overload_reasons({**HEALTHY, **change}, prefill_tokens_per_s=rate, window_s=600.0)
    assert len(reasons) == 1 and said in reasons[0], reasons


@pytest.fixture
def slow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny scenario whose prefill is far too slow for what arrives."""
    monkeypatch.chdir(tmp_path)
    doc = make_doc(**TINY_SWEEP, **{"compute.prefill_tokens_per_s": 300})
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "fast.yaml").write_text(yaml.safe_dump(make_doc(**TINY_SWEEP)))
    return tmp_path


def test_run_and_compare_warn_when_the_server_cannot_keep_up(slow: Path) -> None:
    told = ok(invoke("run", "slow.yaml", "--out", "r"))
    assert "warning: the run was overloaded" in told.stderr
    assert "compute.prefill_tokens_per_s" in told.stderr
    assert "overloaded" not in ok(invoke("run", "fast.yaml", "--out", "f")).stderr
    told = ok(invoke("compare", "slow.yaml", "--heal", "none,keep_pages", "--out", "c"))
    assert told.stderr.count("was overloaded") == 2 and "the run of heal=none" in told.stderr
    page = ok(invoke("report", "r")).output
    report = (slow / "r" / "report.html").read_text()
    assert "report.html" in page and "Warning: the run was overloaded" in report


def test_a_sweep_says_how_many_of_its_runs_were_overloaded(slow: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {"grid": {"compute.prefill_tokens_per_s": [300, 20000]}}
    (slow / "sweep.yaml").write_text(yaml.safe_dump(doc))
    told = ok(invoke("sweep", "sweep.yaml", "--executor", "serial", "--out", "s"))
    assert "warning: 1 of 2 runs of this sweep were overloaded" in told.stderr
    assert "first at compute.prefill_tokens_per_s=300" in told.stderr


def test_validate_warns_when_the_horizon_ends_before_the_trace() -> None:
    scenario = str(REPO / "scenarios" / "mooncake_conversation.yaml")
    told = ok(invoke("validate", scenario, "--set", "duration_s=600"))
    assert "10,281 of its 12,031 requests arrive after it" in told.stderr
    assert "ends before the trace" not in ok(invoke("validate", scenario)).stderr
