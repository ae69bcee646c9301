"""Retries of missed prefetches (SGLang's StoragePrefetchRetries and pending_hit_allocs).

A miss (a hit below the threshold, a rate-limited hit in cache mode, an attempt its policy
stopped before staging) is re-issued for a request still queued, at most
`prefetch.retry.max_attempts` times, never for the queue head, never for a span that has become
shorter than the threshold, never after a discard, never for a hit that could never be staged.
In buffer_only mode a rate-limited hit is parked until staging frees instead of being declined.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from sim.engine.runner import RunResult, run
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.model.prefetch import RETRIED_OUTCOMES
from sim.model.retries import PrefetchRetries
from sim.workload.kinds import Request
from tests.conftest import QUEUED, make_scenario

PAGES = 8
PAGE = 64


def queued_run(**overrides: object) -> RunResult:
    return run(make_scenario(**QUEUED, **overrides))


def attempts_by_request(pf: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    return pf.sort_values(["rid", "attempt"]).groupby("rid")


@pytest.mark.parametrize("max_attempts", [0, 1, 3, 8])
def test_retries_follow_a_retried_miss_and_never_pass_the_limit(max_attempts: int) -> None:
    result = queued_run(**{"prefetch.retry.max_attempts": max_attempts})
    pf, req = result.tables["prefetches"], result.tables["requests"]
    assert pf["attempt"].max() <= max_attempts
    for rid, rows in attempts_by_request(pf):
        assert list(rows["attempt"]) == list(range(len(rows))), rid
        assert set(rows["outcome"].iloc[:-1]) <= RETRIED_OUTCOMES, rid
        assert (rows["issued_s"].diff().dropna() >= 0.16 - 1e-9).all(), rid
    last_attempt = pf.groupby("rid")["attempt"].max()
    retried = req.set_index("rid")["prefetch_retries"]
    # A re-issue that finds the span now too short spends an attempt but asks nothing
    # (SGLang's `_retry_storage_prefetch` counts before `_prefetch_kvcache`): at most one more.
    gap = retried.reindex(last_attempt.index) - last_attempt
    assert gap.isin([0, 1]).all()
    assert (retried <= max_attempts).all()
    assert result.summary["prefetch_retries"] == int((pf["attempt"] > 0).sum())
    if max_attempts == 0:
        assert result.summary["prefetch_retries"] == 0
    else:
        assert result.summary["prefetch_retries"] > 0


def test_a_retry_never_asks_for_a_span_shorter_than_the_threshold() -> None:
    result = queued_run(**{"prefetch.threshold_tokens": 1024})
    pf = result.tables["prefetches"]
    assert result.summary["prefetch_retries"] > 0
    assert (pf["span_pages"] >= 1024 // PAGE).all()


def test_a_discard_is_not_retried() -> None:
    result = run(make_scenario(**QUEUED, **{"storage.pools.swa.put_fail_prob": 0.5}))
    pf = result.tables["prefetches"]
    assert result.summary["prefetch_discarded"] > 0
    for rid, rows in attempts_by_request(pf):
        assert "discarded" not in set(rows["outcome"].iloc[:-1]), rid


def test_retries_off_change_nothing_else_when_no_retry_would_fire() -> None:
    """With no queue no retry is issued: the runs differ only in the timers armed for them."""
    on, off = (run(make_scenario(**{"prefetch.retry.max_attempts": n})).summary for n in (8, 0))
    assert on["prefetch_retries"] == 0
    ignored = {"wall_s", "events"}
    assert {k: v for k, v in on.items() if k not in ignored} == {
        k: v for k, v in off.items() if k not in ignored
    }


class Queue:
    """X warms storage, then is evicted by Y while R (prefix X) waits behind Z.

    A (prefix X) runs alone and its backup commits at once; R arrives before that, misses, and
    queues behind Y and Z, each needing the whole device. When R's retry comes due, Y has
    evicted X from the device and Z is the head, so the retry finds X in storage.
    """

    def __init__(self) -> None:
        chains = ChainInterner()
        self.chain = {
            name: chains.extend(ROOT_KEY, ((name, j) for j in range(PAGES + 1))) for name in "XYZ"
        }

    def arrivals(self) -> Iterator[Request]:
        x, y, z = (list(self.chain[name]) for name in "XYZ")
        yield Request(0, 0.0, PAGES * PAGE, 2, x, PAGES)
        yield Request(1, 0.001, PAGES * PAGE, 50, y, PAGES)
        yield Request(2, 0.0015, PAGES * PAGE, 2, z, PAGES)
        yield Request(3, 0.002, PAGES * PAGE, 2, x, PAGES)

    def follow_up(self, request: Request, finish_s: float) -> None:
        return None


def run_queue(**overrides: object) -> RunResult:
    scenario = make_scenario(
        **{
            "duration_s": 20.0,
            "device.kv_pages": PAGES + 4,
            "device.swa_pages": PAGES + 4,
            **overrides,
        }
    )
    return run(scenario, Queue())


def test_a_retry_finds_what_storage_gained_while_the_request_queued() -> None:
    result = run_queue()
    pf = result.tables["prefetches"]
    r = pf[pf["rid"] == 3].sort_values("attempt")
    assert list(r["outcome"]) == ["revoked", "success"]
    assert result.summary["prefetch_retry_success"] == 1
    req = result.tables["requests"].set_index("rid")
    assert req.loc[3, "l3_loaded_tokens"] == PAGES * PAGE
    without = run_queue(**{"prefetch.retry.max_attempts": 0}).tables["requests"]
    assert without.set_index("rid").loc[3, "l3_loaded_tokens"] == 0


def test_the_queue_head_is_never_re_issued() -> None:
    """Z (rid 2) misses too, but it is the head when its retry comes due."""
    pf = run_queue().tables["prefetches"]
    assert list(pf.loc[pf["rid"] == 2, "attempt"]) == [0]


# ---------------------------------------------------------------------- parked hits


PRESSED = {
    **QUEUED,
    "workload.prefixes": 40,
    "workload.arrival_rate_per_s": 10,
    "host.pages": 100,
    "storage.read_gbps": 0.3,
}
"""Host staging for one span at a time and slow reads: hits contend for staging."""


def test_buffer_mode_parks_a_rate_limited_hit_and_cache_mode_declines_it() -> None:
    parked = run(make_scenario(**PRESSED, **{"prefetch.policy": "wait_complete"}))
    declined = run(make_scenario(**PRESSED, **{"host.mode": "cache"}))
    assert parked.summary["prefetch_declined"] == 0
    assert parked.summary["prefetch_success"] > 0
    assert declined.summary["prefetch_declined"] > 0


def test_a_parked_hit_stopped_by_its_policy_is_declined_and_its_admitted_request_not_retried():
    """The policy stops a parked hit when its request is admitted: the miss is marked, but a
    mark is moot for an admitted request (SGLang's `pop_prefetch_loaded_tokens` drops it)."""
    result = run(make_scenario(**PRESSED))
    pf = result.tables["prefetches"]
    declined = pf[pf["outcome"] == "declined"]
    assert len(declined) > 0
    assert declined["terminated"].all()
    admitted = result.tables["requests"].set_index("rid").loc[declined["rid"], "admitted_s"]
    # A policy may also stop a hit at a pass whose memory check then keeps the request
    # waiting: that miss is retried like any other.
    declined = declined[admitted.to_numpy() == declined["resolved_s"].to_numpy()]
    assert len(declined) > 0
    last = pf.groupby("rid")["attempt"].max()
    assert (declined["attempt"].to_numpy() == last.loc[declined["rid"]].to_numpy()).all()
    assert result.summary["requests_finished"] == result.summary["requests"]


def test_a_hit_that_could_never_be_staged_is_declined_once() -> None:
    """Spans of 64 pages against a 40-page host (36 for loads): asking again cannot help. (The
    32-page chunks keep each node small enough to be written through that host.)"""
    result = queued_run(
        **{"host.pages": 40, "prefetch.policy": "wait_complete", "compute.chunk_tokens": 2048}
    )
    assert result.summary["prefetch_declined"] > 0
    for rid, rows in attempts_by_request(result.tables["prefetches"]):
        assert "declined" not in set(rows["outcome"].iloc[:-1]), rid


# ---------------------------------------------------------------------- per-release switches


def test_0_5_19_re_issues_the_queue_head_too() -> None:
    """Without the head exemption (`head_exempt: false`, 0.5.19's scheduler pass) Z's retries
    come due while it heads the queue and go out, until its attempts run out or it is admitted."""
    pf = run_queue(**{"prefetch.retry.head_exempt": False}).tables["prefetches"]
    attempts = list(pf.loc[pf["rid"] == 2, "attempt"])
    assert attempts[:2] == [0, 1]
    assert attempts == list(range(len(attempts))) and len(attempts) <= 9


def test_short_spans_are_marked_and_spend_attempts_without_a_prefetch() -> None:
    """0.5.19 and 0.5.20 mark a span too short to prefetch: its re-issues ask nothing unless the
    span grew, but count against the attempts."""
    overrides = {"prefetch.threshold_tokens": 1024}
    marked = queued_run(**overrides, **{"prefetch.retry.short_spans": True}).tables["requests"]
    plain = queued_run(**overrides).tables["requests"]
    assert marked["prefetch_retries"].sum() > plain["prefetch_retries"].sum()
    assert (marked.loc[marked["prefetch"] == "none", "prefetch_retries"] > 0).any()
    assert (marked["prefetch_retries"] <= 8).all()


def test_an_expired_deadline_cancels_the_retry_and_blocks_later_ones() -> None:
    """0.5.23: a prefetch stopped by its timeout deadline drops the pending retry; no later
    miss or re-fetch marks the request again until it leaves the queue."""
    retries = PrefetchRetries(8, 1, deadline_cancels=True)
    retries.mark(1)
    retries.expire(1)
    assert not retries.pending
    retries.mark(1)
    retries.refetch(1)
    assert retries.pop_ready([1], lambda rid: 0) == [] and not retries.pending
    retries.cancel(1)
    retries.refetch(1)
    assert retries.pop_ready([1], lambda rid: 0) == [1], "a new request under the same id"
    before = PrefetchRetries(8, 1)
    before.mark(2)
    before.expire(2)
    assert before.marked(2), "0.5.19-0.5.22: the stopped prefetch is retried as any miss"


def test_a_new_miss_replaces_a_pending_mark() -> None:
    """Every release: the wait restarts at the next pass, and an immediate mark becomes paced."""
    retries = PrefetchRetries(8, 2)
    retries.mark(1)
    assert retries.pop_ready([0, 1], lambda rid: 0) == []
    retries.mark(1)
    assert [retries.pop_ready([0, 1], lambda rid: 0) for _ in range(3)] == [[], [], [1]]
    retries.refetch(1)
    retries.mark(1)
    assert retries.pop_ready([0, 1], lambda rid: 0) == [], "paced now"


def test_due_retries_go_out_in_queue_order_and_wait_outside_the_queue() -> None:
    retries = PrefetchRetries(8, 1)
    for rid in (3, 1, 2):
        retries.mark(rid)
    assert retries.pop_ready([0, 1, 2], lambda rid: 0) == []
    assert retries.pop_ready([0, 2, 1], lambda rid: 0) == [2, 1]
    assert retries.marked(3), "not queued: neither re-issued nor dropped"
