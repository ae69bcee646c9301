"""Oracle: multi-turn chat with nothing evicted; round k's prefix hit rate is k/(k+1).

`scenarios/multiturn.yaml` sends 1024 new tokens per turn and no output tokens, so turn k re-sends
k earlier rounds out of k+1: with large pools, everything it re-sends is on the device.
"""

from __future__ import annotations

import pytest

from sim.engine.runner import run
from sim.scenario.loading import load_scenario
from tests.conftest import REPO


def test_multiturn_round_k_hit_rate_is_k_over_k_plus_one_when_nothing_is_evicted() -> None:
    result = run(load_scenario(REPO / "scenarios" / "multiturn.yaml"))
    req = result.tables["requests"]
    assert (req["outcome"] == "finished").all()
    for turn, group in req.groupby("turn"):
        hit = group["device_hit_tokens"].sum() / group["prompt_tokens"].sum()
        assert hit == pytest.approx(turn / (turn + 1), abs=0.01), turn
