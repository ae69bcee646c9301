"""The scheduler's passes: a prefill pass shares one chunk budget among the requests it adds
(SGLang's `rem_chunk_tokens`), and missed prefetches are re-issued a number of passes later
(SGLang's `StoragePrefetchRetries`), so a retry's delay is as long as the passes it spans."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from sim.engine.runner import RunResult, run
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.model.retries import PrefetchRetries
from sim.workload.kinds import Request
from tests.conftest import QUEUED, make_scenario

PAGE = 64


class TwoPrompts:
    """A (10,240 tokens) and B (9,024) arrive together on an empty server."""

    def __init__(self) -> None:
        chains = ChainInterner()
        self.requests = []
        for rid, (name, tokens) in enumerate((("A", 10240), ("B", 9024))):
            pages = tokens // PAGE
            chain = list(chains.extend(ROOT_KEY, ((name, j) for j in range(pages + 1))))
            self.requests.append(Request(rid, 0.0, tokens, 2, chain, pages))

    def arrivals(self) -> Iterator[Request]:
        yield from self.requests

    def follow_up(self, request: Request, finish_s: float) -> None:
        return None


def two_prompts(budget: str) -> RunResult:
    return run(make_scenario(**{"duration_s": 5.0, "compute.chunk_budget": budget}), TwoPrompts())


def node_sizes(result: RunResult) -> list[int]:
    writes = result.tables["writes"]
    return list(writes.loc[writes["verdict"] == "write", "pages"])


def test_requests_of_one_prefill_pass_share_its_chunk_budget() -> None:
    """Pass 1 computes A's first 8,192 tokens; pass 2 A's last 2,048 and, with what is left,
    B's first 6,144 (96 pages, cut at a page), so B's first node ends at 96 pages, not 128,
    and A's first token waits for the whole shared pass. A's one decode step waits for B's
    prefill passes (a prefill batch runs first), so its output page is written last."""
    shared, alone = two_prompts("batch"), two_prompts("request")
    assert node_sizes(alone)[:5] == [128, 32, 128, 13, 1]
    assert node_sizes(shared)[:5] == [128, 32, 96, 45, 1]
    for result in (shared, alone):
        rows = result.tables["requests"].set_index("rid")
        assert rows["finish_s"][0] >= rows["first_token_s"][1]
    first = {
        name: r.tables["requests"].set_index("rid")["first_token_s"]
        for name, r in (("shared", shared), ("alone", alone))
    }
    assert first["shared"][0] > first["alone"][0]
    assert first["shared"][1] == pytest.approx(first["alone"][1])
    assert shared.tables["requests"].set_index("rid").loc[1, "admitted_s"] < first["alone"][0]


# ---------------------------------------------------------------------- retry pacing


def test_a_mark_is_due_the_interval_after_the_first_pass_that_sees_it() -> None:
    retries = PrefetchRetries(max_attempts=8, interval_passes=3)
    retries.mark(5)
    polls = [retries.pop_ready([1, 5], lambda rid: 0) for _ in range(4)]
    assert polls == [[], [], [], [5]], "seen at pass 1, due at pass 4"
    assert not retries.pending


def test_the_queue_head_drops_its_paced_mark_but_not_an_immediate_one() -> None:
    retries = PrefetchRetries(max_attempts=8, interval_passes=3)
    retries.mark(5)
    assert retries.pop_ready([5, 1], lambda rid: 0) == [] and not retries.pending
    retries.refetch(5)
    assert retries.pop_ready([5, 1], lambda rid: 0) == [5], "immediate: at the next pass"


def test_marks_past_the_attempts_or_with_the_interval_off_are_dropped() -> None:
    retries = PrefetchRetries(max_attempts=2, interval_passes=1)
    retries.mark(5)
    retries.refetch(6)
    assert retries.pop_ready([1, 5, 6], lambda rid: 2) == [] and not retries.pending
    off = PrefetchRetries(max_attempts=8, interval_passes=0)
    off.mark(5)
    off.refetch(6)
    assert off.pop_ready([1, 5, 6], lambda rid: 0) == [6], "an immediate re-fetch ignores it"


def retry_gaps(**overrides: object) -> pd.Series:
    pf = run(make_scenario(**QUEUED, **overrides)).tables["prefetches"]
    gaps = pf.sort_values(["rid", "attempt"]).groupby("rid")["issued_s"].diff().dropna()
    assert len(gaps) > 20
    return gaps


def test_a_retry_waits_as_long_as_the_passes_it_spans() -> None:
    """Eight passes are eight decode steps (0.16 s) while the server only decodes, and eight
    prefill passes (0.2 s each for a 4,096-token prompt, more when a batch holds several)
    while it prefills: the delays spread to seconds, and fewer retries fit in the queueing
    time. Paced in seconds, every miss is asked again 0.16 s later."""
    passes = retry_gaps()
    assert passes.min() >= 0.16
    assert passes.median() > 0.5 and passes.max() > 2.0
    seconds = retry_gaps(**{"prefetch.retry.interval_s": 0.16})
    assert seconds.max() < 0.17
    assert len(seconds) > 2 * len(passes)
