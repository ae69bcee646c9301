"""Cache mode's allocation shrink (SGLang's `_try_alloc_storage_hit`): a storage hit the host
cannot stage whole, even after evicting host copies, shrinks to what fits when that still meets
the threshold. Shrunk to a page (every release through 0.5.23) the aux tails are asked at an
endpoint storage need not hold, and the hybrid check discards; shrunk to a restorable endpoint
(a what-if, `prefetch.shrink: restorable`) it loads."""

from __future__ import annotations

from typing import Any

import pytest

from sim.engine.runner import run
from sim.model.host import HostPool
from tests.conftest import QUEUED, make_scenario

SMALL_HOST = {
    **QUEUED,
    "host.mode": "cache",
    "host.pages": 150,
    "storage.read_gbps": 0.3,
    "workload.arrival_rate_per_s": 10,
}
"""Hits of up to 64 pages, host staging for loads of 75 (half the pool), slow reads: hits
contend for staging."""


def summary(shrink: str) -> dict[str, Any]:
    return run(make_scenario(**SMALL_HOST, **{"prefetch.shrink": shrink})).summary


def test_cache_mode_loads_stage_within_half_the_host_pool() -> None:
    """`prefetch_capacity_limit` is half the host pool in cache mode (0.9 in buffer_only)."""
    host = HostPool(100, load_fraction=0.5)
    assert host.can_ever_stage(50) and not host.can_ever_stage(51)
    host.prefetch_pages = 30
    assert host.stageable_pages() == 20


@pytest.mark.parametrize("shrink", ["page", "restorable"])
def test_a_hit_that_does_not_fit_shrinks_instead_of_being_declined(shrink: str) -> None:
    none, shrunk = summary("none"), summary(shrink)
    assert none["prefetch_shrunk"] == 0
    assert shrunk["prefetch_shrunk"] > 0
    assert shrunk["prefetch_issued"] > none["prefetch_issued"]


def test_a_page_shrink_lands_on_aux_holes_a_restorable_one_does_not() -> None:
    page, restorable = summary("page"), summary("restorable")
    assert page["prefetch_discarded"] >= page["prefetch_shrunk"] // 2 > 0
    assert restorable["prefetch_discarded"] == 0
    assert restorable["l3_loaded_tokens"] > page["l3_loaded_tokens"]
