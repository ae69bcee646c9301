"""Timeline of a shared context restored from storage after a branch inside it.

A context C (16 pages) is followed by distinct questions of 4 pages. The first, C+Q0, is one
node whose aux tail sits at its own end, not at C's end. C+Q1 arrives while C's KV is still on
the device and branches there; then a filler pushes C off the device before each later
question. Storage can restore C only once some write put C's aux tail at C's end, and which
write does that depends on the device's retention and on the existence-cache beliefs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.engine.runner import RunResult, run
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.workload.kinds import Request
from tests.conftest import make_scenario

PAGE = 64
CONTEXT = 16
QUESTION = 4
FILLER = 44


class BranchAfterContext:
    """C+Q0 at 0 s, C+Q1 at 10 s, then a filler and C+Qi every 20 s (i = 2, 3, ...)."""

    def __init__(self, questions: int) -> None:
        self.chains = ChainInterner()
        self.context = self.chains.extend(ROOT_KEY, (("C", j) for j in range(CONTEXT)))
        self.questions = questions

    def _request(self, rid: int, t_s: float, pages: list[int]) -> Request:
        return Request(rid, t_s, len(pages) * PAGE + 10, 10, pages, len(pages))

    def question(self, i: int) -> list[int]:
        return self.context + self.chains.extend(
            self.context[-1], ((i, j) for j in range(QUESTION))
        )

    def arrivals(self) -> Iterator[Request]:
        yield self._request(0, 0.0, self.question(0))
        yield self._request(1, 10.0, self.question(1))
        rid = 2
        for i in range(2, self.questions):
            filler = self.chains.extend(ROOT_KEY, ((f"F{i}", j) for j in range(FILLER)))
            yield self._request(rid, 20.0 * i - 20.0, filler)
            yield self._request(rid + 1, 20.0 * i - 10.0, self.question(i))
            rid += 2

    def follow_up(self, request: Request, finish_s: float) -> None:
        return None


QUESTIONS = 5


def simulate(**overrides: object) -> RunResult:
    scenario = make_scenario(
        **{
            "duration_s": 20.0 * QUESTIONS,
            "device.kv_pages": FILLER + 4,
            "device.swa_pages": 64,
            "storage.hit_query": "min_of_pools",
            "prefetch.policy": "wait_complete",
            **overrides,
        }
    )
    return run(scenario, BranchAfterContext(QUESTIONS))


def first_restoring_question(result: RunResult) -> int | None:
    """The question index whose request first loaded C from storage, or None."""
    req = result.tables["requests"]
    questions = req[(req["rid"] <= 1) | (req["rid"] % 2 == 1)]
    for i, row in enumerate(questions.itertuples()):
        if row.l3_loaded_tokens >= CONTEXT * PAGE:
            return i
    return None


@pytest.mark.parametrize("heal", ["none", "keep_pages", "drop_chain", "exact"])
@pytest.mark.parametrize(
    ("retention", "beliefs", "checkpoint_tokens", "q1_device_pages", "first_restore"),
    [
        # SGLang today: C+Q1 finds C's KV on the device but no window at C's end, so it backs
        # off and recomputes through C; it keeps the window at the branch point, and its backup
        # writes C's tail once the hit-query heal (C+Q1 found no restorable endpoint) has
        # dropped C's beliefs. C+Q2, after C left the device, loads C from storage.
        ("window", "kv", None, 0, 2),
        ("window", "per_pool", None, 0, 2),
        # The earlier model: C+Q1 resumes on the device inside C's node and asks nothing of
        # storage; the upper half of the split is covered by KV beliefs, so no write puts a tail
        # at C and C is never restored. Per-pool beliefs write the missing SWA tail alone.
        ("whole_node", "kv", None, CONTEXT, None),
        ("whole_node", "per_pool", None, CONTEXT, 2),
        # A checkpoint whose multiple is C's end: the device keeps a window there and C+Q0's
        # own write stores C's tail, so C+Q1 resumes at C on the device and C+Q2 loads it.
        ("window", "kv", CONTEXT * PAGE, CONTEXT, 2),
        ("whole_node", "kv", CONTEXT * PAGE, CONTEXT, 2),
    ],
)
def test_which_question_first_restores_the_context(
    heal: str,
    retention: str,
    beliefs: str,
    checkpoint_tokens: int | None,
    q1_device_pages: int,
    first_restore: int | None,
) -> None:
    result = simulate(
        heal=heal,
        **{
            "device.swa_retention": retention,
            "existence_cache.beliefs": beliefs,
            "model.swa.checkpoint_tokens": checkpoint_tokens,
        },
    )
    req = result.tables["requests"].set_index("rid")
    assert req.loc[1, "device_hit_tokens"] == q1_device_pages * PAGE
    assert req.loc[1, "device_backoff_tokens"] == (CONTEXT - q1_device_pages) * PAGE
    assert result.summary["prefetch_discarded"] == 0
    assert first_restoring_question(result) == first_restore
