"""`hicache-sim plan`: the cheapest deployment meeting every target with 95 % confidence. On one
axis it answers as `capacity` does; on two its answer meets every target and no cheaper
evaluated deployment does; prices come only from `costs:` (a missing one exits 2 naming its
key, before any run); the outputs are written and a rerun reuses the runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import sim.studies.plan
from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import scenario_document
from sim.studies.capacity import CapacitySearch
from sim.studies.grid import plan as sweep_plan
from sim.studies.grid import sweep_seeds
from sim.studies.plan import HOURS_PER_MONTH, PlanSearch, pareto
from tests.conftest import TINY_SWEEP, invoke, is_png, make_doc, ok

SWA = "storage.pools.swa.capacity_gb"
VALUES = [0.02, 0.05, 0.1, 0.2, 0.4]
TARGET = "discard_rate<=0.2"
SEEDS = 2
COSTS = {
    "gpu_hour_usd": {"h200": 3.0},
    "storage_gb_month_usd": {"kv": 0.1, "swa": 730.0},
    "note": "test figures",
}
"""An SWA GB-month at 730 $ is 1 $ an hour a GB: storage costs are easy to check by hand."""


def priced_doc(**overrides: Any) -> dict[str, Any]:
    doc = make_doc(**{**TINY_SWEEP, **overrides})
    doc["hardware"] = {"gpu": "h200"}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}
    doc["costs"] = json.loads(json.dumps(COSTS))
    return doc


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(priced_doc(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def search(path: Path, axes: list[tuple[str, list[Any]]], targets: list[str], out: Path) -> Any:
    scenario = load_scenario(path)
    return PlanSearch(scenario, str(path), axes, targets, SEEDS, out, executor="serial")


def test_one_axis_agrees_with_capacity_scan_and_bisection(work: Path) -> None:
    """The same answer, means and intervals as `capacity --values` over the same values, and
    the same answer as `capacity --range` when planned over the values that bisection tried."""
    scenario = load_scenario(work / "plan.yaml")
    cap = CapacitySearch(
        scenario, "plan.yaml", SWA, TARGET, SEEDS, work / "cap", executor="serial", progress=False
    )
    scanned = cap.scan(VALUES)
    assert scanned.answer is not None and scanned.answer > VALUES[0], "a non-trivial answer"
    planned = search(work / "plan.yaml", [(SWA, VALUES)], [TARGET], work / "plan").run()
    assert planned.answer is not None
    assert planned.answer.values[SWA] == scanned.answer
    for ev, point in zip(scanned.evaluations, planned.points, strict=True):
        stats = point.stats["discard_rate"]
        assert point.values[SWA] == ev.value
        assert (stats["mean"], stats["ci_low"], stats["ci_high"]) == pytest.approx(
            (ev.mean, ev.ci_low, ev.ci_high), nan_ok=True
        )
        assert point.meets_all == ev.meets
    assert {p.name for p in (work / "plan" / "tasks").glob("*.json")} == {
        p.name for p in (work / "cap" / "tasks").glob("*.json")
    }, "the very same run documents"

    bisected = CapacitySearch(
        scenario, "plan.yaml", SWA, TARGET, SEEDS, work / "bis", executor="serial", progress=False
    ).bisect(0.02, 0.4, 0.05)
    tried = [e.value for e in bisected.evaluations]
    assert len(tried) > 2
    on_tried = search(work / "plan.yaml", [(SWA, tried)], [TARGET], work / "plan2").run()
    assert on_tried.answer is not None and on_tried.answer.values[SWA] == bisected.answer


def test_two_axes_answer_meets_every_target_and_nothing_cheaper_does(work: Path) -> None:
    targets = [TARGET, "l3_loaded_rate>=0.05"]
    axes = [("cluster.instances", [1, 2]), (SWA, [0.02, 0.05, 0.2])]
    answer = search(work / "plan.yaml", axes, targets, work / "out").run()
    assert len(answer.points) == 6 and answer.answer is not None
    best = answer.answer
    assert best.meets_all
    assert best.stats["discard_rate"]["ci_high"] <= 0.2
    assert best.stats["l3_loaded_rate"]["ci_low"] >= 0.05
    cheaper = [p for p in answer.points if p.cost_usd_per_hour < best.cost_usd_per_hour]
    assert cheaper, "some cheaper deployment was evaluated (and failed)"
    assert not any(p.meets_all for p in cheaper)
    assert any(p.meets_all for p in answer.points if p is not best), "not the only one meeting"
    for p in answer.points:  # the price, by hand: GPUs at 3 $/h, KV 1 GB, SWA at 1 $/h a GB
        servers = p.values["cluster.instances"]
        hand = servers * 3.0 + 1.0 * 0.1 / HOURS_PER_MONTH + p.values[SWA] * 1.0
        assert p.gpus == servers and p.cost_usd_per_hour == pytest.approx(hand)


DECODING = {
    "workload.output_tokens": 200,
    "workload.arrival_rate_per_s": 20,
    "compute.decode_step_ms": 10,
    "compute.decode_ms_per_request": 0.2,
    "device.kv_pages": 8000,
    "device.swa_pages": 8000,
    "host.pages": 16000,
}
"""Twenty requests a second of 200 output tokens each on servers whose decode step grows with
the running batch (10 ms and 0.2 ms a request): one server runs about 110 requests at once
(TPOT p99 about 60 ms), two about 30 (30 ms), four about 10 (17 ms)."""


@pytest.mark.parametrize(("bound", "servers"), [(0.05, 2), (0.025, 4)])
def test_a_tpot_target_drives_capacity_and_plan(work: Path, bound: float, servers: int) -> None:
    """TPOT rises with the requests decoding at once: the servers a TPOT target needs move
    with the target, in a capacity scan and in a plan, where an end-to-end target alone needs
    two servers and both targets must hold."""
    (work / "decode.yaml").write_text(yaml.safe_dump(priced_doc(**DECODING), sort_keys=False))
    scenario, target, seeds = load_scenario(work / "decode.yaml"), f"tpot_p99_s<={bound}", 3
    cap = CapacitySearch(
        scenario, "decode.yaml", "cluster.instances", target, seeds, work / "cap",
        executor="serial", progress=False,
    ).scan([1, 2, 4])  # fmt: skip
    assert cap.answer == servers
    fewer = [ev for ev in cap.evaluations if ev.value < servers]
    assert fewer and all(not ev.meets and ev.mean > bound for ev in fewer)
    axes: list[tuple[str, list[Any]]] = [("cluster.instances", [1, 2, 4])]
    for targets, answer in ((["e2e_p99_s<=9"], 2), (["e2e_p99_s<=9", target], servers)):
        found = PlanSearch(
            scenario, "decode.yaml", axes, targets, seeds, work / f"p{len(targets)}",
            executor="serial",
        ).run()  # fmt: skip
        assert found.answer is not None and found.answer.values["cluster.instances"] == answer
    assert found.answer.stats["tpot_p99_s"]["ci_high"] <= bound


def test_tensor_parallel_servers_cost_their_gpus(work: Path) -> None:
    answer = search(
        work / "plan.yaml", [("server.tp_size", [2])], [TARGET], work / "tp"
    ).prices  # priced before anything runs
    ((gpus, cost),) = answer.values()
    assert gpus == 2 and cost == pytest.approx(2 * 3.0 + 0.1 / HOURS_PER_MONTH + 0.1)


def test_cli_writes_the_answer_frontier_plot_and_page_and_a_rerun_reuses(work: Path) -> None:
    args = ["plan", "plan.yaml", "--axis", "cluster.instances=1,2", "--axis", f"{SWA}=20MB,0.2"]
    args += ["--target", TARGET, "--seeds", "2", "--executor", "serial", "--out", "out"]
    result = ok(invoke(*args))
    assert (
        "cheapest of the 4 grid points to meet every target: cluster.instances=1, "
        "storage.pools.swa.capacity_gb=0.2"
    ) in result.output
    out = work / "out"
    saved = json.loads((out / "plan.json").read_text())
    assert saved["statement"] in result.output and saved["targets"] == [TARGET]
    # 0.02 GB fails below the answer's 0.2 GB: the point between is named; one server is the
    # least there is, so nothing is named below it.
    assert saved["neighbours"] == [f"{SWA}=0.11: between 0.02, which fails, and the answer's 0.2"]
    assert "worth adding to the grid" in saved["statement"] and saved["overloaded"] is None
    # Every seed discards alike at these sizes: said, not shown as a zero-width interval.
    assert "every seed gave the same value" in saved["statement"]
    assert "discard_rate 0 [0, 0] (every seed gave the same value)" in result.output
    assert saved["axes"] == {"cluster.instances": [1, 2], SWA: [0.02, 0.2]}
    evaluations = pd.read_csv(out / "evaluations.csv")
    assert len(evaluations) == 4 and evaluations["answer"].sum() == 1
    frontier = pd.read_csv(out / "frontier.csv")
    assert set(frontier["metric"]) == {"ttft_p99_s", "l3_loaded_rate"}
    for metric, sign in (("ttft_p99_s", -1), ("l3_loaded_rate", 1)):
        line = frontier[frontier["metric"] == metric]
        assert line["cost_usd_per_hour"].is_monotonic_increasing
        assert (sign * line["mean"]).is_monotonic_increasing, "each step buys a better metric"
    assert is_png(out / "frontier.png") and (out / "report.html").is_file()
    page = (out / "report.html").read_text()
    assert "cheapest of the 4 grid points" in page
    plain = page.split('<p class="plain">')[1].split("</p>")[0]
    assert page.index('class="plain"') < page.index('id="deployment"') < page.index('id="prices"')
    assert plain.startswith(
        "This plan priced 4 deployments of a custom model on servers of one H200 each"
    )
    assert "the SWA storage pool&#x27;s capacity" in plain and "$3.20 per hour" in plain
    assert "every seed gave the same value" in plain and "Not modelled" in plain
    assert "storage.pools" not in plain and "cluster.instances" not in plain, "words, not keys"
    card = page.split('<table id="deployment">')[1].split("</table>")[0]
    assert "searched: 1, 2" in card and "GPU h200" in card
    prices = page.split('<table id="prices">')[1].split("</table>")[0]
    assert "$3 per GPU-hour" in prices and "$730 per GB-month ($1 per GB-hour)" in prices
    assert "gpu_hour_usd" not in page.split('<table id="plan">')[1].split("</table>")[0]
    assert '<table id="neighbours">' in page
    tasks = sorted(p.name for p in (out / "tasks").glob("*.json"))
    stamps = [(out / "tasks" / name).stat().st_mtime_ns for name in tasks]
    ok(invoke(*args))  # the same plan again: every run reused
    assert [(out / "tasks" / name).stat().st_mtime_ns for name in tasks] == stamps
    for command in ("report", "plot"):
        told = invoke(command, "out")
        assert told.exit_code == 2 and "a plan directory" in told.output, told.output
        assert "run the same plan command again" in told.output


def test_prices_do_not_change_the_runs(work: Path) -> None:
    """A repriced plan reuses every run: the task documents carry no prices, and a scenario
    without prices resolves to the document it did before the section existed."""
    priced = load_scenario(work / "plan.yaml")
    doc = priced_doc()
    doc["costs"]["gpu_hour_usd"]["h200"] = 9.0
    repriced = build_scenario(doc, "<repriced>")
    del doc["costs"]
    unpriced = build_scenario(doc, "<unpriced>")
    assert "costs" not in scenario_document(unpriced)
    keys = [
        [t.key for t in sweep_plan(s.model_copy(update={"sweep": _sweep()}), "x")]
        for s in (priced, repriced, unpriced)
    ]
    assert keys[0] == keys[1] == keys[2]
    assert all(
        "costs" not in t.doc for t in sweep_plan(priced.model_copy(update={"sweep": _sweep()}), "x")
    )
    assert sweep_seeds(priced.seed, 2) == sweep_seeds(unpriced.seed, 2)


def _sweep() -> Any:
    from sim.scenario.schema import SweepSpec

    return SweepSpec(seeds=2, grid={SWA: [0.1, 0.2]})


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a simulation ran before the plan was checked")

    monkeypatch.setattr(sim.studies.plan, "compute", refuse)


def _plan_with(work: Path, doc: dict[str, Any], *extra: str) -> Any:
    (work / "bad.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    args = ["plan", "bad.yaml", "--axis", f"{SWA}=0.1,0.2", "--target", TARGET, "--out", "o"]
    return invoke(*args, *extra)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.pop("costs"), "bad.yaml: costs:"),
        (lambda d: d["costs"]["gpu_hour_usd"].clear(), "bad.yaml: costs.gpu_hour_usd.h200:"),
        (
            lambda d: d["costs"]["storage_gb_month_usd"].pop("kv"),
            "bad.yaml: costs.storage_gb_month_usd.kv:",
        ),
        (lambda d: d["costs"]["gpu_hour_usd"].update(h2000=1.0), "costs.gpu_hour_usd.h2000"),
        (lambda d: d["costs"]["gpu_hour_usd"].update(h200=0), "costs.gpu_hour_usd.h200"),
        (lambda d: d["costs"].update(gpu_hours=1), "costs.gpu_hours"),
        (lambda d: d["hardware"].clear(), "bad.yaml: hardware.gpu:"),
        (
            lambda d: d["storage"]["pools"]["kv"].update(capacity_gb=None),
            "bad.yaml: storage.pools.kv.capacity_gb: is unbounded",
        ),
    ],
)
def test_missing_or_bad_prices_exit_2_naming_the_key(
    work: Path, no_runs: None, change: Any, named: str
) -> None:
    doc = priced_doc()
    change(doc)
    result = _plan_with(work, doc)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not (work / "o").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--axis", "storage.pools.kv.capacity_gb=-1"], "capacity_gb=-1 is refused"),
        (["--axis", "cluster.instance=1,2"], "--axis"),
        (["--axis", "costs.gpu_hour_usd.h200=1,2"], "not part of a deployment"),
        (["--axis", "cluster.instances"], "KEY=A,B"),
        (["--axis", f"{SWA}=0.3"], "given twice"),
        (["--target", "nonsense<=1"], "unknown metric"),
    ],
)
def test_bad_axes_and_targets_exit_2_before_any_run(
    work: Path, no_runs: None, args: list[str], said: str
) -> None:
    result = _plan_with(work, priced_doc(), *args)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert said in result.stderr and "Traceback" not in result.stderr
    assert not (work / "o").exists()


def test_an_out_that_is_not_a_plan_is_refused(work: Path, no_runs: None) -> None:
    (work / "o").mkdir()
    (work / "o" / "mine.txt").write_text("keep me")
    result = _plan_with(work, priced_doc())
    assert result.exit_code == 2 and "not a plan directory" in result.stderr
    assert (work / "o" / "mine.txt").read_text() == "keep me"


def test_pareto_keeps_only_undominated_points() -> None:
    from sim.studies.plan import Point

    def point(i: int, cost: float, ttft: float) -> Point:
        return Point(i, {}, 1, cost, 2, 0, {"ttft_p99_s": {"mean": ttft}})

    points = [point(0, 1, 5), point(1, 2, 6), point(2, 2, 3), point(3, 3, 3), point(4, 4, 1)]
    assert [p.point for p in pareto(points, "ttft_p99_s", "<=")] == [0, 2, 4]


def test_the_points_worth_adding_lie_below_the_answer_where_the_grid_leaves_room() -> None:
    """At the grid's lowest value of a priced axis, half of it; above a failing lower value, the
    value between; nothing below one server, nor on an axis that does not change the price."""
    from sim.outputs.grid import neighbours

    def point(servers: int, gb: float, pages: int, cost: float, meets: bool) -> Any:
        return ({"cluster.instances": servers, SWA: gb, "device.swa_pages": pages}, cost, meets)

    grid = [
        point(1, 0.1, 400, 1.0, False),
        point(2, 0.1, 400, 2.0, False),
        point(4, 0.1, 400, 4.0, True),
        point(4, 0.1, 800, 4.0, True),
    ]
    answer = {"cluster.instances": 4, SWA: 0.1, "device.swa_pages": 400}
    assert neighbours(grid, answer) == [
        "cluster.instances=3: between 2, which fails, and the answer's 4",
        f"{SWA}=0.05: below the answer's 0.1, the grid's lowest value on this axis",
    ]
    assert neighbours(grid, None) == []
    assert neighbours([point(1, 0.1, 400, 1.0, True)], {**answer, "cluster.instances": 1}) == [
        f"{SWA}=0.05: below the answer's 0.1, the grid's lowest value on this axis",
        "device.swa_pages=200: below the answer's 400, the grid's lowest value on this axis",
    ]
