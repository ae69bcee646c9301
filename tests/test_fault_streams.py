"""Every fault source draws from its own stream: changing one source's rate never moves another
source's draws (common random numbers across variants)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.engine.metrics import WALL_CLOCK_KEYS
from sim.engine.runner import run
from sim.model.build import build_cluster
from sim.model.faults import FaultStreams
from sim.model.object_store import StoragePool
from sim.scenario.loading import load_scenario

REPO = Path(__file__).resolve().parents[1]


def test_a_read_failure_that_never_fires_moves_no_summary_value() -> None:
    """The demo with SWA reads failing at the smallest positive rate: the read draws are taken
    but none fails, so the run is the demo's, value for value (with one shared stream the
    read draws shifted the write failures: written pages 27,966 -> 27,866)."""
    demo = REPO / "scenarios" / "demo.yaml"
    plain = run(load_scenario(demo)).summary
    drawn = run(load_scenario(demo, ["storage.pools.swa.get_fail_prob=5e-324"])).summary
    moved = {
        key: (plain[key], drawn[key])
        for key in plain
        if key not in WALL_CLOCK_KEYS and plain[key] != drawn[key]
    }
    assert not moved


def pool(get_fail: float = 0.0, put_fail: float = 0.0, torn: float = 0.0) -> StoragePool:
    return StoragePool(
        "swa", 10, None, get_fail, put_fail, FaultStreams.seeded(5), torn_put_prob=torn
    )


def test_write_failures_do_not_depend_on_the_read_or_tear_rates() -> None:
    keys = list(range(2000))
    outcomes = []
    for get_fail, torn in ((0.0, 0.0), (0.3, 0.0), (0.0, 0.2), (0.3, 0.2)):
        store = pool(get_fail=get_fail, put_fail=0.1, torn=torn)
        for start in range(0, 2000, 100):
            store.get(keys[start : start + 100])
            outcomes.append(store.put(keys[start : start + 100], 0.0))
    per_variant = len(outcomes) // 4
    first = outcomes[:per_variant]
    assert 0 < sum(ok.count(False) for ok in first) < 2000
    for variant in range(1, 4):
        assert outcomes[variant * per_variant : (variant + 1) * per_variant] == first


def test_tears_do_not_depend_on_the_write_or_read_rates() -> None:
    """The same shards tear whatever the write and read failure rates (among the keys stored
    either way)."""
    keys = list(range(2000))
    plain = pool(torn=0.05)
    plain.put(keys, 0.0)
    failing = pool(put_fail=0.3, torn=0.05, get_fail=0.2)
    failing.get(keys)
    failing.put(keys, 0.0)
    both = [key for key in keys if key in failing]
    assert 0 < len(both) < len(keys)
    torn_plain = {key for key in both if plain.get([key]) == 0}
    assert torn_plain
    assert {key for key in both if key in failing._torn} == torn_plain


def test_read_failures_do_not_depend_on_the_write_or_tear_rates() -> None:
    keys = list(range(500))
    served = []
    for put_fail, torn in ((0.0, 0.0), (0.2, 0.1)):
        store = pool(get_fail=0.01, put_fail=put_fail, torn=torn)
        for key in keys:  # stored by hand: the same objects, no write draw taken
            store._objects[key] = 0
        store.put(keys[:100], 0.0)  # writes draw (skipped keys too) without moving reads
        served.append([store.get(keys[start:]) for start in range(0, 500, 25)])
    assert served[0] == served[1]
    assert any(run < 500 - start for run, start in zip(served[0], range(0, 500, 25), strict=True))


@pytest.mark.parametrize(
    "changed",
    [
        "storage.pools.kv.get_fail_prob=0.2",
        "storage.pools.swa.put_fail_prob=0.3",
        "storage.pools.swa.torn_put_prob=0.1",
        "storage.pools.kv.evict_rate_per_s=2.0",
    ],
)
def test_each_source_s_streams_are_its_own(changed: str) -> None:
    """The streams a build hands out do not depend on any source's rate: every fault stream
    and the eviction streams start where they start without the change."""
    path = REPO / "scenarios" / "layouts" / "kv_swa.yaml"

    def streams(*overrides: str) -> dict[str, object]:
        cluster = build_cluster(load_scenario(path, list(overrides)))
        states: dict[str, object] = {}
        for name, store in cluster.storage.pools.items():
            for source in ("get", "put", "torn"):
                rng: np.random.Generator = getattr(store.faults, source)
                states[f"{name}.{source}"] = rng.bit_generator.state
        for eviction in cluster.evictions:
            states[f"{eviction.pool.name}.evict"] = eviction.rng.bit_generator.state
        return states

    plain, other = streams(), streams(changed)
    shared = plain.keys() & other.keys()
    assert len(set(map(str, plain.values()))) == len(plain)  # no two sources share a stream
    assert {key: plain[key] for key in shared} == {key: other[key] for key in shared}
