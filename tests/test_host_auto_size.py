"""Host-memory auto-sizing (SGLang 0.5.21 on): the default ratio lowered until the host pools
of a machine's ranks fit its free memory, as `auto_size_hicache` does."""

from __future__ import annotations

from typing import Any

import pytest

from sim.deployment.host_sizing import GIB, NoHostMemory, auto_ratio
from sim.scenario.loading import ScenarioError, build_scenario
from tests.conftest import make_doc


def test_the_rule_worked_by_hand() -> None:
    """100 GiB free, one rank, fraction 0.8: a budget of 0.8 x 90 GiB = 72 GiB; 50 GiB of
    device pools; ratio min(2, 72 x 0.95 / 50) = 1.368."""
    found = auto_ratio(
        requested=2.0, host_memory_gib=100, ranks_per_host=1, fraction=0.8, device_bytes=50 * GIB
    )
    assert found.budget_bytes == 72 * GIB
    assert found.ratio == pytest.approx(1.368)
    roomy = auto_ratio(
        requested=2.0, host_memory_gib=1000, ranks_per_host=1, fraction=0.8, device_bytes=GIB
    )
    assert roomy.ratio == 2.0
    halved = auto_ratio(
        requested=2.0, host_memory_gib=100, ranks_per_host=2, fraction=0.8, device_bytes=50 * GIB
    )
    assert halved.ratio == pytest.approx(1.368 / 2)
    with pytest.raises(NoHostMemory):
        auto_ratio(requested=2.0, host_memory_gib=9, ranks_per_host=1, fraction=0.8, device_bytes=1)


def auto_doc(release: str, **overrides: Any) -> dict[str, Any]:
    doc = make_doc(**{"server.sglang": release, "hardware.host_memory_gib": 40, **overrides})
    del doc["host"]["pages"]
    return doc


def test_a_release_that_auto_sizes_lowers_the_host_pool() -> None:
    """KV 2,000 pages x 64 tokens x 24,576 B + SWA 2,000 x 64 x 18,432 B = 5,505,024,000 B
    (5.13 GiB) of device pools; 0.8 x 30 GiB x 0.95 / 5.13 GiB = 4.4 > 1.2: kept. At 14 GiB:
    0.8 x 4 GiB x 0.95 / 5.13 GiB = 0.593."""
    kept = build_scenario(auto_doc("0.5.23"))
    assert kept.host.pages == 2000 * 12 // 10 + 1
    lowered = build_scenario(auto_doc("0.5.23", **{"hardware.host_memory_gib": 14}))
    assert lowered.host.hicache_ratio == pytest.approx(0.8 * 4 * GIB * 0.95 / 5_505_024_000)
    assert lowered.host.pages == int(2000 * 64 * lowered.host.hicache_ratio) // 64 + 1
    assert "auto-sized" in lowered.sources["host.hicache_ratio"]


def test_releases_before_0_5_21_and_a_written_ratio_do_not_auto_size() -> None:
    old = build_scenario(auto_doc("0.5.20", **{"hardware.host_memory_gib": 14}))
    assert old.host.pages == 2000 * 12 // 10 + 1
    written = build_scenario(
        auto_doc("0.5.23", **{"hardware.host_memory_gib": 14, "host.hicache_ratio": 1.0})
    )
    assert written.host.pages == 2001


def test_without_host_memory_the_source_says_what_would_apply() -> None:
    doc = auto_doc("0.5.23")
    del doc["hardware"]
    scenario = build_scenario(doc)
    assert "hardware.host_memory_gib" in scenario.sources["host.pages"]


def test_a_host_too_small_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError) as refused:
        build_scenario(auto_doc("0.5.23", **{"hardware.host_memory_gib": 9}))
    assert "hardware.host_memory_gib" in str(refused.value)
