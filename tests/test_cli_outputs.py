"""What `run`, `compare` and `plot` write (docs/scenarios.md, docs/metrics.md), tiny scenarios."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from sim.engine.metrics import SUMMARY_KEYS
from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import Scenario
from tests.conftest import REPO, RUN_FILES, invoke, is_png, make_doc, ok, read_summary

DESIGN = REPO.parent / "shared" / "DESIGN.md"


# DESIGN 4.3, copied literally; `test_design_lists_the_same_keys` re-reads the DESIGN itself.
DESIGN_SUMMARY_KEYS = """
requests, prompt_tokens, device_hit_tokens, host_hit_tokens, prefetch_issued,
prefetch_success, prefetch_discarded, discard_rate, loops,
heal_rate, loop_length_mean, loop_length_max, time_to_heal_p50_s, l3_hit_tokens,
l3_loaded_tokens, recomputed_tokens, wasted_read_bytes, rewrite_pages, skipped_write_pages,
ttft_p50_s, ttft_p99_s, events, wall_s
"""
CONTRACT_KEYS = [k.strip() for k in DESIGN_SUMMARY_KEYS.split(",")]

N_REQUESTS = 60


def tiny_doc(**overrides: Any) -> dict[str, Any]:
    return make_doc(**{"workload.requests": N_REQUESTS, "duration_s": 60, **overrides})


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny scenario file in a fresh working directory (the cwd for the test)."""
    work = tmp_path / "work"
    work.mkdir()
    path = work / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_doc(), sort_keys=False), encoding="utf-8")
    monkeypatch.chdir(work)
    return path


# --- run ----------------------------------------------------------------------------------------


def test_run_writes_exactly_the_run_directory(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = ok(invoke("run", str(tiny), "--out", str(out)))
    assert set(os.listdir(out)) == RUN_FILES
    assert str(out) in result.stdout
    assert not Path("results").exists(), "--out given: nothing goes under results/"
    assert sorted(os.listdir(tmp_path)) == ["out", "work"], "no staging directory left behind"


def test_summary_has_every_contract_key(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    ok(invoke("run", str(tiny), "--out", str(out)))
    summary = read_summary(out)
    keys = list(summary)
    assert list(SUMMARY_KEYS) == CONTRACT_KEYS
    assert keys[: len(CONTRACT_KEYS)] == CONTRACT_KEYS, "contract keys first, in contract order"
    for key in CONTRACT_KEYS:
        value = summary[key]
        assert value is None or (isinstance(value, int | float) and not isinstance(value, bool)), (
            key,
            value,
        )
        if isinstance(value, float):
            assert math.isfinite(value), key
    assert summary["requests"] == N_REQUESTS
    assert summary["prompt_tokens"] > 0
    assert summary["events"] > 0
    assert summary["wall_s"] >= 0


def test_design_lists_the_same_keys():
    text = DESIGN.read_text(encoding="utf-8") if DESIGN.exists() else ""
    if text:
        match = re.search(r"Summary keys \(contract\):\s*`([^`]*)`", text)
        assert match, "the summary key list moved in DESIGN.md"
        parsed = [k.strip() for k in match.group(1).split(",")]
        assert parsed == CONTRACT_KEYS
    assert len(set(CONTRACT_KEYS)) == len(CONTRACT_KEYS) == 23


def test_run_tables_and_meta(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    ok(invoke("run", str(tiny), "--out", str(out), "--seed", "11"))
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == N_REQUESTS
    timeseries = pd.read_parquet(out / "timeseries.parquet")
    assert len(timeseries) > 0
    assert "t_s" in timeseries.columns
    assert timeseries["t_s"].is_monotonic_increasing
    for name in ("prefetches", "writes"):
        pd.read_parquet(out / f"{name}.parquet")  # readable, even when empty
    meta = json.loads((out / "meta.json").read_text())
    assert meta["seed"] == 11
    assert {"versions", "seed", "wall_s", "command"} <= set(meta)
    assert meta["versions"]["python"]
    assert isinstance(meta["command"], list)


def test_config_resolved_round_trips(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    ok(invoke("run", str(tiny), "--out", str(out)))
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    # defaults the YAML left out are written out in full
    assert "existence_cache" in resolved and "compute" in resolved
    assert resolved["storage"]["read_gbps"] == 10.0
    again = build_scenario(resolved, "config.resolved.yaml")
    assert isinstance(again, Scenario)
    assert again == load_scenario(tiny)


def test_resolved_config_of_a_trace_scenario_reruns_from_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A run directory's config must still find the trace when run again from elsewhere."""
    work = tmp_path / "work"
    work.mkdir()
    lines = [
        {"timestamp": i * 200, "input_length": 600, "output_length": 4, "hash_ids": [0, i + 1]}
        for i in range(8)
    ]
    (work / "trace.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    doc = tiny_doc(workload={"kind": "mooncake", "path": "trace.jsonl", "block_tokens": 512})
    (work / "trace.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.chdir(work)
    first = tmp_path / "first"
    ok(invoke("run", "trace.yaml", "--out", str(first)))
    assert read_summary(first)["requests"] == len(lines)
    monkeypatch.chdir(tmp_path)
    second = tmp_path / "second"
    result = invoke("run", str(first / "config.resolved.yaml"), "--out", str(second))
    assert result.exit_code == 0, result.stderr
    assert read_summary(second)["requests"] == len(lines)


def test_run_without_out_makes_a_new_directory_each_time(tiny: Path):
    first = ok(invoke("run", tiny.name))
    second = ok(invoke("run", tiny.name))
    root = Path("results") / "test"  # the scenario's name
    runs = sorted(root.iterdir())
    assert len(runs) == 2, runs
    assert all(d.is_dir() and set(os.listdir(d)) == RUN_FILES for d in runs)
    assert sorted(os.listdir(Path.cwd())) == ["results", "tiny.yaml"]
    assert os.listdir("results") == ["test"]
    for result in (first, second):
        wrote = result.stdout.strip().splitlines()[-1].removeprefix("wrote ").strip()
        assert Path(wrote).resolve().parent == root.resolve()
    assert read_summary(runs[0])["events"] == read_summary(runs[1])["events"], "same seed"


def test_run_out_existing_needs_force(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = invoke("run", str(tiny), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert "--force" in result.stderr and str(out) in result.stderr
    assert os.listdir(out) == ["keep.txt"], "a refused run must leave the directory alone"
    assert sorted(os.listdir(tmp_path)) == ["out", "work"]

    forced = invoke("run", str(tiny), "--out", str(out), "--force")
    assert forced.exit_code == 2, forced.output
    assert "not written by hicache-sim" in forced.stderr
    assert os.listdir(out) == ["keep.txt"], "--force never replaces a folder the tool did not write"

    ours = tmp_path / "ours"
    ok(invoke("run", str(tiny), "--out", str(ours)))
    (ours / "summary.json").write_text("stale")
    ok(invoke("run", str(tiny), "--out", str(ours), "--force"))
    assert set(os.listdir(ours)) == RUN_FILES, "--force replaces a result directory"
    assert (ours / "summary.json").read_text() != "stale"
    assert sorted(os.listdir(tmp_path)) == ["ours", "out", "work"]


def test_force_never_replaces_the_working_directory_or_follows_a_symlink(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    victim = tmp_path / "victim"
    ok(invoke("run", str(tiny), "--out", str(victim)))
    link = tmp_path / "link"
    link.symlink_to(victim)
    result = invoke("run", str(tiny), "--out", str(link), "--force")
    assert result.exit_code == 2 and "symbolic link" in result.stderr
    assert link.is_symlink() and set(os.listdir(victim)) == RUN_FILES
    monkeypatch.chdir(victim)
    for out in (".", str(tmp_path)):
        result = invoke("run", str(tiny), "--out", out, "--force")
        assert result.exit_code == 2, (out, result.output)
        assert "working directory" in result.stderr
    assert set(os.listdir(victim)) == RUN_FILES


def test_subprocess_run_end_to_end(tiny: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "run", tiny.name],
        cwd=tiny.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (Path(tiny.parent) / "results" / "test").iterdir()
    assert set(os.listdir(run_dir)) == RUN_FILES
    assert "prefetches" in proc.stdout and "summary.json" in proc.stdout
    meta = json.loads((run_dir / "meta.json").read_text())
    assert tiny.name in meta["command"]


# --- compare ------------------------------------------------------------------------------------


def test_compare_writes_csv_and_png(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    result = ok(invoke("compare", str(tiny), "--heal", "none,keep_pages", "--out", str(out)))
    assert is_png(out / "comparison.png")
    table = pd.read_csv(out / "comparison.csv")
    assert list(table["heal"]) == ["none", "keep_pages"], "one row per rule, in the given order"
    columns = list(table.columns)
    assert columns[0] == "heal"
    summaries = {h: read_summary(out / h) for h in ("none", "keep_pages")}
    summary_keys = list(summaries["none"])
    assert [c for c in columns[1:] if c != "scenario"] == summary_keys
    assert set(CONTRACT_KEYS) <= set(columns)
    for _, row in table.iterrows():
        summary = summaries[row["heal"]]
        for key in CONTRACT_KEYS:
            if key == "wall_s":
                continue
            if summary[key] is None:
                assert pd.isna(row[key]), key
            else:
                assert row[key] == pytest.approx(summary[key]), key
    for heal in ("none", "keep_pages"):
        assert set(os.listdir(out / heal)) == RUN_FILES
        assert yaml.safe_load((out / heal / "config.resolved.yaml").read_text())["heal"] == heal
    seeds = {
        yaml.safe_load((out / h / "config.resolved.yaml").read_text())["seed"] for h in summaries
    }
    assert len(seeds) == 1, "variants run on the same seed"
    assert "keep_pages" in result.stdout and "comparison.csv" in result.stdout


def test_compare_unknown_heal_rule_exits_2(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    result = invoke("compare", str(tiny), "--heal", "none,sometimes", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert "sometimes" in result.stderr
    assert not out.exists()
    assert not Path("results").exists()
    assert sorted(os.listdir(tmp_path)) == ["work"]


def test_compare_empty_heal_list_exits_2(tiny: Path, tmp_path: Path):
    result = invoke("compare", str(tiny), "--heal", " , ", "--out", str(tmp_path / "cmp"))
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "cmp").exists()


# --- plot ---------------------------------------------------------------------------------------


def test_plot_run_directory(tiny: Path, tmp_path: Path):
    out = tmp_path / "out"
    ok(invoke("run", str(tiny), "--out", str(out)))
    assert not (out / "timeseries.png").exists()
    result = ok(invoke("plot", str(out)))
    assert is_png(out / "timeseries.png")
    assert "timeseries.png" in result.stdout


@pytest.mark.parametrize(
    ("layout", "device_columns"),
    [
        ({"model.swa": None, "device.swa_pages": None, "storage.pools": {}}, ["device_kv_pages"]),
        (
            {"model.mamba": {"state_bytes": 1 << 20}, "device.mamba_slots": 16},
            ["device_kv_pages", "device_swa_pages", "device_mamba_slots"],
        ),
    ],
    ids=["kv-only", "kv-swa-mamba"],
)
def test_plot_a_run_of_any_pool_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict[str, Any], device_columns: list
):
    """The time series has a device column per pool of the model, and the plot draws them."""
    monkeypatch.chdir(tmp_path)
    doc = tiny_doc(**layout)
    for key in [k for k, v in layout.items() if v is None]:
        section, _, field = key.partition(".")
        doc[section].pop(field)
    path = tmp_path / "layout.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    out = tmp_path / "out"
    ok(invoke("run", str(path), "--out", str(out)))
    columns = pd.read_parquet(out / "timeseries.parquet").columns
    assert [c for c in columns if c.startswith("device_")] == device_columns
    ok(invoke("plot", str(out)))
    assert is_png(out / "timeseries.png")


def test_plot_directory_without_results_fails_cleanly(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("plot", str(empty))
    assert result.exit_code != 0
    assert "Traceback" not in result.stderr
    assert os.listdir(empty) == []


# --- reading back -------------------------------------------------------------------------------


def test_typed_readers_give_back_what_run_and_compare_wrote(tiny: Path, tmp_path: Path):
    from sim.results.layout import Kind, detect
    from sim.results.reading import read_compare, read_run

    run_dir = tmp_path / "run"
    ok(invoke("run", str(tiny), "--out", str(run_dir)))
    run = read_run(run_dir)
    assert detect(run_dir) is Kind.RUN
    assert run.summary == read_summary(run_dir)
    assert run.name == "test" and run.meta["seed"] == run.config["seed"]
    assert run.timeseries()["discards"].is_monotonic_increasing
    instances = run.instances()
    assert instances is not None and list(instances["requests"]) == [run.summary["requests"]]

    compare_dir = tmp_path / "compare"
    ok(invoke("compare", str(tiny), "--out", str(compare_dir)))
    compared = read_compare(compare_dir)
    assert detect(compare_dir) is Kind.COMPARE
    runs = compared.runs()
    assert list(runs) == compared.labels == list(compared.table[compared.column].astype(str))
    for label, variant in runs.items():
        row = compared.table[compared.table[compared.column].astype(str) == label].iloc[0]
        assert variant.config["heal"] == label
        assert variant.summary["prefetch_issued"] == row["prefetch_issued"]
