"""Extension points: each is one registry that the schema and the implementation share, and
adding an implementation is a local change (a pool kind: one spec class and one register call).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from sim.core.registry import Registry
from sim.core.spec import Bytes
from sim.engine.runner import run
from sim.engine.simulation import Simulation
from sim.heal import RULES, DiscardView
from sim.model.build import build_cluster
from sim.model.pools import POOL_KINDS, PoolKind, PoolSpec, Residency, register_pool_kind
from sim.model.prefetch import PrefetchOp, plan_aux_transfers
from sim.model.prefetch_policies import PREFETCH_POLICIES, PrefetchTimeout
from sim.model.storage import HIT_QUERIES, Storage
from sim.scenario.loading import build_scenario
from sim.scenario.schema import Scenario, ScenarioError, scenario_model
from sim.workload.catalog import WORKLOAD_KINDS
from tests.conftest import make_doc, make_scenario
from tests.model_helpers import make_storage

SMALL_DEVICE: dict[str, Any] = {
    "device.kv_pages": 300,
    "device.swa_pages": 300,
    "host.pages": 800,
    "workload.requests": 200,
    "duration_s": 90,
}
"""The shared prefixes do not fit on the device, so requests prefetch from storage."""

# ---------------------------------------------------------------- a made-up pool kind


class BlockCachePoolSpec(PoolSpec):
    """A pool that, like KV, needs every page of the span (a made-up block cache with slots
    of its own)."""

    bytes_per_token: Bytes

    def object_bytes(self, page_size: int) -> int:
        return page_size * self.bytes_per_token


@pytest.fixture
def blockcache() -> Iterator[PoolKind]:
    kind = register_pool_kind(
        PoolKind("blockcache", BlockCachePoolSpec, Residency.PAGE_VALUES, stream_id=9)
    )
    try:
        yield kind
    finally:
        POOL_KINDS.unregister("blockcache")


def blockcache_doc(**overrides: Any) -> dict[str, Any]:
    return make_doc(
        **SMALL_DEVICE,
        **{
            "model.blockcache": {"bytes_per_token": 128},
            "device.blockcache_pages": 300,
            "storage.pools.blockcache": {"put_fail_prob": 0.3},
        },
        **overrides,
    )


def test_a_pool_kind_registered_at_test_time_runs_through_a_scenario(blockcache: PoolKind) -> None:
    """Schema, tree, storage, prefetch, backup, heal, tables and summary all pick it up."""
    scenario = build_scenario(blockcache_doc())
    assert scenario.model.pools == ("kv", "swa", "blockcache")
    assert "blockcache" in scenario_model().model_json_schema()["$defs"]["ModelSpec"]["properties"]
    result = run(scenario)
    pf, wr, ts = (result.tables[t] for t in ("prefetches", "writes", "timeseries"))
    assert {"blockcache_keys", "blockcache_hit_pages"} <= set(pf.columns)
    assert {"blockcache_keys", "blockcache_failed"} <= set(wr.columns)
    assert {"device_blockcache_pages", "storage_blockcache_bytes"} <= set(ts.columns)
    written = wr[wr["verdict"] == "write"]
    assert (written["blockcache_keys"] == written["pages"]).all(), "every page of a node is written"
    assert written["blockcache_failed"].sum() > 0
    issued = pf[pf["outcome"].isin(["success", "discarded"])]
    assert (issued["blockcache_keys"].map(len) == issued["hit_pages"]).all()
    assert result.summary["storage_blockcache_put_inserts"] > 0
    assert result.summary["prefetch_discarded"] > 0
    assert result.summary["write_aux_failed_objects"] == int(
        written["swa_failed"].sum() + written["blockcache_failed"].sum()
    )
    assert ts["storage_blockcache_bytes"].iloc[-1] > 0


def test_a_heal_of_an_every_page_pool_drops_the_whole_span(blockcache: PoolKind) -> None:
    """An blockcache transfer vouches for nothing before its keys, which are the whole span, so a
    short one keeps nothing: `keep_pages` drops every belief of the hit."""
    scenario = build_scenario(blockcache_doc())
    storage = Simulation(build_cluster(scenario)).storage
    span = tuple(range(1, 9))
    op = PrefetchOp(1, 0, span, 0.0, hit_pages=8, completed_pages=8)
    op.aux = plan_aux_transfers(storage.aux, op)
    assert [t.keys for t in op.aux] == [span[-2:], span]
    op.aux[0].hit_pages, op.aux[1].hit_pages = 2, 7
    assert RULES["keep_pages"](DiscardView(op, 64, storage)) == list(span)
    result = run(scenario)
    pf = result.tables["prefetches"]
    short = pf[(pf["outcome"] == "discarded") & (pf["blockcache_hit_pages"] < pf["hit_pages"])]
    assert len(short) > 0 and (short["dropped_beliefs"] <= short["hit_pages"]).all()


def test_an_unregistered_pool_kind_is_an_unknown_key(blockcache: PoolKind) -> None:
    doc = blockcache_doc()
    POOL_KINDS.unregister("blockcache")
    try:
        with pytest.raises(ScenarioError) as err:
            build_scenario(doc)
        assert "blockcache" in str(err.value)
    finally:
        POOL_KINDS.register("blockcache", blockcache)


def test_a_pool_kind_needs_its_own_stream() -> None:
    with pytest.raises(ValueError, match="stream_id 2 is taken"):
        register_pool_kind(PoolKind("other", BlockCachePoolSpec, Residency.PAGE_VALUES, 2))
    with pytest.raises(ValueError, match="stream_id 4 is taken"):
        register_pool_kind(PoolKind("other", BlockCachePoolSpec, Residency.PAGE_VALUES, 4))
    assert "other" not in POOL_KINDS


# ---------------------------------------------------------------- names: schema == registry


def _enum_at(schema: dict[str, Any], model: str, field: str) -> set[str]:
    prop = schema["$defs"][model]["properties"][field] if model else schema["properties"][field]
    return set(prop["enum"])


def test_the_schema_accepts_exactly_the_registered_names() -> None:
    schema = scenario_model().model_json_schema()
    assert _enum_at(schema, "", "heal") == set(RULES)
    assert _enum_at(schema, "StorageSpec", "hit_query") == set(HIT_QUERIES)
    assert _enum_at(schema, "PrefetchSpec", "policy") == set(PREFETCH_POLICIES)
    pools = schema["$defs"]["StorageSpec"]["properties"]["pools"]["propertyNames"]
    assert set(pools["enum"]) == set(POOL_KINDS)
    kinds = {
        schema["$defs"][ref["$ref"].split("/")[-1]]["properties"]["kind"]["const"]
        for ref in schema["properties"]["workload"]["oneOf"]
    }
    assert kinds == set(WORKLOAD_KINDS)


@pytest.mark.parametrize(
    ("key", "registry"),
    [
        ("heal", RULES),
        ("storage.hit_query", HIT_QUERIES),
        ("prefetch.policy", PREFETCH_POLICIES),
    ],
)
def test_every_registered_name_validates_and_no_other(key: str, registry: Registry[Any]) -> None:
    for name in registry:
        make_scenario(**{key: name})
    with pytest.raises(ScenarioError) as err:
        make_scenario(**{key: "not_registered"})
    assert err.value.key == key


def test_a_heal_rule_registered_at_test_time_is_selectable() -> None:
    """One function and one register call: `heal=drop_last` validates and runs."""

    def drop_last(view: DiscardView) -> list[int]:
        return list(view.op.hit_span[-1:])

    with pytest.raises(ScenarioError):
        make_scenario(heal="drop_last")
    RULES.register("drop_last", drop_last)
    try:
        faults = {**SMALL_DEVICE, "storage.pools.swa.put_fail_prob": 0.3}
        result = run(make_scenario(heal="drop_last", **faults))
        discarded = result.tables["prefetches"].query("outcome == 'discarded'")
        assert len(discarded) > 0
        assert discarded["dropped_beliefs"].max() == 1
    finally:
        RULES.unregister("drop_last")


def test_a_prefetch_policy_registered_at_test_time_is_selectable() -> None:
    """A policy is a function of the op: here, never stop before the base timeout."""

    def base_only(op: PrefetchOp, budget: PrefetchTimeout) -> float:
        return op.issued_s + budget.base_s

    PREFETCH_POLICIES.register("base_only", base_only)
    try:
        slow = {**SMALL_DEVICE, "storage.read_gbps": 0.5, "prefetch.timeout_base_s": 0.2}
        result = run(make_scenario(**{"prefetch.policy": "base_only"}, **slow))
        issued = result.tables["prefetches"].query("outcome in ['success', 'discarded']")
        terminated = issued[issued["terminated"]]
        assert len(terminated) > 0
        assert (terminated["resolved_s"] - terminated["issued_s"] >= 0.2 - 1e-9).all()
    finally:
        PREFETCH_POLICIES.unregister("base_only")


def test_a_registry_refuses_a_name_twice() -> None:
    with pytest.raises(ValueError, match="already registered"):
        RULES.register("keep_pages", RULES["keep_pages"])


# ---------------------------------------------------------------- random streams


def kv_eviction_times(**overrides: Any) -> tuple[list[float], int]:
    """Times of the KV pool's backend evictions, and how many SWA objects were evicted."""
    scenario = make_scenario(
        **SMALL_DEVICE, **{"storage.pools.kv.evict_rate_per_s": 0.5}, **overrides
    )
    sim = Simulation(build_cluster(scenario))
    times: list[float] = []
    kv = sim.storage.kv
    evict = kv.evict_random

    def logged(rng: Any, now_s: float) -> int | None:
        times.append(now_s)
        return evict(rng, now_s)

    kv.evict_random = logged  # type: ignore[method-assign]
    sim.run()
    return times, sim.storage.pools["swa"].evictions


def test_one_pool_s_evictions_never_move_another_pool_s() -> None:
    """Each pool's evictions have their own stream, and one eviction takes one draw whatever the
    pool holds: SWA evictions and faults change what KV holds, never when KV evicts."""
    quiet, none = kv_eviction_times()
    busy, evicted = kv_eviction_times(
        **{"storage.pools.swa.evict_rate_per_s": 2.0, "storage.pools.swa.put_fail_prob": 0.2}
    )
    assert none == 0 and evicted > 50
    assert len(quiet) > 20
    assert busy == quiet


@pytest.mark.parametrize("name", ["page_size", "pools", "Idx", "two_words", "copy", ""])
def test_a_pool_kind_name_must_be_usable_as_a_key(name: str) -> None:
    with pytest.raises(ValueError, match="a name is lower-case"):
        PoolKind(name, BlockCachePoolSpec, Residency.PAGE_VALUES, stream_id=9)


def test_scenario_validates_against_the_registries_too() -> None:
    """`sim.Scenario.model_validate` is the schema of the registries, not the loose base."""
    doc = make_doc(**{"host.swa_pages": 2401})
    scenario = Scenario.model_validate(doc)
    assert scenario == make_scenario(**{"host.swa_pages": 2401})
    assert scenario.model.pools == ("kv", "swa")
    with pytest.raises(ValidationError):
        Scenario.model_validate(make_doc(heal="not_registered"))
    assert Scenario.model_json_schema() == scenario_model().model_json_schema()


def test_storage_refuses_stores_that_do_not_match_the_model_s_pools() -> None:
    storage = make_storage({"kv": [], "swa": []})
    with pytest.raises(ValueError, match="do not match"):
        Storage({"kv": storage.kv}, storage.layout, 1e9, 1e9, 0.5)
