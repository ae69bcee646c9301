"""Latency and throughput: the summary's `latency_and_throughput` against SGLang 0.5.23's
benchmark client (`benchmark/serving.py:calculate_metrics`, what `bench_serving` prints), on
the same seeded random requests, comparing TPOT, ITL and end-to-end latency percentiles and the
input and output throughputs.

A case is a benchmark of up to 40 requests, every one finished (the client's `success`): each
arrives (the client's `start_time`), gets its first token after a random TTFT and its later
tokens after random gaps, whole milliseconds so that requests share steps. SGLang's side is the
real `calculate_metrics` on one `RequestFuncOutput` a request (`ttft`, `itl` the gaps,
`latency` the last token's time, `output_len`) with the benchmark's duration; a stand-in
tokenizer serves the retokenized counts, which are not compared. The model's side is the
summary's requests table and its `decode_gaps` table, one row for the tokens that came at one
time after the same gap (how a decode step records them), with no warm-up and the measured
window the benchmark's duration.

The client counts only the requests that succeeded and divides by the whole benchmark; the
summary counts what came inside the measured window, unfinished requests' tokens included. They
agree where every request finished inside the window, as here; docs/fidelity.md ("Latency and
throughput against bench_serving") says where they part.

Mutations tried, each failing the test: ITL as the inverted CDF (the first gap at or above the
share) instead of the linear interpolation; the gaps unweighted (one a row, not one a token);
TPOT over every output token rather than those after the first; e2e from the first token.
"""

from __future__ import annotations

import math
import random
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from sim.engine.metrics import latency_and_throughput
from tests.conformance import releases
from tests.conformance.tally import agree

RELEASE = "0.5.23"
CASES = 300
FUNCTION = "benchmark/serving.py:calculate_metrics"
PROPERTY = "serving metrics: TPOT, ITL, e2e, throughput"
COMPARED = {
    "tpot_p50_s": "median_tpot_ms",
    "tpot_p99_s": "p99_tpot_ms",
    "itl_p50_s": "median_itl_ms",
    "itl_p99_s": "p99_itl_ms",
    "e2e_p50_s": "median_e2e_latency_ms",
    "e2e_p99_s": "p99_e2e_latency_ms",
    "output_tokens_per_s": "output_throughput",
    "input_tokens_per_s": "input_throughput",
}
"""Our key and the client's field it is compared with (milliseconds there, seconds here)."""


class _Tokenizer:
    """The retokenized counts only: not compared."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return []


def _requests(rng: random.Random) -> list[dict[str, Any]]:
    """Requests on one decode clock, in whole milliseconds: steps of their own lengths (the
    batch's), now and then a longer gap (a prefill batch paused the batch); each request
    arrives, gets its first token at a step after its TTFT and one token at each later step, so
    requests share steps and gaps."""
    step_ms = rng.choice([10, 20, 25])
    clock = [0]
    for _ in range(600):
        paused = rng.random() < 0.1
        clock.append(clock[-1] + rng.randint(step_ms, 3 * step_ms) + paused * 10 * step_ms)
    out = []
    for _ in range(rng.randint(1, 40)):
        tokens = rng.choice([1, 2, rng.randint(3, 12), rng.randint(13, 80)])
        arrival_ms = rng.randint(0, clock[200])
        first = next(i for i, t in enumerate(clock) if t > arrival_ms + rng.randint(5, 1500))
        steps = clock[first : first + tokens]
        out.append(
            {
                "arrival_ms": arrival_ms,
                "ttft_ms": steps[0] - arrival_ms,
                "gaps_ms": [b - a for a, b in pairwise(steps)],
                "prompt_tokens": rng.randint(1, 8000),
                "output_tokens": tokens,
            }
        )
    first_arrival = min(r["arrival_ms"] for r in out)
    for r in out:  # the benchmark starts with its first request
        r["arrival_ms"] -= first_arrival
    return out


def _theirs(serving: Any, reqs: list[dict[str, Any]], dur_s: float) -> dict[str, float]:
    outputs = [
        serving.RequestFuncOutput(
            success=True,
            latency=(r["ttft_ms"] + sum(r["gaps_ms"])) / 1000,
            ttft=r["ttft_ms"] / 1000,
            itl=[g / 1000 for g in r["gaps_ms"]],
            output_len=r["output_tokens"],
            start_time=r["arrival_ms"] / 1000,
            prompt_len=r["prompt_tokens"],
        )
        for r in reqs
    ]
    inputs = [
        SimpleNamespace(prompt_len=r["prompt_tokens"], text_prompt_len=0, vision_prompt_len=0)
        for r in reqs
    ]
    metrics, _ = serving.calculate_metrics(inputs, outputs, dur_s, _Tokenizer(), "sglang")
    return {
        ours: float(getattr(metrics, field)) / (1000 if field.endswith("_ms") else 1)
        for ours, field in COMPARED.items()
    }


def _ours(reqs: list[dict[str, Any]], dur_s: float) -> dict[str, float]:
    rows, gaps = [], []
    for r in reqs:
        first_ms = r["arrival_ms"] + r["ttft_ms"]
        t_ms = first_ms
        for gap in r["gaps_ms"]:
            t_ms += gap
            gaps.append((t_ms, gap))
        rows.append(
            {
                "outcome": "finished",
                "arrival_s": r["arrival_ms"] / 1000,
                "first_token_s": first_ms / 1000,
                "finish_s": t_ms / 1000,
                "prompt_tokens": r["prompt_tokens"],
                "output_tokens": r["output_tokens"],
            }
        )
    steps = pd.DataFrame(gaps, columns=["t_ms", "gap_ms"]).value_counts().reset_index()
    table = pd.DataFrame(
        {
            "t_s": steps["t_ms"] / 1000,
            "gap_s": steps["gap_ms"] / 1000,
            "tokens": steps["count"].astype("int64"),
        }
    )
    summary = latency_and_throughput(
        pd.DataFrame(rows), table, warmup_s=0.0, window_s=dur_s, gpus=1
    )
    return {key: summary[key] for key in COMPARED}


def _close(ours: float | None, theirs: float, key: str) -> float | None:
    """Ours where it is the client's figure up to float rounding (and the summary's three
    decimals of a throughput), so that `agree` compares like with like."""
    if ours is None:
        return None
    tolerance = 5e-4 if key.endswith("_per_s") else 1e-9
    return theirs if math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=tolerance) else ours


@pytest.mark.parametrize("seed", range(CASES))
def test_latency_and_throughput_are_bench_servings(seed: int) -> None:
    serving = releases.stubbed_wheel_module(RELEASE, "sglang.benchmark.serving")
    rng = random.Random(seed)
    reqs = _requests(rng)
    last_s = max(r["arrival_ms"] + r["ttft_ms"] + sum(r["gaps_ms"]) for r in reqs) / 1000
    dur_s = last_s + rng.choice([0.0, rng.uniform(0.0, 2.0)])
    theirs = _theirs(serving, reqs, dur_s)
    ours = _ours(reqs, dur_s)
    if not any(r["output_tokens"] > 1 for r in reqs):
        # No TPOT and no ITL: the client prints 0 (np.percentile of `0`), the summary null.
        assert all(ours[k] is None for k in ("tpot_p50_s", "tpot_p99_s", "itl_p50_s"))
        for key in ("tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s"):
            ours.pop(key), theirs.pop(key)
    agree(
        RELEASE,
        PROPERTY,
        FUNCTION,
        reqs,
        {key: _close(value, theirs[key], key) for key, value in ours.items()},
        theirs,
    )
