"""Engine-level properties: oracles, invariants while running, determinism, CRN."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.engine.metrics import WALL_CLOCK_KEYS, is_summary_key
from sim.engine.runner import run
from sim.engine.simulation import Simulation
from sim.model.build import build_cluster
from sim.scenario.loading import load_scenario
from tests.conftest import REPO, make_scenario


def without_wall_clock(summary: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}


def test_zero_faults_with_intersect_and_wait_complete_never_discard() -> None:
    result = run(load_scenario(REPO / "scenarios" / "zero_fault.yaml"))
    assert result.summary["prefetch_issued"] > 100
    assert result.summary["prefetch_discarded"] == 0
    assert result.summary["prefetch_success"] == result.summary["prefetch_issued"]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("layout", ["swa", "mamba", "both"])
def test_zero_faults_never_discard_across_layouts_and_seeds(seed: int, layout: str) -> None:
    model = {"page_size": 64, "kv": {"bytes_per_token": 1024}}
    device: dict[str, int] = {"kv_pages": 600}
    pools: dict[str, dict[str, object]] = {"kv": {}}
    if layout in ("swa", "both"):
        model["swa"] = {"window_tokens": 256, "bytes_per_token": 512}
        device["swa_pages"] = 300
        pools["swa"] = {}
    if layout in ("mamba", "both"):
        model["mamba"] = {"state_bytes": 1 << 20}
        device["mamba_slots"] = 16
        pools["mamba"] = {}
    scenario = make_scenario(
        seed=seed,
        model=model,
        device=device,
        **{
            "storage.pools": pools,
            "storage.hit_query": "intersect",
            "prefetch.policy": "wait_complete",
            "workload.requests": 200,
        },
    )
    summary = run(scenario).summary
    assert summary["prefetch_issued"] > 0
    assert summary["prefetch_discarded"] == 0


def test_capacities_hold_and_every_request_ends_in_one_outcome() -> None:
    scenario = make_scenario(
        **{
            "model.mamba": {"state_bytes": 1 << 20},
            "device.kv_pages": 300,
            "device.swa_pages": 120,
            "device.mamba_slots": 6,
            "host.pages": 400,
            "storage.pools.mamba": {"put_fail_prob": 0.2},
            "storage.pools.swa": {"put_fail_prob": 0.2, "capacity_gb": 0.05},
            "storage.pools.kv": {"capacity_gb": 1.0, "get_fail_prob": 0.01},
            "existence_cache.entries": 200,
            "workload.requests": 400,
            "workload.arrival_rate_per_s": 8,
            "duration_s": 60,
        }
    )
    sim = Simulation(build_cluster(scenario)).start()
    (server,) = sim.servers
    tree, host, env = server.tree, server.host, sim.env
    steps = 0
    while env.peek() <= scenario.duration_s:
        env.step()
        steps += 1
        for resource in (tree.kv, *tree.aux.values()):
            assert resource.used >= 0 and resource.used + resource.reserved <= resource.capacity
        assert set(tree.aux) == {"swa", "mamba"}
        assert 0 <= host.used_pages <= host.capacity_pages
        assert len(server.model.existence) <= scenario.existence_cache.entries
        for pool in sim.storage.pools.values():
            assert pool.capacity_objects is None or len(pool) <= pool.capacity_objects
    sim.finish()
    assert steps > 1000
    requests = server.records.requests.drain()
    assert requests["rid"].is_unique
    assert set(requests["outcome"]) <= {"finished", "unfinished", "rejected"}


def test_every_generated_request_is_recorded_exactly_once() -> None:
    scenario = make_scenario(**{"workload.requests": 150, "duration_s": 20})
    result = run(scenario)
    expected = sum(
        1
        for req in Simulation(build_cluster(scenario)).workload.arrivals()
        if req.arrival_s <= scenario.duration_s
    )
    assert len(result.tables["requests"]) == expected
    assert result.tables["requests"]["rid"].is_unique
    assert (result.tables["requests"]["outcome"] == "unfinished").any()


def test_same_seed_gives_identical_summaries_and_tables() -> None:
    scenario = make_scenario(**{"storage.pools.swa.put_fail_prob": 0.2})
    first, second = run(scenario), run(scenario)
    assert without_wall_clock(first.summary) == without_wall_clock(second.summary)
    for name, table in first.tables.items():
        pd.testing.assert_frame_equal(table, second.tables[name])


def test_other_seed_gives_other_results() -> None:
    a = run(make_scenario(seed=1)).summary
    b = run(make_scenario(seed=2)).summary
    assert without_wall_clock(a) != without_wall_clock(b)


def test_heal_rule_does_not_change_the_arrivals() -> None:
    """Common random numbers: variants see the same requests at the same times."""
    none = run(make_scenario(heal="none", **{"storage.pools.swa.put_fail_prob": 0.2}))
    keep = run(make_scenario(heal="keep_pages", **{"storage.pools.swa.put_fail_prob": 0.2}))
    cols = ["rid", "arrival_s", "prompt_tokens"]
    pd.testing.assert_frame_equal(none.tables["requests"][cols], keep.tables["requests"][cols])


def test_behind_an_aux_blind_exists_the_heal_closes_loops_and_none_does_not() -> None:
    scenario = load_scenario(REPO / "scenarios" / "what_if" / "aux_blind_exists.yaml")
    none = run(scenario.model_copy(update={"heal": "none"})).summary
    keep = run(scenario.model_copy(update={"heal": "keep_pages"})).summary
    assert none["heal_rate"] <= 0.3 and keep["heal_rate"] >= 0.8
    assert keep["prefetch_discarded"] * 2 <= none["prefetch_discarded"]
    assert none["rewrite_pages"] == 0 < keep["rewrite_pages"]


def test_the_demo_discards_under_sglangs_fold_whatever_the_rule_and_not_under_intersect() -> None:
    """Two tail-keyed pools under min_of_pools: discards (SGLang issue 39147) that the
    hit-query heal and the next turn close with or without the discard heal; intersect has
    none."""
    scenario = load_scenario(REPO / "scenarios" / "demo.yaml").model_copy(
        update={"duration_s": 300.0, "warmup_s": 30.0}
    )
    none = run(scenario.model_copy(update={"heal": "none"})).summary
    keep = run(scenario.model_copy(update={"heal": "keep_pages"})).summary
    for summary in (none, keep):
        assert summary["discard_rate"] >= 0.03 and summary["heal_rate"] >= 0.8
    assert abs(none["prefetch_discarded"] - keep["prefetch_discarded"]) <= 0.25 * max(
        none["prefetch_discarded"], keep["prefetch_discarded"]
    )
    storage = scenario.storage.model_copy(update={"hit_query": "intersect"})
    fixed = run(scenario.model_copy(update={"storage": storage, "heal": "none"})).summary
    assert fixed["prefetch_discarded"] == 0 and fixed["prefetch_issued"] > 0


@pytest.mark.parametrize("aux", ["swa", "mamba"])
def test_with_one_aux_pool_min_of_pools_and_intersect_give_identical_runs(aux: str) -> None:
    """With one tail-keyed pool SGLang's fold is the intersection: every table is the same."""
    layout: dict[str, object] = {
        "device.kv_pages": 300,
        "device.swa_pages": 300,
        "host.pages": 800,
        "storage.pools.swa.put_fail_prob": 0.2,
    }
    if aux == "mamba":
        layout = {
            "model.swa": None,
            "device.swa_pages": None,
            "model.mamba": {"state_bytes": 1 << 20},
            "device.kv_pages": 300,
            "device.mamba_slots": 16,
            "host.pages": 800,
            "storage.pools": {"kv": {}, "mamba": {"put_fail_prob": 0.2}},
        }
    runs = {
        query: run(make_scenario(**layout, **{"storage.hit_query": query}))
        for query in ("min_of_pools", "intersect")
    }
    a, b = runs["min_of_pools"], runs["intersect"]
    assert a.summary["prefetch_issued"] > 20
    for name, table in a.tables.items():
        pd.testing.assert_frame_equal(table, b.tables[name], obj=name)


def test_stale_exists_makes_a_real_fold_report_what_cannot_be_read() -> None:
    """SGLang's min_of_pools never reports an endpoint whose aux tail is missing, so backend
    evictions alone cause no discard; a metadata cache that still says "exists" for evicted
    objects (storage.exists_ttl_s) does, and its positives also make the backend skip the
    rewrite that would close the hole: most prefetches are discarded."""
    runs = {
        ttl: run(
            make_scenario(
                **{
                    "device.kv_pages": 300,
                    "device.swa_pages": 300,
                    "host.pages": 800,
                    "storage.hit_query": "min_of_pools",
                    "storage.pools.swa.evict_rate_per_s": 5.0,
                    "storage.exists_ttl_s": ttl,
                    "workload.requests": 300,
                }
            )
        ).summary
        for ttl in (0.0, 5.0)
    }
    assert runs[0.0]["storage_swa_evictions"] > 100
    assert runs[0.0]["prefetch_discarded"] == 0
    assert runs[5.0]["prefetch_discarded"] >= 5
    assert runs[5.0]["prefetch_discarded"] >= 0.8 * runs[5.0]["prefetch_issued"]


def test_per_pool_beliefs_heal_an_aux_blind_exists_only_under_the_per_pool_rule() -> None:
    """Per-pool beliefs: the `per_pool` rule drops the SWA beliefs past what the short SWA
    transfer served, so the next insert writes the missing SWA tail alone; `none` heals nothing,
    and a KV rule drops KV beliefs only, which leaves the stale SWA belief in place."""
    path = REPO / "scenarios" / "what_if" / "aux_blind_exists.yaml"
    per_pool = load_scenario(path, ["existence_cache.beliefs=per_pool", "heal=per_pool"])
    healed = run(per_pool).summary
    unhealed = run(per_pool.model_copy(update={"heal": "none"})).summary
    assert healed["heal_rate"] >= 0.8 and unhealed["heal_rate"] <= 0.3
    assert healed["prefetch_discarded"] * 2 <= unhealed["prefetch_discarded"]
    assert healed["rewrite_pages"] > 0 and healed["heal_dropped_beliefs"] > 0
    assert unhealed["heal_dropped_beliefs"] == 0


def test_device_counters_reach_the_summary_and_count_what_the_tree_dropped() -> None:
    """A small device SWA pool tombstones SWA pages while their KV stays; the summary says how
    many, per pool and in the pool's own unit."""
    small = run(make_scenario(**{"device.swa_pages": 10})).summary
    roomy = run(make_scenario()).summary
    assert small["device_swa_dropped_pages"] > 0 == roomy["device_swa_dropped_pages"]
    assert small["device_evicted_pages"] >= 0 and "device_mamba_dropped_slots" not in small
    assert roomy["device_swa_freed_out_of_window_pages"] > 0
    whole = run(make_scenario(**{"device.swa_retention": "whole_node"})).summary
    assert whole["device_swa_freed_out_of_window_pages"] == 0
    for key in (
        "device_evicted_pages",
        "device_swa_dropped_pages",
        "device_mamba_dropped_slots",
        "device_swa_freed_out_of_window_pages",
    ):
        assert is_summary_key(key)
    assert not is_summary_key("device_kv_dropped_pages")
    assert not is_summary_key("device_swa_dropped_slots")
