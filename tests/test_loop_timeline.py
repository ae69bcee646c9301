"""Timelines of the repeated-failure loop (docs/fidelity.md): one deterministic aux hole.

Two prefixes A and B take turns on a device that holds one of them, so every return to A
misses the device and prefetches A from storage. A's first write loses its SWA tail (an outage
of the SWA store), which leaves a KV-believed prefix whose aux tail is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.engine.runner import RunResult, run
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.workload.kinds import Request
from tests.conftest import make_scenario

PAGES = 8
PAGE = 64


class Alternating:
    """A, B, A, B, ... every 10 s; prompts end 10 tokens into a page, so nodes end at A's end."""

    def __init__(self, rounds: int) -> None:
        chains = ChainInterner()
        self.chains = {
            name: chains.extend(ROOT_KEY, ((name, j) for j in range(PAGES))) for name in "AB"
        }
        self.rounds = rounds

    def arrivals(self) -> Iterator[Request]:
        for i in range(self.rounds):
            name = "AB"[i % 2]
            yield Request(i, 10.0 * i, PAGES * PAGE + 10, 10, list(self.chains[name]), PAGES)

    def follow_up(self, request: Request, finish_s: float) -> None:
        return None


def simulate(heal: str, rounds: int = 8) -> RunResult:
    scenario = make_scenario(
        **{
            "heal": heal,
            "duration_s": 10.0 * rounds + 5,
            "device.kv_pages": PAGES + 4,
            "device.swa_pages": PAGES + 4,
            "storage.pools.swa.put_outage_s": [0.0, 5.0],
            "prefetch.policy": "wait_complete",
        }
    )
    return run(scenario, Alternating(rounds))


def a_prefetches(result: RunResult) -> list[tuple[int, str]]:
    pf = result.tables["prefetches"]
    issued = pf[pf["outcome"].isin(["success", "discarded"])]
    return [(int(r.rid), str(r.outcome)) for r in issued.itertuples() if r.rid % 2 == 0]


def test_without_heal_every_return_to_the_prefix_is_discarded_and_nothing_is_rewritten() -> None:
    result = simulate("none")
    assert a_prefetches(result) == [(2, "discarded"), (4, "discarded"), (6, "discarded")]
    writes = result.tables["writes"]
    after_first_round = writes[writes["t_s"] > 15.0]
    assert list(after_first_round["verdict"]) == ["skip_covered"] * 6
    assert result.summary["rewrite_pages"] == 0
    assert result.summary["loops"] == 1
    assert result.summary["loop_length_max"] == 3
    assert result.summary["heal_rate"] == 0.0


@pytest.mark.parametrize("heal", ["keep_pages", "drop_chain", "exact"])
def test_heal_closes_the_loop_with_one_discard_and_one_rewrite(heal: str) -> None:
    result = simulate(heal)
    assert a_prefetches(result) == [(2, "discarded"), (4, "success"), (6, "success")]
    writes = result.tables["writes"]
    rewrites = writes[writes["rewrite_pages"] > 0]
    assert len(rewrites) == 1
    assert int(rewrites["pages"].iloc[0]) == PAGES
    dropped = result.tables["prefetches"]["dropped_beliefs"].sum()
    assert int(rewrites["rewrite_pages"].iloc[0]) == dropped == result.summary["rewrite_pages"]
    assert int(rewrites["swa_keys"].iloc[0]) == 2 and int(rewrites["swa_failed"].iloc[0]) == 0
    assert result.summary["heal_rate"] == 1.0
    assert result.summary["loop_length_max"] == 1


def test_keep_pages_drops_only_the_unserved_tail() -> None:
    pf = simulate("keep_pages").tables["prefetches"]
    first = pf[pf["outcome"] == "discarded"].iloc[0]
    assert first["outcome"] == "discarded"
    assert list(first["swa_keys"]) == list(Alternating(1).chains["A"][-2:])
    assert first["swa_hit_pages"] == 0
    assert first["dropped_beliefs"] == 2


def test_drop_chain_drops_every_belief_of_the_span() -> None:
    pf = simulate("drop_chain").tables["prefetches"]
    assert list(pf.loc[pf["outcome"] == "discarded", "dropped_beliefs"]) == [PAGES]


def test_the_first_write_lost_its_swa_tail_in_the_outage() -> None:
    writes = simulate("none").tables["writes"]
    first = writes.iloc[0]
    assert (first["verdict"], first["swa_keys"], first["swa_failed"]) == ("write", 2, 2)
