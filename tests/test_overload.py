"""A run whose server could not keep up is told, not silently answered from: unfinished
requests, prefill offered faster than the compute rate, or a median TTFT that is a queue, on
stderr from run, compare, sweep, capacity and plan, and first among the report's findings;
`validate` says when a trace replay's horizon ends before the trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.outputs.overload import TTFT_P50_LIMIT_S, late_note, overload_reasons, study_late_note
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


def test_requests_that_arrived_too_late_to_finish_are_not_overload() -> None:
    """Unfinished requests that could not have finished by the horizon even alone on an idle
    server are the horizon's doing: the share is judged without them, and a note says how
    many there were."""
    late = {**HEALTHY, "requests_unfinished": 50, "requests_unfinished_late": 48}
    assert overload_reasons(late, prefill_tokens_per_s=1000.0, window_s=600.0) == []
    assert late_note(late) == (
        "in the run, 48 requests arrived too late to finish by the horizon (not counted as "
        "overload)"
    )
    some = {**late, "requests_unfinished_late": 30}
    reasons = overload_reasons(some, prefill_tokens_per_s=1000.0, window_s=600.0)
    assert len(reasons) == 1 and "20 of 1,000 requests (2.0%) never finished" in reasons[0]
    assert late_note(HEALTHY) is None
    assert late_note({**HEALTHY, "requests_unfinished_late": 0}) is None


LATE = {
    "duration_s": 40,
    "workload.requests": 120,
    "workload.output_tokens": 1000,
    "compute.prefill_tokens_per_s": 1_000_000,
    "device.kv_pages": 8000,
    "device.swa_pages": 8000,
    "host.pages": 16000,
}
"""Four requests a second for 30 s, each 20 s of decode alone on an idle server, and a 40 s
horizon: those that arrive after about 20 s cannot finish, the others do."""


def test_run_and_sweep_note_late_requests_instead_of_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "late.yaml").write_text(yaml.safe_dump(make_doc(**LATE)))
    told = ok(invoke("run", "late.yaml", "--out", "r"))
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    late = summary["requests_unfinished_late"]
    assert late > 0.01 * summary["requests"] and summary["requests_unfinished"] == late
    assert "overloaded" not in told.stderr
    assert (
        f"note: in the run, {late:,} requests arrived too late to finish by the horizon (not "
        "counted as overload)"
    ) in told.stderr
    doc = make_doc(**LATE)
    doc["sweep"] = {"grid": {"duration_s": [40, 80]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(doc))
    told = ok(invoke("sweep", "sweep.yaml", "--executor", "serial", "--out", "s"))
    assert "overloaded" not in told.stderr
    assert "note: in 1 of 2 runs of this sweep, " in told.stderr
    assert study_late_note(tmp_path / "s" / "tasks", "sweep") in told.stderr


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


def test_capacity_and_plan_mark_an_answer_from_overloaded_runs(slow: Path) -> None:
    """capacity.json and plan.json say the answer's runs were overloaded (how many, why, what
    to change); the console says it beside the answer and the reports first on the page."""
    told = ok(
        invoke(
            "capacity", "slow.yaml", "--param", "device.swa_pages", "--target", "requests>=1",
            "--values", "400,800", "--seeds", "2", "--executor", "serial", "--out", "c",
        )
    )  # fmt: skip
    saved = json.loads((slow / "c" / "capacity.json").read_text())
    overloaded = saved["overloaded"]
    assert overloaded["runs"] == overloaded["of"] == 2 and len(overloaded["warnings"]) == 2
    assert "never finished" in overloaded["warnings"][0]
    assert "compute.prefill_tokens_per_s" in overloaded["fix"]
    assert f"WARNING: {overloaded['statement']}" in told.output
    answer_line = told.output.index("device.swa_pages = 400 pages")
    assert told.output.index("WARNING: 2 of the answer's 2 runs were overloaded") > answer_line
    ok(invoke("report", "c"))
    page = (slow / "c" / "report.html").read_text()
    first = page.split('<section id="answer">')[1].split("</section>")[0]
    assert '<p class="warning">Warning: 2 of the answer&#x27;s 2 runs were overloaded' in first
    assert "overloaded (see the warning below)" in first
    assert page.index('id="answer"') < page.index('id="deployment"')

    doc = yaml.safe_load((slow / "slow.yaml").read_text())
    doc["hardware"] = {"gpu": "h200"}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 1, "swa": 1}}
    (slow / "priced.yaml").write_text(yaml.safe_dump(doc))
    told = ok(
        invoke(
            "plan", "priced.yaml", "--axis", "cluster.instances=1,2", "--target", "requests>=1",
            "--seeds", "2", "--executor", "serial", "--out", "p",
        )
    )  # fmt: skip
    saved = json.loads((slow / "p" / "plan.json").read_text())
    assert saved["answer"]["values"] == {"cluster.instances": 1}
    assert saved["overloaded"]["runs"] == 2 and "WARNING: 2 of the answer" in told.output
    page = (slow / "p" / "report.html").read_text()
    assert '<p class="warning">Warning: 2 of the answer' in page.split('id="deployment"')[0]


def test_a_healthy_answer_is_not_marked(slow: Path) -> None:
    ok(
        invoke(
            "capacity", "fast.yaml", "--param", "device.swa_pages", "--target", "requests>=1",
            "--values", "400", "--seeds", "2", "--executor", "serial", "--out", "c",
        )
    )  # fmt: skip
    assert json.loads((slow / "c" / "capacity.json").read_text())["overloaded"] is None
