"""Hostile result files the plot and report commands read: each exits 2 with a message naming
the file, never a traceback, and writes nothing (docs/reliability.md, "Every input surface and
the checks it gets"). The cases not covered by test_crash_inputs: JSON nested 3,000 deep in
every JSON file of a run, comparison and sweep; a bad summary count under `plot`; a sweep
whose points table does not hold its grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import invoke, make_doc

DEEP = '{"a":' * 3000 + "1" + "}" * 3000


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small comparison and sweep directory (copy one before damaging it)."""
    base = tmp_path_factory.mktemp("hostile-studies")
    doc = make_doc(duration_s=20, **{"workload.requests": 20})
    doc["sweep"] = {"seeds": 1, "grid": {"storage.read_gbps": [5.0, 10.0]}}
    path = base / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    for kind, args in {
        "compare": ["compare", str(path), "--heal", "none,keep_pages"],
        "sweep": ["sweep", str(path), "--executor", "serial"],
    }.items():
        assert invoke(*args, "--out", str(base / kind)).exit_code == 0, kind
    return {"compare": base / "compare", "sweep": base / "sweep"}


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _refused(command: str, directory: Path, named: str, *words: str) -> None:
    before = sorted(p.relative_to(directory) for p in directory.rglob("*"))
    result = invoke(command, str(directory))
    assert result.exit_code == 2, (command, result.output, result.stderr)
    assert named in result.stderr and "Traceback" not in result.output + result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert sorted(p.relative_to(directory) for p in directory.rglob("*")) == before


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("name", ["meta.json"])
def test_a_run_s_json_nested_3000_deep_exits_2(
    traced_run: Path, tmp_path: Path, command: str, name: str
) -> None:
    run = _copy(traced_run, tmp_path)
    (run / name).write_text(DEEP)
    _refused(command, run, name, "nested too deeply")


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize(("kind", "name"), [("compare", "variants.json"), ("sweep", "sweep.json")])
def test_a_study_s_json_nested_3000_deep_exits_2(
    studies: dict[str, Path], tmp_path: Path, command: str, kind: str, name: str
) -> None:
    study = _copy(studies[kind], tmp_path)
    (study / name).write_text(DEEP)
    _refused(command, study, name, "nested too deeply")


@pytest.mark.parametrize("bad", ['"many"', "[1, 2]", "Infinity"])
def test_plot_refuses_a_summary_count_that_is_not_a_finite_number(
    traced_run: Path, tmp_path: Path, bad: str
) -> None:
    run = _copy(traced_run, tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["prefetch_discarded"] = "@BAD@"
    (run / "summary.json").write_text(json.dumps(summary).replace('"@BAD@"', bad))
    _refused("plot", run, "summary.json", "prefetch_discarded", "not a finite number")


@pytest.mark.parametrize("command", ["plot", "report"])
def test_string_cells_in_a_comparison_table_exit_2_under_plot_too(
    studies: dict[str, Path], tmp_path: Path, command: str
) -> None:
    import pandas as pd

    study = _copy(studies["compare"], tmp_path)
    table = pd.read_csv(study / "comparison.csv")
    table["discard_rate"] = table["discard_rate"].astype(object)
    table.loc[0, "discard_rate"] = "abc"
    table.to_csv(study / "comparison.csv", index=False)
    _refused(command, study, "comparison.csv", "discard_rate")


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_sweep_grid_key_its_points_lack_exits_2(
    studies: dict[str, Path], tmp_path: Path, command: str
) -> None:
    """The plots look each swept key up in points.csv: one the table lacks is refused."""
    study = _copy(studies["sweep"], tmp_path)
    meta = json.loads((study / "sweep.json").read_text())
    meta["grid"] = {"storage.write_gbps": [1.0, 2.0]}
    (study / "sweep.json").write_text(json.dumps(meta))
    _refused(command, study, "points.csv", "lacks the columns storage.write_gbps")


@pytest.mark.parametrize("command", ["plot", "report"])
def test_swept_numbers_that_are_not_numbers_in_the_points_exit_2(
    studies: dict[str, Path], tmp_path: Path, command: str
) -> None:
    """The grid sweeps numbers, so the plots put its column on an axis: a cell that is no
    number is refused."""
    import pandas as pd

    study = _copy(studies["sweep"], tmp_path)
    table = pd.read_csv(study / "points.csv")
    table["storage.read_gbps"] = table["storage.read_gbps"].astype(object)
    table.loc[0, "storage.read_gbps"] = "fast"
    table.to_csv(study / "points.csv", index=False)
    _refused(command, study, "points.csv", "storage.read_gbps", "not numbers")


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("values", [["fast", "slow"], [5.0, "slow"]])
def test_a_sweep_grid_of_values_that_are_not_numbers_is_read_as_named_settings(
    studies: dict[str, Path], tmp_path: Path, command: str, values: list[Any]
) -> None:
    """A grid may sweep names (heal rules, releases): values that are not all numbers are
    groups, not an axis, whatever the points hold; the page or the plots are drawn."""
    study = _copy(studies["sweep"], tmp_path)
    meta = json.loads((study / "sweep.json").read_text())
    meta["grid"] = {"storage.read_gbps": values}
    (study / "sweep.json").write_text(json.dumps(meta))
    result = invoke(command, str(study))
    assert result.exit_code == 0, (result.output, result.stderr)
    assert "Traceback" not in result.output
