"""buffer_only mode's anchors: a waiting request holds no lock on the device; a staged prefetch
pins the device prefix it splices onto only when its reads commit, within a share of the device
pool (SGLang's `try_lock_anchor`, `SGLANG_HICACHE_BUFFER_ANCHOR_LOCK_CAP`); an anchor lost
before the commit declines the fetch, one lost after it (unpinned) is re-fetched at once."""

from __future__ import annotations

from sim.engine.runner import RunResult, run
from sim.model.anchors import AnchorPins
from tests.conftest import QUEUED, make_scenario


def queued(cap: float) -> RunResult:
    return run(make_scenario(**QUEUED, **{"host.anchor_lock_cap": cap}))


def test_pins_stay_within_their_cap() -> None:
    pins = AnchorPins(100)
    assert not pins.try_pin(0), "no anchor, nothing to pin"
    assert pins.try_pin(60) and not pins.try_pin(41) and pins.try_pin(40)
    pins.release(60)
    assert pins.pinned_pages == 40


def test_waiting_requests_do_not_pin_the_device_against_admissions() -> None:
    """A 150-page device and 64-page prefixes under a queue: when every waiting request locked
    its matched prefix from arrival, the locks filled the device and the queue stalled (86 of
    300 requests finished); unlocked, every request finishes."""
    result = run(
        make_scenario(
            **{
                "workload.arrival_rate_per_s": 8,
                "workload.requests": 300,
                "workload.prefixes": 100,
                "workload.prefix_tokens": 4096,
                "device.kv_pages": 150,
                "host.pages": 100,
                "storage.write_gbps": 0.01,
            }
        )
    )
    assert result.summary["requests_finished"] == 300


def test_an_unpinned_anchor_evicted_before_admission_is_refetched_without_a_query() -> None:
    """Without pins (the cap at 0, as before PR #37464) some staged holds lose their anchor and
    are re-fetched at once, assuming storage still holds the span; with SGLang's 0.5 none."""
    unpinned, pinned = queued(0.0), queued(0.5)
    assert pinned.summary["prefetch_refetched"] == 0
    assert unpinned.summary["prefetch_refetched"] > 0
    pf = unpinned.tables["prefetches"].sort_values(["rid", "attempt"])
    for rid, rows in pf.groupby("rid"):
        outcomes = list(rows["outcome"])
        for i, outcome in enumerate(outcomes[:-1]):
            if outcome == "refetched":
                again = rows.iloc[i + 1]
                assert again["attempt"] == rows.iloc[i]["attempt"] + 1, rid
                assert again["issued_s"] - rows.iloc[i]["issued_s"] > 0, rid
    assert unpinned.summary["prefetch_issued"] == int(
        pf["outcome"].isin(["success", "discarded"]).sum()
    ), "a released hold is neither loaded nor discarded"


def test_a_hit_the_device_covers_by_commit_time_is_not_fetched_nor_retried() -> None:
    """Host staging for one span at a time and slow reads: a hit waits to stage while another
    request of its prefix computes it, so the device holds it by the time it commits."""
    contended = {
        **QUEUED,
        "workload.prefixes": 40,
        "workload.arrival_rate_per_s": 8,
        "host.pages": 100,
        "storage.read_gbps": 0.3,
        "host.anchor_lock_cap": 0.5,
    }
    result = run(make_scenario(**contended))
    pf = result.tables["prefetches"].sort_values(["rid", "attempt"])
    covered = pf[pf["outcome"] == "device_covered"]
    assert result.summary["prefetch_device_covered"] == len(covered) > 0
    last = pf.groupby("rid")["attempt"].max()
    assert (covered["attempt"].to_numpy() == last.loc[covered["rid"]].to_numpy()).all()
