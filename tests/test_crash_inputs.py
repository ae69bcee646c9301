"""Inputs that used to crash with a traceback (exit 1) where exit 2 naming the file and the key
is due: bad values read by the device sizing before validation, and damaged result files
(docs/reliability.md, "Every input surface and the checks it gets")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, invoke

PRESET = REPO / "scenarios/presets/gpt_oss_120b.yaml"


def _sized(tmp_path: Path, key: str, value: Any) -> Path:
    doc = yaml.safe_load(PRESET.read_text())
    doc["device"] = {}
    doc["hardware"] = {"gpu": "h200"}
    node = doc
    *path, leaf = key.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[leaf] = value
    out = tmp_path / "sized.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("model.kv.bytes_per_token", 0, "model.kv.bytes_per_token"),
        ("model.kv.bytes_per_token", None, "model.kv.bytes_per_token"),
        ("model.kv.bytes_per_token", -5, "model.kv.bytes_per_token"),
        ("model.kv.bytes_per_token", "abc", "model.kv.bytes_per_token"),
        ("model.kv", 5, "model.kv"),
        ("model.kv", None, "model.kv"),
        ("server.tp_size", 0, "server.tp_size"),
        ("server.tp_size", "abc", "server.tp_size"),
        ("compute.chunk_tokens", "abc", "compute.chunk_tokens"),
        ("server.swa_full_tokens_ratio", "abc", "server.swa_full_tokens_ratio"),
    ],
)
def test_a_bad_sizing_input_exits_2_naming_its_key(
    tmp_path: Path, key: str, value: Any, named: str
) -> None:
    path = _sized(tmp_path, key, value)
    result = invoke("validate", str(path))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert f"{path}: {named}:" in result.stderr and "Traceback" not in result.stderr
    assert "TypeError" not in result.stderr and "device.kv_pages: required" not in result.stderr


def test_a_plan_axis_that_breaks_the_sizing_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = yaml.safe_load(PRESET.read_text())
    doc["device"] = {}
    doc["hardware"] = {"gpu": "h200"}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 1, "swa": 1}}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1}, "swa": {"capacity_gb": 1}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "plan", "p.yaml", "--axis", "model.kv.bytes_per_token=0", "--target",
        "discard_rate<=0.2", "--out", "o",
    )  # fmt: skip
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "model.kv.bytes_per_token" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "run"
    shutil.copytree(run, target)
    return target


@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_result_json_nested_3000_deep_exits_2(
    traced_run: Path, tmp_path: Path, command: str
) -> None:
    run = _copy(traced_run, tmp_path)
    (run / "summary.json").write_text('{"a":' * 3000 + "1" + "}" * 3000)
    result = invoke(command, str(run))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "summary.json" in result.stderr and "nested too deeply" in result.stderr


@pytest.mark.parametrize("bad", ['"many"', "[1, 2]", "Infinity", "NaN", "true"])
def test_a_summary_count_that_is_not_a_finite_number_exits_2(
    traced_run: Path, tmp_path: Path, bad: str
) -> None:
    import json

    run = _copy(traced_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    text = json.dumps(summary).replace(
        f'"prefetch_discarded": {summary["prefetch_discarded"]}', f'"prefetch_discarded": {bad}'
    )
    (run / "summary.json").write_text(text)
    result = invoke("report", str(run))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "summary.json: prefetch_discarded: not a finite number" in result.stderr


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_time_series_holding_inf_exits_2(
    traced_run: Path, tmp_path: Path, command: str, value: float
) -> None:
    import pandas as pd

    run = _copy(traced_run, tmp_path)
    table = pd.read_parquet(run / "timeseries.parquet")
    table["instance"] = table["instance"].astype(float)
    table.loc[len(table) // 2, "instance"] = value
    table.to_parquet(run / "timeseries.parquet")
    result = invoke(command, str(run))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "timeseries.parquet" in result.stderr and "not finite" in result.stderr


def test_string_cells_in_a_comparison_table_exit_2(tmp_path: Path) -> None:
    import pandas as pd

    from tests.conftest import make_doc

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(duration_s=20, **{"workload.requests": 20})))
    assert invoke("compare", str(path), "--out", str(tmp_path / "c")).exit_code == 0
    table = pd.read_csv(tmp_path / "c" / "comparison.csv")
    table["ttft_p99_s"] = table["ttft_p99_s"].astype(object)
    table.loc[0, "ttft_p99_s"] = "abc"
    table.to_csv(tmp_path / "c" / "comparison.csv", index=False)
    result = invoke("report", str(tmp_path / "c"))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "comparison.csv" in result.stderr and "ttft_p99_s" in result.stderr
