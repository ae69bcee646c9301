"""The backend's bandwidth: a lone server's own, or shared by the transfers of a cluster."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from sim.engine.links import DedicatedLink, Link, SharedBandwidth

GBPS = 1e9


def finish_times(
    link: Link, env: simpy.Environment, starts: list[tuple[float, float]]
) -> list[float]:
    """Start a transfer of `nbytes` at each (start_s, nbytes); when each one ended."""
    ends = [float("nan")] * len(starts)

    def one(i: int, start_s: float, nbytes: float) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(start_s)
        yield from link.transfer(nbytes)
        ends[i] = env.now

    for i, (start_s, nbytes) in enumerate(starts):
        env.process(one(i, start_s, nbytes))
    env.run()
    return ends


def test_one_transfer_alone_takes_what_a_dedicated_link_takes() -> None:
    for nbytes in (1.0, 12_345.0, 3.3e9):
        env = simpy.Environment()
        shared = finish_times(SharedBandwidth(env, 7 * GBPS), env, [(0.5, nbytes)])
        env = simpy.Environment()
        dedicated = finish_times(DedicatedLink(env, 7 * GBPS), env, [(0.5, nbytes)])
        assert shared == dedicated


def test_transfers_in_flight_share_the_bandwidth_equally() -> None:
    env = simpy.Environment()
    ends = finish_times(SharedBandwidth(env, GBPS), env, [(0.0, 1e9), (0.0, 1e9)])
    assert ends == pytest.approx([2.0, 2.0])
    env = simpy.Environment()
    # Alone for 0.5 s (half done), then at half rate: the first ends at 1.5 s, the second,
    # half done by then, at 2.0 s.
    ends = finish_times(SharedBandwidth(env, GBPS), env, [(0.0, 1e9), (0.5, 1e9)])
    assert ends == pytest.approx([1.5, 2.0])


def test_each_transfer_is_capped_by_its_server_link() -> None:
    env = simpy.Environment()
    link = SharedBandwidth(env, 10 * GBPS, flow_cap_bytes_per_s=2 * GBPS)
    ends = finish_times(link, env, [(0.0, 1e9)] * 3)
    assert ends == pytest.approx([0.5] * 3), "three 2 GB/s links under a 10 GB/s backend"
    env = simpy.Environment()
    link = SharedBandwidth(env, 10 * GBPS, flow_cap_bytes_per_s=4 * GBPS)
    ends = finish_times(link, env, [(0.0, 1e9)] * 4)
    assert ends == pytest.approx([0.4] * 4), "four 4 GB/s links share 10 GB/s"


@pytest.mark.parametrize("seed", range(20))
def test_bytes_are_conserved_and_the_backend_never_exceeds_its_bandwidth(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    starts = [(float(rng.uniform(0, 5)), float(rng.uniform(1, 1e9))) for _ in range(n)]
    cap = None if seed % 2 else float(rng.uniform(0.1, 2)) * GBPS
    env = simpy.Environment()
    link = SharedBandwidth(env, GBPS, flow_cap_bytes_per_s=cap)
    ends = finish_times(link, env, starts)
    total = sum(nbytes for _, nbytes in starts)
    assert link.requested_bytes == pytest.approx(total, rel=1e-12)
    assert link.served_bytes == pytest.approx(total, rel=1e-9)
    assert link.in_flight == 0
    assert link.peak_rate_bytes_per_s <= GBPS * (1 + 1e-12)
    assert link.busy_s >= total / GBPS * (1 - 1e-9), "no faster than the whole bandwidth"
    for (start_s, nbytes), end_s in zip(starts, ends, strict=True):
        fastest = nbytes / (GBPS if cap is None else min(cap, GBPS))
        assert end_s - start_s >= fastest * (1 - 1e-9)
    if cap is None:
        # Work-conserving: while anything is in flight the whole bandwidth is used.
        assert link.busy_s == pytest.approx(total / GBPS, rel=1e-9)
