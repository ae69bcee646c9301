"""The requests decoding on one server: SGLang's running batch, stepped as one forward.

Every decode step gives each running request one token, in a time that grows with the batch and
the context it attends (`Timing.decode_batch_step_s`). The batch keeps only sums (its size and
its total context) and a heap of the step each request ends at, so a step costs the same
whatever the batch, and runs of steps between two changes are timed in one go.
"""

from __future__ import annotations

import heapq
from itertools import pairwise

from sim.engine.job import Job
from sim.model.build import Timing

Gap = tuple[float, float, int]
"""A row of the `decode_gaps` table (`sim.engine.rows.DecodeGap`'s fields), as a plain tuple:
a run of steps adds one a step."""


class RunningBatch:
    """The running batch of one server: who decodes, until which step, and what it attends.

    A request joins with its first token (from its prefill) and needs `output_tokens - 1`
    steps more (SGLang's prefill samples the first token); at its k-th step it attends its
    prompt and k + 1 tokens of output."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.steps = 0
        """Decode steps run so far."""
        self.size = 0
        self._ends: list[tuple[int, int, int, Job]] = []
        """(the step it ends at, its id, the step it joined at, the request), a heap."""
        self._context_base = 0
        """Sum over the batch of prompt + 1 - joined step: the context is this + size x steps."""
        self._last_step_s: float | None = None
        self._joined: dict[float, int] = {}
        """Requests joined since the last step, by the time of their first token."""

    def join(self, job: Job, first_token_s: float) -> None:
        joined = self.steps
        heapq.heappush(self._ends, (joined + job.req.output_tokens - 1, job.req.rid, joined, job))
        self._context_base += job.req.prompt_tokens + 1 - joined
        self.size += 1
        self._joined[first_token_s] = self._joined.get(first_token_s, 0) + 1

    def context_tokens(self) -> int:
        return self._context_base + self.size * self.steps

    def steps_to_next_end(self) -> int:
        return self._ends[0][0] - self.steps

    def step_ends(self, start_s: float, steps: int) -> list[float]:
        """When each of the next `steps` steps ends, if the batch does not change."""
        size, context, step_s = self.size, self.context_tokens(), self.timing.decode_batch_step_s
        ends, t = [], start_s
        for _ in range(steps):
            t += step_s(size, context)
            context += size
            ends.append(t)
        return ends

    def advance(self, ends: list[float]) -> tuple[list[Job], list[Gap]]:
        """Run the steps ending at `ends`: the requests they finish (by id where several end
        at one step), and each step's token gaps."""
        gaps = self._gaps(ends)
        self.steps += len(ends)
        done: list[Job] = []
        heap = self._ends
        while heap and heap[0][0] <= self.steps:
            _, _, joined, job = heapq.heappop(heap)
            self._context_base -= job.req.prompt_tokens + 1 - joined
            self.size -= 1
            done.append(job)
        return done, gaps

    def _gaps(self, ends: list[float]) -> list[Gap]:
        """The first step's gap for the requests that decoded before (since the last step,
        a prefill may have paused them) and for each group joined since; one row a step after."""
        first = ends[0]
        joined = sum(self._joined.values())
        gaps = [(first, first - t, n) for t, n in self._joined.items()]
        if self._last_step_s is not None and self.size > joined:
            gaps.append((first, first - self._last_step_s, self.size - joined))
        size = self.size
        gaps.extend([(t, t - before, size) for before, t in pairwise(ends)])
        self._joined.clear()
        self._last_step_s = ends[-1]
        return gaps
