"""Every shipped scenario under SGLang's defaults, with its storage faults taken away."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.engine.runner import run
from sim.scenario.loading import load_scenario
from sim.scenario.schema import Scenario
from tests.conftest import REPO

SCENARIOS = sorted((REPO / "scenarios").rglob("*.yaml"))


def without_faults(path: Path) -> Scenario:
    """The scenario with SGLang's hit query, wait_complete prefetches, and no storage fault: no
    failed put or get, no torn object, no outage, no backend eviction (random or by capacity),
    no stale exists. Long runs are cut to 300 s (the trace to its first 1,500 requests)."""
    scenario = load_scenario(path)
    overrides = [
        "storage.hit_query=min_of_pools",
        "storage.exists_ttl_s=0",
        "prefetch.policy=wait_complete",
    ]
    for pool in scenario.model.pools:
        key = f"storage.pools.{pool}"
        overrides += [
            f"{key}.put_fail_prob=0",
            f"{key}.get_fail_prob=0",
            f"{key}.torn_put_prob=0",
            f"{key}.evict_rate_per_s=0",
            f"{key}.put_outage_s=null",
            f"{key}.capacity_gb=null",
        ]
    if scenario.duration_s > 300:
        overrides += ["duration_s=300", f"warmup_s={min(scenario.warmup_s, 30)}"]
    if scenario.workload.kind == "mooncake":
        overrides += ["workload.limit=1500"]
    return load_scenario(path, overrides)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(REPO / "scenarios")))
def test_no_shipped_scenario_discards_without_storage_faults(path: Path) -> None:
    summary = run(without_faults(path)).summary
    assert summary["prefetch_discarded"] == 0, summary


def test_every_shipped_scenario_says_what_it_models() -> None:
    """Each file opens with a comment naming a real configuration, or saying it is a what-if."""
    for path in SCENARIOS:
        lines = path.read_text().split("\nname:")[0].splitlines()
        assert lines and all(line.startswith("#") for line in lines), path
        head = " ".join(line.lstrip("# ") for line in lines).lower()
        assert "real configuration" in head or "what-if" in head, path


def test_a_real_configuration_with_a_mamba_pool_in_buffer_only_mode_names_its_release() -> None:
    """The schema's defaults are SGLang 0.5.21's, which refuses a Mamba pool in buffer_only
    mode: a shipped scenario that says it models a real server with one must name a release
    that serves it (0.5.22 on), whose refusals the scenario check then applies."""
    for path in SCENARIOS:
        scenario = load_scenario(path)
        head = path.read_text().split("\nname:")[0].lower()
        real = "real configuration" in head and "what-if" not in head
        if real and "mamba" in scenario.model.pools and scenario.host.mode == "buffer_only":
            assert scenario.server.sglang in ("0.5.22", "0.5.23", "latest"), path
