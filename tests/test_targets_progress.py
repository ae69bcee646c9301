"""Targets as a planner writes them (a percentage, a share of a reference point run on the same
seeds), the summary keys named beside the run summary, and progress a redirected log can see."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sim.core.stats import parse_relative, parse_target
from tests.conftest import TINY_SWEEP, invoke, make_doc, ok

CAP = "storage.pools.swa.capacity_gb"


def test_a_rate_bound_may_be_a_percentage() -> None:
    assert parse_target("l3_loaded_rate>=23%") == ("l3_loaded_rate", ">=", pytest.approx(0.23))
    assert parse_target("heal_rate>=0.9") == ("heal_rate", ">=", 0.9)
    with pytest.raises(ValueError, match="percentage bound is for a rate"):
        parse_target("loops<=5%")
    with pytest.raises(ValueError, match="only `hicache-sim capacity --target`"):
        parse_target("l3_loaded_rate>=95%@unbounded")


def test_a_bound_no_run_can_miss_or_meet_is_refused_before_the_search() -> None:
    """A rate above 1 (a percentage without its sign), or an amount below 0: every run meets
    it or none does, so the search would answer nothing."""
    with pytest.raises(ValueError, match=r"never met; for 95 % write l3_loaded_rate>=95%"):
        parse_target("l3_loaded_rate>=95")
    with pytest.raises(ValueError, match="always met"):
        parse_target("prefetch_discarded>=-1")
    assert parse_target("ttft_p99_s>=0") == ("ttft_p99_s", ">=", 0.0)
    with pytest.raises(ValueError, match=r"carries a unit \('s'\).*\(ttft_p99_s<=2\)"):
        parse_target("ttft_p99_s<=2s")


def test_a_relative_target_names_its_share_and_reference() -> None:
    assert parse_relative("l3_loaded_rate>=95%@unbounded") == (
        "l3_loaded_rate",
        ">=",
        pytest.approx(0.95),
        "unbounded",
    )
    assert parse_relative("ttft_p99_s<=1.1@100GB") == ("ttft_p99_s", "<=", 1.1, "100GB")
    assert parse_relative("heal_rate>=0.9") is None
    with pytest.raises(ValueError, match="names no reference point"):
        parse_relative("l3_loaded_rate>=95%@")


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "cap.yaml"
    path.write_text(yaml.safe_dump(make_doc(**TINY_SWEEP), sort_keys=False))
    return path


def test_capacity_runs_the_reference_point_and_records_the_bound(
    scenario: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = ok(
        invoke(
            "capacity",
            str(scenario),
            "--param",
            CAP,
            "--target",
            "l3_loaded_rate>=50%@unbounded",
            "--values",
            "0.02 0.4",
            "--seeds",
            "2",
            "--executor",
            "serial",
            "--out",
            str(out),
        )
    )
    saved = json.loads((out / "capacity.json").read_text())
    assert saved["requested_target"] == "l3_loaded_rate>=50%@unbounded"
    reference = saved["reference"]
    assert reference["value"] is None and reference["n"] == 2
    metric, op, bound = parse_target(saved["target"])
    assert (metric, op) == ("l3_loaded_rate", ">=")
    assert bound == pytest.approx(0.5 * reference["mean"], rel=1e-5)
    assert "reference storage.pools.swa.capacity_gb=unbounded (null)" in result.output
    assert len(json.loads((out / "capacity.json").read_text())) > 0


def test_a_bad_reference_point_is_refused_before_any_run(scenario: Path, tmp_path: Path) -> None:
    result = invoke(
        "capacity",
        str(scenario),
        "--param",
        CAP,
        "--target",
        "l3_loaded_rate>=95%@lots",
        "--values",
        "1,2",
        "--out",
        str(tmp_path / "out"),
    )
    assert result.exit_code == 2
    assert "--target" in result.output and "reference point" in result.output
    assert not (tmp_path / "out").exists()


def test_the_run_summary_names_each_contract_key(scenario: Path, tmp_path: Path) -> None:
    result = ok(invoke("run", str(scenario), "--out", str(tmp_path / "run")))
    line = next(x for x in result.output.splitlines() if x.startswith("storage (L3) loaded"))
    assert "[l3_loaded_tokens, l3_loaded_rate]" in line
    rewrites = next(x for x in result.output.splitlines() if x.startswith("rewritten after"))
    assert "by the hit-query heal" in rewrites and "by the discard heal" in rewrites


def test_capacity_redirected_to_a_file_writes_a_line_per_evaluation_while_it_runs(
    scenario: Path, tmp_path: Path
) -> None:
    """`capacity ... > log 2>&1`: each finished evaluation is a line in the log (with an ETA)
    while later ones still run, not a bar hidden until the end."""
    log = tmp_path / "log"
    command = [
        sys.executable,
        "-m",
        "sim",
        "capacity",
        str(scenario),
        "--param",
        CAP,
        "--target",
        "discard_rate<=0.5",
        "--values",
        "0.02,0.05,0.1,0.2",
        "--seeds",
        "2",
        "--executor",
        "serial",
        "--out",
        str(tmp_path / "out"),
    ]
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            seen_running = False
            deadline = time.monotonic() + 120
            while process.poll() is None and time.monotonic() < deadline:
                if "capacity: 1/4 evaluations" in log.read_text():
                    seen_running = process.poll() is None
                    break
                time.sleep(0.05)
            assert process.wait(timeout=300) == 0, log.read_text()
        finally:
            if process.poll() is None:
                process.kill()
    text = log.read_text()
    assert seen_running, "the first evaluation's line was in the log while the search ran"
    lines = [x for x in text.splitlines() if x.startswith("capacity: ")]
    assert len(lines) == 4, text
    assert all("ETA" in x and "elapsed" in x for x in lines)
    assert "\r" not in text, "no bar drawn into a file"


def test_values_take_commas_or_spaces() -> None:
    from sim.cli.studies import split_values

    assert (
        split_values("1,2,4") == split_values("1 2 4") == split_values("1, 2 ,4") == ["1", "2", "4"]
    )
    assert split_values("512 MiB, 2GiB") == ["512 MiB", "2GiB"]
    assert split_values("1,,2") == ["1", "", "2"], "an empty item is kept for the refusal"


def test_values_as_separate_arguments_are_scanned(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--param", CAP, "--target", "discard_rate<=0.5", "--seeds", "2"]
    ok(
        invoke(
            "capacity",
            str(scenario),
            *args,
            "--executor",
            "serial",
            "--out",
            str(out),
            "--values",
            "0.02",
            "0.4",
        )
    )
    assert len(json.loads((out / "capacity.json").read_text())) > 0
    assert (out / "evaluations.csv").read_text().count("\n") == 3, "two values and the header"
    stray = invoke("capacity", str(scenario), "0.4", *args, "--range", "1", "2")
    assert stray.exit_code == 2 and "only --values takes several" in stray.output


def test_validate_prints_resolved_sizes_and_warns_of_a_pool_too_small(tmp_path: Path) -> None:
    """A preset swap keeps a byte-sized SWA pool legal but a few windows of the new model: the
    sizes are printed, and the warning goes to stderr with exit 0."""
    from click.testing import CliRunner

    from sim.cli import cli

    doc = make_doc(**TINY_SWEEP)
    doc["device"]["swa_pages"] = 10  # 640 tokens = 5 windows of 128
    doc["storage"]["pools"]["swa"] = {"capacity_gb": 1e-6}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "device.swa_pages: 10 (640 tokens" in result.stdout
    assert "= 5.0 windows of 128 tokens" in result.stdout
    assert "warning: device.swa_pages is 10 pages = 5.0 windows" in result.stderr
    assert "warning: storage.pools.swa.capacity_gb is 1 kB, below one request's" in result.stderr
    assert "warning" not in result.stdout
    run = CliRunner().invoke(cli, ["run", str(path), "--out", str(tmp_path / "run")])
    assert run.exit_code == 0 and "warning: device.swa_pages" in run.stderr
    from sim.outputs.report import build_report

    page = build_report(tmp_path / "run")
    assert "<td>warning</td>" in page.replace('<td class="key">warning</td>', "<td>warning</td>")


def test_a_sweep_on_a_file_writes_a_line_per_run(tmp_path: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {"seeds": 2, "grid": {CAP: [0.05, 0.2]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = ok(invoke("sweep", str(path), "--executor", "serial", "--out", str(tmp_path / "s")))
    lines = [x for x in result.stderr.splitlines() if x.startswith("runs: ")]
    assert [x.split(",")[0] for x in lines] == [f"runs: {i}/4 runs" for i in range(1, 5)]
    assert all("ETA" in x for x in lines) and "\r" not in result.stderr
    assert (tmp_path / "s" / "config.resolved.yaml").is_file(), "kept for the report's card"
