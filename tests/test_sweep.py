"""Sweeps and capacity answers on tiny scenarios: planning (grid × seeds, common random numbers),
executor independence (serial, process pool, dask), per-point statistics, resuming, failing
points, the sweep plots and the capacity search (scan and bisection).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import Result
from scipy import stats

from sim.engine.runner import run
from sim.outputs.plot_sweep import plot_sweep
from sim.scenario.loading import ScenarioError, build_scenario, load_scenario
from sim.studies.capacity import CapacitySearch
from sim.studies.grid import Task, plan, sweep_seeds
from sim.studies.sweep import run_sweep
from tests.conftest import TINY_SWEEP, invoke, is_png, make_doc, ok

CAP = "storage.pools.swa.capacity_gb"
# Small device and host, 60 prefixes of 32 pages: the SWA storage pool's capacity decides how
# many prefetches find their SWA tail evicted (discard_rate falls from 1 to 0 over 0.02..0.2 GB).
TINY = TINY_SWEEP
GRID = {CAP: [0.05, 0.1], "heal": ["none", "keep_pages"]}
SEEDS = 3
BLOCK = 512


def sweep_doc(grid: dict[str, list[Any]], seeds: int = SEEDS, **overrides: Any) -> dict[str, Any]:
    doc = make_doc(**{**TINY, **overrides})
    doc["sweep"] = {"seeds": seeds, "grid": grid}
    return doc


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def subprocess_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def runs_without_wall(directory: Path) -> pd.DataFrame:
    return pd.read_parquet(directory / "runs.parquet").drop(columns=["wall_s"])


def task_records(directory: Path) -> dict[str, dict[str, Any]]:
    """Every tasks/*.json record by file name, without the (timing) wall_s."""
    records = {}
    for path in sorted((directory / "tasks").glob("*.json")):
        record = json.loads(path.read_text())
        if record["summary"] is not None:
            record["summary"].pop("wall_s")
        records[path.name] = record
    return records


def sweep_meta(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "sweep.json").read_text())


def plan_file(path: Path, seeds: int | None = None) -> list[Task]:
    return plan(load_scenario(path), str(path), seeds)


def same_value(a: Any, b: Any) -> bool:
    """Equality where None and NaN (a summary's None read back from parquet) are the same."""
    missing_a = a is None or (isinstance(a, float) and math.isnan(a))
    missing_b = b is None or (isinstance(b, float) and math.isnan(b))
    if missing_a or missing_b:
        return missing_a and missing_b
    return bool(a == b)


def is_svg(path: Path) -> bool:
    return path.is_file() and b"<svg" in path.read_bytes()[:2000]


@pytest.fixture(scope="module")
def base_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished serial CLI sweep of GRID × 3 seeds: (scenario file, sweep directory)."""
    root = tmp_path_factory.mktemp("base")
    scenario = write_yaml(root / "sweep.yaml", sweep_doc(GRID))
    out = root / "out"
    result = ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    assert "12 runs (12 computed, 0 reused)" in result.output
    return scenario, out


# --- plan ----------------------------------------------------------------------------------------


def test_plan_is_grid_times_seeds_with_the_same_seeds_at_every_point():
    grid = {CAP: [0.05, 0.1, 0.2], "heal": ["none", "keep_pages"]}
    scenario = build_scenario(sweep_doc(grid), "s.yaml")
    tasks = plan(scenario, "s.yaml")
    assert len(tasks) == 3 * 2 * SEEDS
    assert len({t.key for t in tasks}) == len(tasks), "every task has its own key"

    by_point: dict[int, list[Task]] = {}
    for task in tasks:
        by_point.setdefault(task.point, []).append(task)
    assert sorted(by_point) == list(range(6))
    seed_lists = {
        tuple(t.seed for t in sorted(ts, key=lambda t: t.seed_index)) for ts in by_point.values()
    }
    assert len(seed_lists) == 1, "common random numbers: the same seeds at every grid point"
    (seeds,) = seed_lists
    assert len(set(seeds)) == SEEDS
    assert list(seeds) == sweep_seeds(scenario.seed, SEEDS)
    assert all(sorted(t.seed_index for t in ts) == [0, 1, 2] for ts in by_point.values())

    # the grid is the product in key order, each value applied to the task's document
    combos = [dict(ts[0].values) for _, ts in sorted(by_point.items())]
    assert combos == [{CAP: c, "heal": h} for c in grid[CAP] for h in grid["heal"]]
    for task in tasks:
        values = dict(task.values)
        assert task.doc["storage"]["pools"]["swa"]["capacity_gb"] == values[CAP]
        assert task.doc["heal"] == values["heal"]
        assert task.doc["seed"] == task.seed
        assert task.doc.get("sweep") is None, "a task is a plain scenario, not a sweep"
        assert build_scenario(task.doc).workload.requests == TINY["workload.requests"]


def test_plan_seeds_come_from_the_scenario_seed():
    def seeds_of(seed: int, n: int | None = None) -> list[int]:
        scenario = build_scenario(sweep_doc(GRID, seed=seed), "s.yaml")
        tasks = plan(scenario, "s.yaml", n)
        return [t.seed for t in tasks if t.point == 0]

    assert seeds_of(1) == seeds_of(1), "deterministic"
    assert set(seeds_of(1)).isdisjoint(seeds_of(2)), "another scenario seed, other seeds"
    assert 1 not in seeds_of(1), "replication seeds are children of the seed, not the seed"
    five = seeds_of(1, 5)
    assert len(five) == 5
    assert five[:SEEDS] == seeds_of(1), "more seeds extend the list (old runs stay reusable)"


def test_plan_keys_do_not_depend_on_the_order_of_the_yaml():
    a = plan(build_scenario(sweep_doc(GRID), "a.yaml"), "a.yaml")
    doc = sweep_doc(GRID)
    doc = {k: doc[k] for k in reversed(list(doc))}
    b = plan(build_scenario(doc, "b.yaml"), "b.yaml")
    assert [t.key for t in a] == [t.key for t in b]


@pytest.mark.parametrize(
    ("grid", "key"),
    [
        ({CAP: [0.1, -1]}, f"sweep.grid.{CAP}"),
        ({"storage.pools.swa.capacity_gbb": [0.1]}, "sweep.grid.storage.pools.swa.capacity_gbb"),
        ({"heal": ["keep_pages", "bogus"]}, "sweep.grid.heal"),
        ({"no_such_key": [1]}, "sweep.grid.no_such_key"),
    ],
)
def test_plan_bad_grid_value_is_a_scenario_error(grid: dict[str, list[Any]], key: str):
    scenario = build_scenario(sweep_doc(grid), "s.yaml")
    with pytest.raises(ScenarioError) as info:
        plan(scenario, "s.yaml")
    assert info.value.key == key
    assert info.value.source == "s.yaml"


def test_plan_without_sweep_section_is_a_scenario_error():
    with pytest.raises(ScenarioError) as info:
        plan(build_scenario(make_doc(**TINY), "s.yaml"), "s.yaml")
    assert info.value.key == "sweep"


def test_cli_bad_grid_value_exits_2_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    work = tmp_path / "work"
    scenario = write_yaml(work / "bad.yaml", sweep_doc({CAP: [0.1, 0.2, -0.5], "heal": ["none"]}))
    monkeypatch.chdir(work)
    out = tmp_path / "out"
    for extra in (["--out", str(out)], []):  # an explicit directory, and the default results/
        result = invoke("sweep", str(scenario), "--executor", "serial", *extra)
        assert result.exit_code == 2, (result.output, result.stderr)
        assert f"sweep.grid.{CAP}" in result.stderr
        assert "Traceback" not in result.stderr
    assert not out.exists()
    assert sorted(os.listdir(work)) == ["bad.yaml"]
    assert sorted(os.listdir(tmp_path)) == ["work"]


# --- executors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", ["process", "dask"])
def test_executors_give_identical_runs(
    base_sweep: tuple[Path, Path], tmp_path: Path, executor: str
):
    scenario, serial = base_sweep
    out = tmp_path / executor
    proc = subprocess_sim(
        "sweep", str(scenario), "--executor", executor, "--workers", "2", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    meta = sweep_meta(out)
    assert (meta["executor"], meta["workers"], meta["computed"], meta["failed"]) == (
        executor,
        2,
        12,
        [],
    )
    expected = runs_without_wall(serial)
    assert expected["error"].isna().all()
    pd.testing.assert_frame_equal(runs_without_wall(out), expected)
    assert task_records(out) == task_records(serial), "loop lengths and summaries too"
    pd.testing.assert_frame_equal(
        pd.read_csv(out / "points.csv").query("metric != 'wall_s'").reset_index(drop=True),
        pd.read_csv(serial / "points.csv").query("metric != 'wall_s'").reset_index(drop=True),
    )


def test_run_sweep_process_pool_matches_serial(tmp_path: Path):
    tasks = plan(build_scenario(sweep_doc({CAP: [0.05, 0.2]}, seeds=2), "s.yaml"), "s.yaml")
    serial = run_sweep(tasks, tmp_path / "serial", executor="serial", progress=False)
    pool = run_sweep(tasks, tmp_path / "pool", executor="process", workers=2, progress=False)
    assert (serial.computed, serial.reused, pool.computed, pool.reused) == (4, 0, 4, 0)
    pd.testing.assert_frame_equal(
        serial.runs.drop(columns=["wall_s"]), pool.runs.drop(columns=["wall_s"])
    )
    assert list(pool.runs["point"]) == [0, 0, 1, 1], "sorted by point and seed, not completion"
    assert list(pool.runs["seed_index"]) == [0, 1, 0, 1]


def test_a_task_equals_running_its_scenario_directly(base_sweep: tuple[Path, Path]):
    scenario_path, out = base_sweep
    tasks = plan_file(scenario_path)
    task = next(t for t in tasks if t.point == 3 and t.seed_index == 1)
    values = dict(task.values)
    assert values == {CAP: 0.1, "heal": "keep_pages"}

    # the same scenario built by hand: base document, the point's values, the task's seed
    direct = run(build_scenario(make_doc(**TINY, **values, seed=task.seed))).summary
    from_doc = run(build_scenario(task.doc)).summary
    record = json.loads((out / "tasks" / f"{task.key}.json").read_text())
    assert record["error"] is None
    for summary in (direct, from_doc, record["summary"]):
        summary.pop("wall_s")
    assert direct == from_doc == record["summary"]
    assert direct["prefetch_issued"] > 0, "the tiny scenario does exercise prefetch"

    runs = pd.read_parquet(out / "runs.parquet")
    (row,) = runs[(runs["point"] == 3) & (runs["seed_index"] == 1)].to_dict("records")
    assert row["seed"] == task.seed and row["key"] == task.key
    assert all(same_value(row[k], v) for k, v in direct.items()), (row, direct)


# --- points.csv ----------------------------------------------------------------------------------


def test_points_csv_statistics_match_a_hand_computation(base_sweep: tuple[Path, Path]):
    _, out = base_sweep
    runs = pd.read_parquet(out / "runs.parquet")
    points = pd.read_csv(out / "points.csv")
    assert {"point", CAP, "heal", "metric", "mean", "std", "n", "ci_low", "ci_high"} <= set(
        points.columns
    )
    assert not points.duplicated(["point", "metric"]).any()
    metrics = set(points["metric"])
    assert {"discard_rate", "heal_rate", "requests", "prefetch_issued"} <= metrics
    assert not metrics & {"point", "seed_index", "seed", "key", "error", CAP}
    assert sorted(points["point"].unique()) == [0, 1, 2, 3]

    spread = undefined = 0
    for point, group in runs.groupby("point"):
        row = points[(points["point"] == point) & (points["metric"] == "discard_rate")].iloc[0]
        assert row[CAP] == group[CAP].iloc[0] and row["heal"] == group["heal"].iloc[0]
        x = group["discard_rate"].to_numpy(dtype=float)
        n = len(x)
        mean, std = x.mean(), x.std(ddof=1)
        half = stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
        assert row["n"] == n == SEEDS
        assert row["mean"] == pytest.approx(mean, rel=1e-12, abs=1e-15)
        assert row["std"] == pytest.approx(std, rel=1e-9, abs=1e-15)
        # the t interval, cut at a rate's range [0, 1]
        assert row["ci_low"] == pytest.approx(max(mean - half, 0.0), rel=1e-9, abs=1e-12)
        assert row["ci_high"] == pytest.approx(min(mean + half, 1.0), rel=1e-9, abs=1e-12)
        spread += half > 0
        # a metric that is sometimes undefined (no loops: heal_rate None) counts only its values
        (heal,) = points[(points["point"] == point) & (points["metric"] == "heal_rate")].index
        defined = group["heal_rate"].dropna()
        assert points.loc[heal, "n"] == len(defined)
        if len(defined):
            assert points.loc[heal, "mean"] == pytest.approx(defined.mean())
        else:
            assert math.isnan(points.loc[heal, "mean"])
        undefined += len(defined) < SEEDS
    assert spread > 0, "the check is not only over zero-width intervals"
    assert undefined > 0, "some heal_rate is None (no loops), and is left out of n"


# --- resume --------------------------------------------------------------------------------------


def test_rerun_computes_only_the_missing_runs(base_sweep: tuple[Path, Path], tmp_path: Path):
    scenario, done = base_sweep
    out = tmp_path / "resumed"
    shutil.copytree(done, out)
    before = runs_without_wall(out)
    records = sorted((out / "tasks").glob("*.json"))
    assert len(records) == 12
    deleted = records[::3]
    kept = {p.name: p.read_bytes() for p in records if p not in deleted}
    for path in deleted:
        path.unlink()

    result = ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    assert f"12 runs ({len(deleted)} computed, {12 - len(deleted)} reused)" in result.output
    meta = sweep_meta(out)
    assert (meta["tasks"], meta["computed"], meta["reused"]) == (
        12,
        len(deleted),
        12 - len(deleted),
    )
    pd.testing.assert_frame_equal(runs_without_wall(out), before)
    assert all((out / "tasks" / name).read_bytes() == data for name, data in kept.items()), (
        "reused records are not rewritten"
    )

    # nothing missing: nothing computed
    ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    assert (sweep_meta(out)["computed"], sweep_meta(out)["reused"]) == (0, 12)

    # more seeds: only the new seed is run at each of the 4 points
    ok(invoke("sweep", str(scenario), "--executor", "serial", "--seeds", "4", "--out", str(out)))
    assert (sweep_meta(out)["tasks"], sweep_meta(out)["computed"]) == (16, 4)
    pd.testing.assert_frame_equal(
        runs_without_wall(out).query("seed_index < 3").reset_index(drop=True), before
    )


def test_a_killed_sweep_resumes(tmp_path: Path):
    # runs of ~0.1-0.3 s, so that the serial sweep is still busy when the first record appears
    big = {"workload.requests": 2000, "duration_s": 600}
    scenario = write_yaml(tmp_path / "big.yaml", sweep_doc(GRID, seeds=2, **big))
    out = tmp_path / "out"
    total = len(plan_file(scenario))
    assert total == 8
    command = [sys.executable, "-m", "sim", "sweep", str(scenario), "--executor", "serial"]
    proc = subprocess.Popen(
        [*command, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    staging = tmp_path / ".out.partial"
    try:
        deadline = time.monotonic() + 120
        while not list((staging / "tasks").glob("*.json")):
            assert proc.poll() is None, "the sweep ended before a record was seen"
            assert time.monotonic() < deadline, "no task record appeared"
            time.sleep(0.005)
        assert proc.poll() is None
        proc.kill()
        assert proc.wait(timeout=30) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    finished = len(list((staging / "tasks").glob("*.json")))
    assert 1 <= finished < total
    assert not out.exists(), "a killed sweep leaves no result directory, only its hidden staging"

    result = ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    meta = sweep_meta(out)
    assert meta["computed"] == total - finished < total
    assert meta["reused"] == finished
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == total and runs["error"].isna().all()
    assert f"({total - finished} computed, {finished} reused)" in result.output
    assert not staging.exists()


# --- failing points ------------------------------------------------------------------------------


def trace_lines(n: int = 80) -> list[str]:
    lines = []
    for i in range(n):
        prefix = (i * 7) % 20
        hash_ids = [prefix * 100 + j for j in range(4)]
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 300,
                    "input_length": 4 * BLOCK,
                    "output_length": 16,
                    "hash_ids": hash_ids,
                }
            )
        )
    return lines


def write_trace(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def mooncake_sweep(directory: Path, paths: list[str], base_path: str = "good.jsonl") -> Path:
    doc = sweep_doc({"workload.path": paths, "heal": ["none", "keep_pages"]}, seeds=2)
    doc["workload"] = {"kind": "mooncake", "path": base_path, "block_tokens": BLOCK}
    return write_yaml(directory / "mooncake.yaml", doc)


def test_a_failing_point_is_recorded_and_the_others_finish(tmp_path: Path):
    good = write_trace(tmp_path / "good.jsonl", trace_lines())
    lines = trace_lines()
    # line 41: 2 hash ids where 2048 tokens need 4: the schema is fine, the run raises midway
    lines[40] = json.dumps(
        {"timestamp": 40 * 300, "input_length": 4 * BLOCK, "output_length": 16, "hash_ids": [1, 2]}
    )
    bad = write_trace(tmp_path / "bad.jsonl", lines)
    scenario = mooncake_sweep(tmp_path, [str(good), str(bad)])
    out = tmp_path / "out"
    result = invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out))
    assert result.exit_code == 1, (result.output, result.stderr)

    failed_lines = [ln for ln in result.stderr.splitlines() if ln.startswith("failed:")]
    assert len(failed_lines) == 4, result.stderr
    assert all("bad.jsonl" in ln and "line 41" in ln for ln in failed_lines)
    assert "good.jsonl" not in "\n".join(failed_lines)

    meta = sweep_meta(out)
    assert meta["tasks"] == 8
    assert sorted({f["point"] for f in meta["failed"]}) == [2, 3]
    assert all(f["values"]["workload.path"] == str(bad) for f in meta["failed"])
    assert all("line 41" in f["error"] for f in meta["failed"])

    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 8
    bad_rows = runs[runs["workload.path"] == str(bad)]
    good_rows = runs[runs["workload.path"] == str(good)]
    assert bad_rows["error"].str.contains("line 41").all()
    assert bad_rows["requests"].isna().all()
    assert good_rows["error"].isna().all()
    assert (good_rows["requests"] == 80).all()
    points = pd.read_csv(out / "points.csv")
    assert sorted(points["point"].unique()) == [0, 1], "failed runs make no statistics"
    record = json.loads(next((out / "tasks").glob("*.json")).read_text())
    assert {"summary", "error", "traceback", "loop_lengths"} <= set(record)

    # fix the trace: a rerun retries exactly the failed runs
    shutil.copy(good, bad)
    ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    assert (sweep_meta(out)["computed"], sweep_meta(out)["failed"]) == (4, [])


def test_a_sweep_whose_runs_all_fail_still_names_the_failures(tmp_path: Path):
    good = write_trace(tmp_path / "good.jsonl", trace_lines())
    lines = trace_lines()
    lines[40] = "{not json"
    bad = write_trace(tmp_path / "bad.jsonl", lines)
    scenario = mooncake_sweep(tmp_path, [str(bad)], base_path=str(good))
    out = tmp_path / "out"
    result = invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out))
    assert result.exit_code == 1, (result.output, result.stderr)
    assert len(sweep_meta(out)["failed"]) == 4
    failed_lines = [ln for ln in result.stderr.splitlines() if ln.startswith("failed:")]
    assert len(failed_lines) == 4, result.stderr


def test_relative_trace_paths_in_the_grid_are_relative_to_the_scenario_file(tmp_path: Path):
    scen_dir = tmp_path / "scenarios"
    scen_dir.mkdir()
    write_trace(scen_dir / "good.jsonl", trace_lines())
    write_trace(scen_dir / "other.jsonl", trace_lines(60))
    scenario = mooncake_sweep(scen_dir, ["good.jsonl", "other.jsonl"])
    base = load_scenario(scenario)
    assert base.workload.path == str(scen_dir / "good.jsonl")  # type: ignore[union-attr]
    paths = {t.doc["workload"]["path"] for t in plan_file(scenario)}
    assert paths == {str(scen_dir / "good.jsonl"), str(scen_dir / "other.jsonl")}


# --- plots ---------------------------------------------------------------------------------------


def test_plot_sweep_of_a_numeric_by_heal_grid(base_sweep: tuple[Path, Path], tmp_path: Path):
    _, done = base_sweep
    for stem in ("sweep_curves", "loop_ccdf"):  # the CLI already drew them
        assert is_png(done / f"{stem}.png") and is_svg(done / f"{stem}.svg")
    out = tmp_path / "copy"
    shutil.copytree(done, out)
    for path in [*out.glob("*.png"), *out.glob("*.svg")]:
        path.unlink()
    paths = plot_sweep(out)
    names = {p.name for p in paths}
    assert names == {"sweep_curves.png", "sweep_curves.svg", "loop_ccdf.png", "loop_ccdf.svg"}
    assert all(is_png(p) for p in paths if p.suffix == ".png")
    assert all(is_svg(p) for p in paths if p.suffix == ".svg")
    assert not list(out.glob("heatmap_*")), "a 1-D numeric grid has no heatmap"


def two_d_sweep(tmp_path: Path) -> Path:
    doc = sweep_doc({CAP: [0.05, 0.2], "device.swa_pages": [200, 400]}, seeds=2)
    doc["sweep"]["target"] = "discard_rate<=0.3"
    return write_yaml(tmp_path / "two_d.yaml", doc)


def test_plot_sweep_heatmap_of_a_2d_grid_for_the_target_metric(tmp_path: Path):
    tasks = plan_file(two_d_sweep(tmp_path))
    out = tmp_path / "out"
    grid = {CAP: [0.05, 0.2], "device.swa_pages": [200, 400]}
    run_sweep(tasks, out, executor="serial", progress=False, provenance={"grid": grid})
    names = {p.name for p in plot_sweep(out, target="discard_rate<=0.3")}
    assert {"heatmap_discard_rate.png", "heatmap_discard_rate.svg", "sweep_curves.png"} <= names
    assert is_png(out / "heatmap_discard_rate.png")


def test_cli_sweep_heatmap_uses_the_scenario_target(tmp_path: Path):
    scenario = two_d_sweep(tmp_path)
    out = tmp_path / "out"
    result = ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    assert is_png(out / "sweep_curves.png") and is_png(out / "loop_ccdf.png")
    heatmaps = sorted(p.name for p in out.glob("heatmap_*.png"))
    assert heatmaps == ["heatmap_discard_rate.png"], (heatmaps, result.output)


def test_cli_sweep_ends_with_a_table_of_its_grid_points(tmp_path: Path):
    """Like capacity's answer, a sweep's result is printed: a row per grid point, its swept
    values and the main summary keys' means (± the half-width of the 95 % interval)."""
    out = tmp_path / "out"
    result = ok(
        invoke("sweep", str(two_d_sweep(tmp_path)), "--executor", "serial", "--out", str(out))
    )
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["point"])
    header, rows = lines[start].split(), lines[start + 1 : start + 5]
    assert header[:3] == ["point", CAP, "device.swa_pages"] and "discard_rate" in header
    assert lines[start + 5].startswith("8 runs (8 computed"), "the table comes before the total"
    points = pd.read_csv(out / "points.csv")
    column = header.index("discard_rate")
    for row in rows:
        cells = [c for c in row.split("  ") if c.strip()]
        point = int(cells[0])
        mean = points[(points["point"] == point) & (points["metric"] == "discard_rate")]["mean"]
        assert cells[column].strip().split(" ± ")[0] == f"{mean.iloc[0]:.4g}", row


# --- capacity ------------------------------------------------------------------------------------

CAP_VALUES = [0.02, 0.05, 0.1, 0.2, 0.4]
CAP_TARGET = "discard_rate<=0.2"


def capacity_cli(
    scenario: Path, out: Path, target: str, *selection: str, seeds: int | None = SEEDS
) -> Result:
    """`hicache-sim capacity` on the serial executor with CAP as the parameter."""
    args = ["capacity", str(scenario), "--param", CAP, "--target", target, *selection]
    if seeds is not None:
        args += ["--seeds", str(seeds)]
    return invoke(*args, "--executor", "serial", "--out", str(out))


@pytest.fixture(scope="module")
def capacity_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """A plain sweep over CAP_VALUES (heal keep_pages) and the answer read from its points.csv."""
    root = tmp_path_factory.mktemp("capacity")
    scenario = write_yaml(root / "cap.yaml", sweep_doc({CAP: CAP_VALUES}))
    out = root / "sweep"
    ok(invoke("sweep", str(scenario), "--executor", "serial", "--out", str(out)))
    points = pd.read_csv(out / "points.csv")
    rate = points[points["metric"] == "discard_rate"].sort_values(CAP)
    assert list(rate[CAP]) == CAP_VALUES and (rate["n"] == SEEDS).all()
    assert rate["mean"].is_monotonic_decreasing, "the metric improves with capacity"
    meeting = rate[rate["ci_high"] <= 0.2]
    answer = float(meeting[CAP].min())
    assert CAP_VALUES[0] < answer < CAP_VALUES[-1], "the answer is inside the grid"
    below = rate[rate[CAP] < answer]
    assert (below["ci_high"] > 0.2).all()
    return scenario, out, answer


def test_capacity_scan_agrees_with_the_sweep(
    capacity_sweep: tuple[Path, Path, float], tmp_path: Path
):
    scenario_path, sweep_out, expected = capacity_sweep
    scenario = load_scenario(scenario_path).model_copy(update={"sweep": None})
    out = tmp_path / "scan"
    search = CapacitySearch(
        scenario,
        str(scenario_path),
        CAP,
        CAP_TARGET,
        SEEDS,
        out,
        executor="serial",
        progress=False,
    )
    answer = search.scan(list(reversed(CAP_VALUES)))
    assert answer.answer == expected
    assert answer.largest_failing == max(v for v in CAP_VALUES if v < expected)
    assert [e.value for e in answer.evaluations] == CAP_VALUES

    points = pd.read_csv(sweep_out / "points.csv")
    rate = points[points["metric"] == "discard_rate"].set_index(CAP)
    for ev in answer.evaluations:
        assert (ev.n, ev.errors) == (SEEDS, 0)
        assert ev.mean == pytest.approx(rate.loc[ev.value, "mean"], rel=1e-12, abs=1e-15)
        assert ev.ci_low == pytest.approx(rate.loc[ev.value, "ci_low"], rel=1e-9, abs=1e-12)
        assert ev.ci_high == pytest.approx(rate.loc[ev.value, "ci_high"], rel=1e-9, abs=1e-12)
        assert ev.meets == (ev.ci_high <= 0.2)
    # the same seeds and documents as the sweep: the very same task records
    assert {p.name for p in (out / "tasks").glob("*.json")} == {
        p.name for p in (sweep_out / "tasks").glob("*.json")
    }


def test_cli_capacity_values_agrees_with_the_sweep(
    capacity_sweep: tuple[Path, Path, float], tmp_path: Path
):
    scenario, _, expected = capacity_sweep
    out = tmp_path / "cap"
    values = ",".join(str(v) for v in CAP_VALUES)
    result = ok(capacity_cli(scenario, out, CAP_TARGET, "--values", values))
    saved = json.loads((out / "capacity.json").read_text())
    assert saved["answer"] == expected
    assert saved["largest_failing"] == max(v for v in CAP_VALUES if v < expected)
    assert (saved["param"], saved["target"], saved["seeds"]) == (CAP, CAP_TARGET, SEEDS)
    assert saved["statement"] in result.output
    evaluations = pd.read_csv(out / "evaluations.csv")
    assert list(evaluations["value"]) == CAP_VALUES
    assert list(evaluations["meets"]) == [v >= expected for v in CAP_VALUES]
    assert (evaluations["n"] == SEEDS).all()


def test_cli_capacity_range_bisects_to_a_meeting_value(
    capacity_sweep: tuple[Path, Path, float], tmp_path: Path
):
    scenario, _, _ = capacity_sweep
    out = tmp_path / "bisect"
    low, high = 0.02, 0.4
    ok(capacity_cli(scenario, out, CAP_TARGET, "--range", str(low), str(high)))
    saved = json.loads((out / "capacity.json").read_text())
    answer, failing = saved["answer"], saved["largest_failing"]
    assert answer is not None and failing is not None
    assert low <= failing < answer <= high
    assert answer - failing <= (high - low) / 64 + 1e-12, "bisected to the default resolution"

    evaluations = pd.read_csv(out / "evaluations.csv").set_index("value")
    assert len(evaluations) > 3, "it bisected, not just checked the ends"
    assert evaluations.loc[answer, "meets"] and evaluations.loc[answer, "ci_high"] <= 0.2
    assert not evaluations.loc[failing, "meets"] and evaluations.loc[failing, "ci_high"] > 0.2
    values = sorted(evaluations.index)
    assert values[values.index(answer) - 1] == failing, "the next-lower evaluated value fails"
    assert (evaluations["n"] == SEEDS).all()


@pytest.mark.parametrize("target", ["discard_rate=0.2", "discard_rate>=fast", "0.2"])
def test_cli_capacity_malformed_target_exits_2(
    capacity_sweep: tuple[Path, Path, float], tmp_path: Path, target: str
):
    scenario, _, _ = capacity_sweep
    out = tmp_path / "cap"
    result = capacity_cli(scenario, out, target, "--values", "0.1,0.2", seeds=None)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "target" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_capacity_bisect_when_an_end_decides(tmp_path: Path):
    scenario = build_scenario(make_doc(**TINY), "s.yaml")

    def search(out: str) -> CapacitySearch:
        return CapacitySearch(
            scenario,
            "s.yaml",
            CAP,
            CAP_TARGET,
            2,
            tmp_path / out,
            executor="serial",
            progress=False,
        )

    meets_at_low = search("low").bisect(0.2, 0.4)
    assert (meets_at_low.answer, meets_at_low.largest_failing) == (0.2, None)
    never = search("never").bisect(0.01, 0.02)
    assert never.answer is None and never.largest_failing == 0.02
    assert "no value in range meets" in never.describe()
    assert [e.value for e in never.evaluations] == [0.02], "the high end failing ends the search"


def test_cli_capacity_unknown_metric_exits_2_and_writes_nothing(
    capacity_sweep: tuple[Path, Path, float], tmp_path: Path
):
    scenario, _, _ = capacity_sweep
    out = tmp_path / "cap"
    result = capacity_cli(scenario, out, "no_such_metric<=0.2", "--values", "0.1,0.2", seeds=2)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "no_such_metric" in result.stderr
    assert not out.exists(), "exit 2 is bad input: nothing is written (sim/cli/app.py docstring)"


def test_plot_sweep_of_a_grid_with_null_and_no_loops(tmp_path: Path):
    """A sweep of checkpoint intervals with null among them and nothing discarded draws its
    curves with a note instead of failing (it used to raise IndexError)."""
    grid = {"model.swa.checkpoint_tokens": [None, 512]}
    doc = sweep_doc(grid, seeds=1, **{"storage.hit_query": "intersect"})
    tasks = plan_file(write_yaml(tmp_path / "ckpt.yaml", doc))
    out = tmp_path / "out"
    outcome = run_sweep(tasks, out, executor="serial", progress=False, provenance={"grid": grid})
    assert not outcome.failed
    names = {p.name for p in plot_sweep(out)}
    assert {"sweep_curves.png", "loop_ccdf.png"} <= names
    assert is_png(out / "sweep_curves.png")
