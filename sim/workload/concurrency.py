"""A closed loop of clients at a fixed concurrency: what SGLang's `bench_serving` runs with
`--max-concurrency C --num-prompts N --dataset-name random`.

`bench_serving` sends every prompt at once (its default request rate is infinite) through a
semaphore of `max_concurrency` (0.5.23: benchmark/serving.py:benchmark, `limited_request_func`):
C requests start at t = 0, and each that finishes lets the next prompt in list order start at
once. Here the first C requests arrive at 0 and each finished one is followed by the next at its
finish time, the multi-turn workload's follow-up mechanism (`Workload.follow_up`).

Lengths are drawn as `--dataset-name random` draws them (0.5.23:
benchmark/datasets/common.py:compute_random_lens): every input length, then every output length,
uniform over the integers from max(int(full × range_ratio), 1) to full; `--random-range-ratio`
defaults to 0.0, so a prompt of "1,024 tokens" is on average about 512. The benchmark's prompts
are ShareGPT text cut or repeated to each length, a different conversation each: no two share a
prefix, so every page key is fresh.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sim.core.spec import KeyedError, Probability
from sim.workload.kinds import (
    FRESH_KEY_BASE,
    MAX_CONTEXTS,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    Request,
    Workload,
    WorkloadSpec,
)

Length = Annotated[int, Field(strict=True, ge=1, le=MAX_REQUEST_TOKENS)]


class ConcurrencyWorkload(WorkloadSpec):
    """`workload: {kind: concurrency, ...}`: `concurrency` clients send `requests` prompts in
    all, each its next the moment its previous one finished."""

    kind: Literal["concurrency"]
    concurrency: Annotated[int, Field(strict=True, ge=1, le=MAX_CONTEXTS)] = 16
    """`--max-concurrency`: requests in flight until the prompts run out."""
    requests: Annotated[int, Field(strict=True, ge=1, le=MAX_REQUESTS)] = 64
    """`--num-prompts`."""
    input_tokens: Length = 1024
    """`--random-input-len`: the longest prompt drawn."""
    output_tokens: Length = 1024
    """`--random-output-len`: the longest answer drawn."""
    range_ratio: Probability = 0.0
    """`--random-range-ratio` (bench_serving's default 0.0): the shortest length drawn is this
    share of the longest; 1.0 makes every request exactly `input_tokens` / `output_tokens`."""

    def check(self, page_size: int) -> None:
        total = self.input_tokens + self.output_tokens
        if total > MAX_REQUEST_TOKENS:
            raise KeyedError(
                "workload.input_tokens",
                f"a request of {total:,} tokens (input + output) is over the "
                f"{MAX_REQUEST_TOKENS:,} a request may hold",
            )

    def build(self, page_size: int, rng: np.random.Generator) -> Workload:
        return ClosedLoop(self, page_size, rng)


def random_lengths(full: int, range_ratio: float, n: int, rng: np.random.Generator) -> list[int]:
    """`n` lengths uniform over [max(int(full × range_ratio), 1), full], as bench_serving draws
    them."""
    low = max(int(full * range_ratio), 1)
    return rng.integers(low, full + 1, size=n).tolist()


class ClosedLoop:
    """The first `concurrency` prompts at t = 0, then one at each finish, in list order."""

    def __init__(self, spec: ConcurrencyWorkload, page_size: int, rng: np.random.Generator):
        self.spec = spec
        self.page_size = page_size
        self.inputs = random_lengths(spec.input_tokens, spec.range_ratio, spec.requests, rng)
        self.outputs = random_lengths(spec.output_tokens, spec.range_ratio, spec.requests, rng)
        self.sent = 0
        self._fresh = itertools.count(FRESH_KEY_BASE)

    def _next(self, arrival_s: float) -> Request:
        rid = self.sent
        self.sent += 1
        prompt, output = self.inputs[rid], self.outputs[rid]
        pages = list(itertools.islice(self._fresh, (prompt + output) // self.page_size))
        return Request(rid, arrival_s, prompt, output, pages, prompt // self.page_size)

    def arrivals(self) -> Iterator[Request]:
        for _ in range(min(self.spec.concurrency, self.spec.requests)):
            yield self._next(0.0)

    def follow_up(self, request: Request, finish_s: float) -> Request | None:
        if self.sent >= self.spec.requests:
            return None
        return self._next(finish_s)
