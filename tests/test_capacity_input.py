"""`hicache-sim capacity`: every argument is checked before the first run (exit 2, a message
naming the option, the value and the fix, nothing written), sizes take units, the answer says
its unit, the evaluations are drawn, and one progress bar covers the whole search."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import sim.studies.capacity
from sim.core.units import param_text, param_unit, parse_quantity
from sim.engine.metrics import summary_keys
from sim.engine.runner import run
from sim.scenario.loading import build_scenario
from sim.studies.capacity import CapacitySearch
from tests.conftest import TINY_SWEEP, invoke, is_png, make_doc, make_scenario, ok

CAP = "storage.pools.swa.capacity_gb"
TARGET = "discard_rate<=0.2"
TINY = TINY_SWEEP


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory holding `cap.yaml` (a kv+swa model), the cwd for the test."""
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "cap.yaml").write_text(yaml.safe_dump(make_doc(**TINY), sort_keys=False))
    monkeypatch.chdir(directory)
    return directory


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation is a failure: a refusal must come before the first run."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a simulation ran before the arguments were checked")

    monkeypatch.setattr(sim.studies.capacity, "compute", refuse)


def capacity(*args: str, param: str = CAP, target: str = TARGET) -> Any:
    return invoke(
        "capacity",
        "cap.yaml",
        "--param",
        param,
        "--target",
        target,
        *args,
        "--seeds",
        "2",
        "--executor",
        "serial",
        "--out",
        "out",
    )


REFUSED = [
    # (param, target, selection, fragments the message must hold)
    ("device.swa_pages", TARGET, ["--range", "10pc", "500pc"], ["--range", "'10pc'", "unit"]),
    ("heal", TARGET, ["--values", "none,keep_pages"], ["--param", "heal", "not numeric"]),
    ("storage.hit_query", TARGET, ["--values", "1,2"], ["--param", "hit_query", "not numeric"]),
    (
        "storage.pools.swa.put_outage_s",
        TARGET,
        ["--values", "1,2"],
        ["--param", "put_outage_s", "not numeric"],
    ),
    ("name", TARGET, ["--values", "1,2"], ["--param", "name", "not numeric"]),
    ("seed", TARGET, ["--values", "1,2"], ["--param", "seed cannot be sized", "--seeds"]),
    ("sweep.seeds", TARGET, ["--values", "1,2"], ["--param", "sweep.seeds", "--seeds"]),
    (
        "storage.pools.swa.capacity_gbb",
        TARGET,
        ["--values", "1,2"],
        ["--param", "not a scenario key", f"did you mean {CAP}"],
    ),
    ("device.mamba_slots", TARGET, ["--values", "1,2"], ["--param", "no mamba pool"]),
    (CAP, TARGET, ["--range", "0.4", "0.02"], ["--range", "0.4", "--range 0.02 0.4"]),
    (CAP, TARGET, ["--range", "0.1", "0.1"], ["--range", "both 0.1", "--values 0.1"]),
    (CAP, TARGET, ["--values", "0.1,abc"], ["--values", "'abc' is not a number", "512MB"]),
    (CAP, TARGET, ["--values", "0.1,,0.2"], ["--values", "empty value"]),
    (CAP, TARGET, ["--values", "-1,0.1"], ["--values", f"{CAP}=-1 GB", "greater than"]),
    (CAP, TARGET, ["--values", "0.1,2XB"], ["--values", "unknown unit 'XB'", "GiB"]),
    ("device.swa_pages", TARGET, ["--values", "100,200.5"], ["--values", "200.5", "integer"]),
    (CAP, "x>=nan", ["--values", "0.1"], ["--target", "'nan'", "not a finite number"]),
    (CAP, "discard_rate>=nan", ["--values", "0.1"], ["--target", "not a finite number"]),
    (CAP, "discard_rate<=inf", ["--values", "0.1"], ["--target", "not a finite number"]),
    (
        CAP,
        "device_mamba_dropped_slots<=0",
        ["--values", "0.1"],
        ["--target", "device_mamba_dropped_slots", "no mamba pool"],
    ),
    (
        CAP,
        "storage_mamba_get_hits>=1",
        ["--values", "0.1"],
        ["--target", "storage_mamba_get_hits", "no mamba pool"],
    ),
    (CAP, "discard_rat<=0.2", ["--values", "0.1"], ["--target", "did you mean discard_rate"]),
    (
        CAP,
        TARGET,
        ["--range", "0.02", "0.4", "--tolerance", "0"],
        ["--tolerance", "0 is not a positive number"],
    ),
    (
        CAP,
        TARGET,
        ["--range", "0.02", "0.4", "--tolerance", "-0.01"],
        ["--tolerance", "-0.01 is not a positive number"],
    ),
    (CAP, TARGET, ["--values", "0.1,0.2", "--tolerance", "0.1"], ["--tolerance", "--range"]),
    (
        CAP,
        "l3_loaded_rate>=95",
        ["--values", "0.1"],
        ["--target", "between 0 and 1", "never met", "l3_loaded_rate>=95%"],
    ),
    (CAP, "ttft_p99_s<=2s", ["--values", "0.1"], ["--target", "carries a unit", "ttft_p99_s<=2"]),
]


@pytest.mark.parametrize(
    ("param", "target", "selection", "fragments"),
    REFUSED,
    ids=[f"{p} {t} {' '.join(s)}" for p, t, s, _ in REFUSED],
)
@pytest.mark.usefixtures("no_runs")
def test_a_refused_argument_exits_2_before_any_run_and_writes_nothing(
    work: Path, param: str, target: str, selection: list[str], fragments: list[str]
):
    result = capacity(*selection, param=param, target=target)
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    message = result.stderr.strip()
    assert message.startswith("error: "), message
    assert "Traceback" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert sorted(os.listdir(work)) == ["cap.yaml"], "nothing written, no default results/"


@pytest.mark.usefixtures("no_runs")
def test_a_target_metric_another_pool_kind_reports_is_refused(tmp_path: Path):
    """A kv+swa+mamba model reports no out-of-window freeing for Mamba (it keeps end states),
    although `is_summary_key` knows the name from SWA."""
    scenario = make_scenario(**{"model.mamba": {"state_bytes": 1 << 20}, "device.mamba_slots": 8})
    with pytest.raises(sim.studies.capacity.ScenarioError) as info:
        CapacitySearch(
            scenario, "s.yaml", CAP, "device_mamba_freed_out_of_window_pages>=1", 2, tmp_path
        )
    assert info.value.source == "--target"
    assert "never reported" in info.value.message


@pytest.mark.parametrize(
    "layout",
    [
        {"model.swa": None, "device.swa_pages": None, "storage.pools": {}},
        {},
        {"model.mamba": {"state_bytes": 1 << 20}, "device.mamba_slots": 8},
    ],
    ids=["kv", "kv-swa", "kv-swa-mamba"],
)
def test_summary_keys_are_exactly_what_a_run_reports(layout: dict[str, Any]):
    doc = make_doc(**{**TINY, "workload.requests": 20, "duration_s": 10})
    for key, value in layout.items():
        section, _, field = key.partition(".")
        if value is None:
            doc[section].pop(field)
        else:
            doc[section][field] = value
    scenario = build_scenario(doc)
    assert set(run(scenario).summary) == summary_keys(scenario.model.pools)


def test_a_gb_key_takes_sizes_with_units_and_the_answer_says_gb(work: Path):
    result = ok(capacity("--values", "20MB,0.1GB,400MB"))
    evaluations = pd.read_csv(work / "out" / "evaluations.csv")
    assert list(evaluations["value"]) == pytest.approx([0.02, 0.1, 0.4])
    saved = json.loads((work / "out" / "capacity.json").read_text())
    assert saved["unit"] == "GB"
    assert saved["answer"] is not None
    statement = saved["statement"]
    assert statement.startswith(f"{CAP} = 400MB (0.40 GB):"), "as given, and rounded in GB"
    assert "0.10 GB does not meet it (resolved to within 0.30 GB)" in statement
    assert " GB): discard_rate " in statement
    assert statement in result.stdout
    assert f"{CAP}=20MB (0.02 GB):" in result.stdout, "each value as given, and in GB"


def test_a_range_with_units_bisects_in_gb(work: Path):
    ok(capacity("--range", "20MB", "0.4GB"))
    saved = json.loads((work / "out" / "capacity.json").read_text())
    evaluations = pd.read_csv(work / "out" / "evaluations.csv")
    assert evaluations["value"].min() == pytest.approx(0.02)
    assert evaluations["value"].max() == pytest.approx(0.4)
    assert 0.02 < saved["answer"] <= 0.4
    assert len(evaluations) > 3, "a float search (units give floats), not only the ends"


def test_the_answer_of_a_count_key_says_its_unit(work: Path):
    result = ok(capacity("--values", "64,4096", param="existence_cache.entries", target=TARGET))
    saved = json.loads((work / "out" / "capacity.json").read_text())
    assert saved["unit"] == "entries"
    assert f"existence_cache.entries = {saved['answer']} entries:" in result.stdout


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        (CAP, "GB"),
        ("device.swa_pages", "pages"),
        ("device.mamba_slots", "slots"),
        ("existence_cache.entries", "entries"),
        ("model.swa.checkpoint_tokens", "tokens"),
        ("storage.read_gbps", "GB/s"),
        ("storage.exists_latency_ms", "ms"),
        ("storage.exists_ttl_s", "s"),
        ("storage.pools.swa.evict_rate_per_s", "/s"),
        ("storage.pools.swa.put_fail_prob", ""),
    ],
)
def test_param_unit_comes_from_the_key_name(key: str, unit: str):
    assert param_unit(key) == unit


def test_param_text():
    assert param_text(CAP, 0.975781) == "0.975781 GB"
    assert param_text("device.swa_pages", 3000) == "3000 pages"
    assert param_text("device.mamba_slots", 2.0) == "2 slots"
    assert param_text("storage.pools.swa.evict_rate_per_s", 0.5) == "0.5/s"
    assert param_text("storage.pools.swa.put_fail_prob", 0.05) == "0.05"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("0.5", 0.5),
        ("2e3", 2000.0),
        ("10GB", 10.0),
        ("512MB", 0.512),
        ("2GiB", 2**31 / 1e9),
        ("256MiB", 2**28 / 1e9),
        ("1.5TB", 1500.0),
        ("1TiB", 2**40 / 1e9),
        (" 3 GB ", 3.0),
    ],
)
def test_parse_quantity_of_a_gb_key(text: str, value: float):
    parsed = parse_quantity(text, CAP)
    assert parsed == pytest.approx(value)
    assert isinstance(parsed, int) == (text == "1"), "only a plain integer stays an int"


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "", "1e999", "true", "0x10", "1,5"])
def test_parse_quantity_refuses_what_is_not_a_finite_number(text: str):
    with pytest.raises(ValueError):
        parse_quantity(text, CAP)


def test_parse_quantity_refuses_a_unit_on_a_key_counted_otherwise():
    with pytest.raises(ValueError, match="counted in pages"):
        parse_quantity("10GB", "device.swa_pages")


def test_capacity_draws_its_evaluations_and_plot_redraws_them(work: Path):
    result = ok(capacity("--values", "0.02,0.1,0.4"))
    out = work / "out"
    png, svg = out / "capacity.png", out / "capacity.svg"
    assert is_png(png) and b"<svg" in svg.read_bytes()[:2000]
    assert f"wrote {png.relative_to(work)}" in result.stdout
    png.unlink()
    svg.unlink()
    redrawn = ok(invoke("plot", "out"))
    assert is_png(png) and svg.is_file()
    assert "capacity.png" in redrawn.stdout


def test_the_capacity_plot_marks_a_missing_answer(work: Path):
    ok(capacity("--values", "0.01,0.02", target="discard_rate<=0.0001"))
    assert json.loads((work / "out" / "capacity.json").read_text())["answer"] is None
    assert is_png(work / "out" / "capacity.png")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("mode", ["scan", "bisect"])
def test_one_progress_bar_covers_the_whole_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
):
    stderr = _Terminal()
    monkeypatch.setattr("sys.stderr", stderr)
    search = CapacitySearch(
        make_scenario(**TINY), "s.yaml", CAP, TARGET, 2, tmp_path, executor="serial"
    )
    answer = search.scan([0.02, 0.1, 0.4]) if mode == "scan" else search.bisect(0.02, 0.4)
    done = len(answer.evaluations)
    text = stderr.getvalue()
    assert "capacity" in text and f"{done}/{done}" in text, text[-500:]
    assert "runs:" not in text, "no bar per evaluation"
    assert "evaluation" in text


def test_a_line_per_evaluation_when_stderr_is_not_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No bar (no carriage returns) on a file: one plain line per finished evaluation."""
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    search = CapacitySearch(
        make_scenario(**TINY), "s.yaml", CAP, TARGET, 2, tmp_path, executor="serial"
    )
    search.scan([0.1])
    text = stderr.getvalue()
    assert "\r" not in text
    assert text.startswith("capacity: 1/1 evaluations, storage.pools.swa.capacity_gb=0.1 GB")
    assert text.count("\n") == 1


def test_an_answer_is_rounded_to_the_search_s_resolution():
    from sim.outputs.answers import answer_text, quantity_text

    assert quantity_text(CAP, 32.09375, 3.11) == "32.1 GB"
    assert quantity_text(CAP, 807.8125, 12.5) == "808 GB"
    assert quantity_text("device.swa_pages", 4096, 1) == "4,096 pages"
    text = answer_text(CAP, 32.09375, 28.984375)
    assert text == "32.1 GB (resolved to within 3.1 GB; 29.0 GB fails)"
    assert answer_text(CAP, None) == "none in range"


def test_a_page_key_takes_byte_sizes_as_the_scenario_file_does(work: Path):
    """`--values 64MiB` on device.swa_pages converts with the model's page size, as
    `swa_pages: 64MiB` in the file would, and is echoed as given beside its pages."""
    result = ok(capacity("--values", "64MiB 128MiB", param="device.swa_pages"))
    pages = 64 * 2**20 // (64 * 18432)
    evaluations = pd.read_csv(work / "out" / "evaluations.csv")
    assert evaluations["value"].iloc[0] == pages
    assert f"device.swa_pages=64MiB ({pages} pages):" in result.stdout


def test_every_bad_argument_is_told_at_once(work: Path, no_runs: None):
    result = capacity("--range", "5", "1", param="device.swa_pagez", target="l3_loaded_ratte>=2")
    assert result.exit_code == 2
    for fragment in ("--param: device.swa_pagez", "--target: unknown metric", "--range: LOW 5"):
        assert fragment in result.output, result.output
    assert not (work / "out").exists()
