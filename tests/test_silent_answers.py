"""Inputs that used to give a wrong answer without a word: overlapping swept keys, intervals
clipped in one search and not the other, values replaced by a rule without being checked
(docs/reliability.md, "Every input surface and the checks it gets")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import sim.studies.capacity
import sim.studies.plan
from tests.conftest import TINY_SWEEP, invoke, make_doc

SWA = "storage.pools.swa.capacity_gb"


def priced_doc(**overrides: Any) -> dict[str, Any]:
    doc = make_doc(**TINY_SWEEP, **overrides)
    doc["hardware"] = {"gpu": "h200"}
    doc["storage"]["pools"] = {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 0.1, "swa": 1}}
    return doc


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(priced_doc(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a simulation ran before the plan was checked")

    monkeypatch.setattr(sim.studies.plan, "compute", refuse)


def test_overlapping_finds_a_key_inside_another() -> None:
    from sim.core.documents import overlapping

    assert overlapping(["cluster.instances", "cluster"]) == ("cluster", "cluster.instances")
    assert overlapping(["a.b", "a.b-c", "a.b.c.d"]) == ("a.b", "a.b.c.d")
    assert overlapping(["storage.pools.kv", "storage.pools.kvx.capacity_gb"]) is None


@pytest.mark.parametrize(
    "axes",
    [
        ["cluster.instances=1,2", "cluster={instances: 4}"],
        ["storage.pools.kv={capacity_gb: 5}", "storage.pools.kv.capacity_gb=1,2"],
    ],
)
def test_a_plan_axis_inside_another_is_refused(work: Path, no_runs: None, axes: list[str]) -> None:
    args = ["plan", "plan.yaml", "--target", "discard_rate<=0.2", "--out", "o"]
    for axis in axes:
        args += ["--axis", axis]
    result = invoke(*args)
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "--axis" in result.stderr and "lies inside" in result.stderr
    assert "Traceback" not in result.stderr and not (work / "o").exists()


def test_a_sweep_grid_key_inside_another_is_refused(tmp_path: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {
        "seeds": 2,
        "grid": {"storage.pools.kv": [{"capacity_gb": 5}], "storage.pools.kv.capacity_gb": [1, 2]},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert f"{path}: sweep.grid.storage.pools.kv.capacity_gb" in result.stderr
    assert "lies inside storage.pools.kv" in result.stderr


def test_a_variant_key_inside_a_grid_key_is_refused(tmp_path: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {
        "seeds": 2,
        "grid": {"cluster": [{"instances": 2}]},
        "variants": {"one": {"cluster.instances": 1}},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "sweep.variants.one.cluster.instances" in result.stderr


def test_a_mapping_value_is_never_changed_by_a_later_key() -> None:
    """A point's recorded values are what the user wrote, even were a later key to write
    inside a mapping value (each point gets its own copy)."""
    from sim.scenario.loading import point_document
    from tests.conftest import make_scenario

    written = {"capacity_gb": 5}
    keyed = [("storage.pools.kv", written), ("storage.pools.kv.capacity_gb", 2)]
    doc = point_document(make_scenario(), keyed, "<t>")
    assert doc["storage"]["pools"]["kv"] == {"capacity_gb": 2}
    assert json.dumps(written) == '{"capacity_gb": 5}'


def test_plan_truncates_intervals_to_the_metrics_range_as_capacity_does(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TTFT is never negative: plan's interval stops at 0 as capacity's does, so a target
    `ttft_p99_s>=0` holds for the first deployment of both."""
    from sim.scenario.loading import load_scenario
    from sim.studies.capacity import CapacitySearch
    from sim.studies.plan import PlanSearch

    ttfts = [0.01, 0.02, 0.5]

    def fake(tasks: list[Any], *args: Any, **kwargs: Any) -> tuple[list[Any], int]:
        summary = {"ttft_p99_s": 0.0, "l3_loaded_rate": 0.5, "discard_rate": 0.0}
        records = [
            {"summary": {**summary, "ttft_p99_s": ttfts[t.seed_index]}, "error": None}
            for t in tasks
        ]
        return records, 0

    monkeypatch.setattr(sim.studies.plan, "compute", fake)
    monkeypatch.setattr(sim.studies.capacity, "compute", fake)  # type: ignore[attr-defined]
    scenario = load_scenario(work / "plan.yaml")
    target = "ttft_p99_s>=0"
    plan = PlanSearch(
        scenario, "plan.yaml", [("cluster.instances", [1, 2])], [target], 3, work / "p",
        executor="serial",
    )  # fmt: skip
    answer = plan.run()
    stats = answer.points[0].stats["ttft_p99_s"]
    assert stats["ci_low"] == 0.0 and stats["ci_high"] == pytest.approx(0.8724, abs=1e-4)
    assert answer.answer is not None and answer.answer.values == {"cluster.instances": 1}
    cap = CapacitySearch(
        scenario, "plan.yaml", "cluster.instances", target, 3, work / "c", executor="serial"
    )
    (evaluation,) = cap.scan([1]).evaluations
    assert (evaluation.ci_low, evaluation.ci_high) == (stats["ci_low"], stats["ci_high"])


PRESET = "scenarios/presets/gpt_oss_120b.yaml"


@pytest.mark.parametrize("value", [-1, 0, "abc", True, 1.5])
def test_a_bad_mem_fraction_static_is_refused_not_replaced_by_sglangs_rule(value: Any) -> None:
    from sim.scenario.loading import ScenarioError, load_scenario
    from tests.conftest import REPO

    overrides = {"device": {}, "hardware.gpu": "h200", "server.mem_fraction_static": value}
    with pytest.raises(ScenarioError) as err:
        load_scenario(REPO / PRESET, overrides)
    assert str(err.value.key).endswith("server.mem_fraction_static")


def test_mem_fraction_static_null_still_takes_sglangs_rule() -> None:
    from sim.scenario.loading import load_scenario
    from tests.conftest import REPO

    overrides = {"device": {}, "hardware.gpu": "h200", "server.mem_fraction_static": None}
    scenario = load_scenario(REPO / PRESET, overrides)
    assert scenario.sources["server.mem_fraction_static"].startswith("derived: SGLang's rule")


@pytest.mark.parametrize("temperature", [5e-324, 1e-320, 1e-300])
def test_a_tiny_router_temperature_picks_the_cheapest_without_warnings(
    temperature: float,
) -> None:
    import warnings

    import numpy as np

    from sim.cluster.dynamo_kv import softmax_pick

    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        picks = {softmax_pick([3.0, 1.0, 2.0], temperature, rng) for _ in range(20)}
    assert picks == {1}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("costs.storage_gb_month_usd.kv", 1e308),
        ("costs.gpu_hour_usd.h200", 1e308),
        ("cluster.router", {"policy": "dynamo_kv", "prefill_load_scale": 1e308}),
    ],
)
def test_a_finite_value_whose_products_overflow_is_refused(
    work: Path, no_runs: None, key: str, value: Any
) -> None:
    doc = priced_doc()
    node = doc
    *path, leaf = key.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[leaf] = value
    (work / "big.yaml").write_text(yaml.safe_dump(doc))
    result = invoke(
        "plan", "big.yaml", "--axis", "cluster.instances=1,2", "--target", "discard_rate<=0.2",
        "--out", "o",
    )  # fmt: skip
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "big.yaml:" in result.stderr and "Traceback" not in result.stderr
    assert not (work / "o").exists()


def test_a_price_that_overflows_the_sum_is_refused(work: Path) -> None:
    """Each price within its bound, the deployment's price must still be finite."""
    from sim.scenario.loading import ScenarioError, build_scenario
    from sim.studies.grid import Task
    from sim.studies.plan import price

    priced = priced_doc()
    priced["costs"]["storage_gb_month_usd"]["kv"] = 1e9
    scenario = build_scenario(priced, "p.yaml")
    doc = {
        "hardware": {"gpu": "h200"},
        "cluster": {"instances": 1},
        "server": {"tp_size": 1},
        "storage": {"pools": {"kv": {"capacity_gb": 1e308}}},
    }
    with pytest.raises(ScenarioError, match="overflows"):
        price(scenario, "p.yaml", Task(0, (), 0, 1, doc, "k"))


def test_a_large_plan_grid_is_indexed_in_one_pass(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40,000 points: each point's first task found in one pass, not a scan per point (48 s
    before the first run, quadratic in the points)."""
    import time

    from sim.scenario.loading import load_scenario
    from sim.studies.grid import Task
    from sim.studies.plan import PlanSearch

    points = 40_000
    tasks = [Task(p, (("cluster.instances", 1),), s, s, {}, f"{p}-{s}") for p in range(points)
             for s in range(2)]  # fmt: skip
    monkeypatch.setattr(sim.studies.plan, "plan", lambda *args, **kwargs: tasks)
    monkeypatch.setattr(sim.studies.plan, "price", lambda scenario, source, task: (1, 1.0))
    scenario = load_scenario(work / "plan.yaml")
    started = time.perf_counter()
    search = PlanSearch(
        scenario, "plan.yaml", [("cluster.instances", [1, 2])], ["discard_rate<=0.2"], 2,
        work / "o", executor="serial",
    )  # fmt: skip
    assert time.perf_counter() - started < 5
    assert len(search.prices) == points
