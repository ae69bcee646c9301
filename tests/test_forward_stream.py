"""One forward stream per server: decode steps of the running batch, paused by prefill batches,
timed by the batch's size and context (`sim.engine.running_batch`, `Timing.decode_batch_step_s`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.deployment.compute import MODEL_COMPUTE, roofline
from sim.deployment.hardware import GPUS
from sim.engine.runner import run
from sim.engine.running_batch import RunningBatch
from sim.model.build import Timing
from sim.model.chain import ROOT_KEY, ChainInterner
from sim.scenario.loading import load_scenario
from sim.workload.kinds import Request
from tests.conftest import make_scenario

LONG_OUTPUTS = Path(__file__).parents[1] / "scenarios/serving/gpt_oss_120b_h200_long_outputs.yaml"


def serving(output_tokens: int, decode: str = "batched") -> dict[str, object]:
    changes = {"workload.output_tokens": output_tokens, "compute.decode": decode}
    return run(load_scenario(LONG_OUTPUTS, changes)).summary


def test_long_answers_keep_a_batch_decoding_that_every_prefill_waits_for() -> None:
    """gpt-oss-120b on one H200 at 4 requests a second: with 1,500-token answers about a
    hundred requests decode at once, and a prompt waits for the step in flight; with 8 the
    server is mostly idle. The per-request timers of `decode: per_request` see no difference."""
    short, long = serving(8), serving(1500)
    assert short["requests_finished"] == long["requests_finished"] == short["requests"]
    assert long["ttft_p50_s"] > short["ttft_p50_s"] * 1.5
    assert long["decode_batch_mean"] > 50 > short["decode_batch_mean"]
    assert long["tpot_p50_s"] > short["tpot_p50_s"]
    for summary in (short, long):
        assert 0 < summary["tpot_p50_s"] <= summary["tpot_p99_s"]
        assert 0 < summary["itl_p50_s"] <= summary["itl_p99_s"]
    timers = serving(8, "per_request"), serving(1500, "per_request")
    assert timers[0]["ttft_p50_s"] == timers[1]["ttft_p50_s"]


def test_runs_of_steps_time_as_single_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timing the steps between two changes of the batch in one go (cut at the step in flight
    on a wake-up) gives the run that one event a step gives."""
    scenario = make_scenario(**{"workload.output_tokens": 200, "workload.requests": 150})
    together = run(scenario)
    monkeypatch.setattr(RunningBatch, "steps_to_next_end", lambda self: 1)
    alone = run(scenario)
    assert alone.summary["events"] > together.summary["events"]
    for key in ("decode_steps", "requests_finished", "prefetch_issued", "l3_loaded_tokens"):
        assert alone.summary[key] == together.summary[key], key
    for key in ("ttft_p99_s", "tpot_p99_s", "itl_p99_s", "e2e_p99_s"):
        assert alone.summary[key] == pytest.approx(together.summary[key], rel=1e-9), key
    times = ["first_token_s", "finish_s"]
    a, b = (r.tables["requests"][times].to_numpy() for r in (alone, together))
    assert a == pytest.approx(b, rel=1e-9)


class Burst:
    """A, a long answer, at 0; B, a long prompt, once A decodes; C, one output token."""

    def __init__(self) -> None:
        chains = ChainInterner()
        self.requests = []
        for rid, (arrival_s, prompt, output) in enumerate(((0.0, 640, 400), (1.0, 8192, 2))):
            pages = prompt // 64
            chain = list(chains.extend(ROOT_KEY, ((rid, j) for j in range(pages + 8))))
            self.requests.append(Request(rid, arrival_s, prompt, output, chain, pages))
        chain = list(chains.extend(ROOT_KEY, ((2, j) for j in range(3))))
        self.requests.append(Request(2, 2.0, 128, 1, chain, 2))

    def arrivals(self) -> Iterator[Request]:
        yield from self.requests

    def follow_up(self, request: Request, finish_s: float) -> None:
        return None


def test_a_prefill_pauses_the_running_batch() -> None:
    """B's 8,192-token prefill (0.41 s at 20,000 tokens/s) runs between two of A's steps: the
    gap A's tokens see there holds it, and A's other gaps are one 20 ms step. C, with one output
    token, finishes with its first token."""
    result = run(make_scenario(duration_s=30.0), Burst())
    requests = result.tables["requests"].set_index("rid")
    assert (requests["outcome"] == "finished").all()
    gaps = result.tables["decode_gaps"]
    assert gaps["gap_s"].max() == pytest.approx(8192 / 20000 + 0.02, abs=0.021)
    assert gaps["gap_s"].min() == pytest.approx(0.02)
    assert requests.loc[2, "finish_s"] == requests.loc[2, "first_token_s"]
    assert requests.loc[0, "finish_s"] > requests.loc[1, "first_token_s"]


def test_a_step_grows_with_its_batch_and_context_and_never_beats_compute() -> None:
    timing = Timing(
        prefill_tokens_per_s=10_000.0,
        decode_ms_per_token=20.0,
        pcie_bps=1e9,
        load_bytes_per_page=0,
        step_s=0.010,
        s_per_request=0.00001,
        s_per_context_token=1e-8,
    )
    assert timing.decode_batch_step_s(1, 0) == pytest.approx(0.01001)
    assert timing.decode_batch_step_s(10, 100_000) == pytest.approx(0.010 + 0.0001 + 0.001)
    assert timing.decode_batch_step_s(1_000, 0) == pytest.approx(1_000 / 10_000)


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200"])
@pytest.mark.parametrize("preset", list(MODEL_COMPUTE))
def test_the_step_keys_give_the_rooflines_figure_at_its_reference_batch(
    gpu: str, preset: str
) -> None:
    """At 32 requests of 8,192 tokens, where every preset's batch touches every weight, the
    three step keys add up to `decode_ms_per_token`."""
    assert gpu in GPUS
    found = roofline(gpu, preset, 1)
    assert found is not None
    step = found.step
    memory_ms = step.step_ms + 32 * step.ms_per_request + 32 * 8 * step.ms_per_ki_context_tokens
    compute_ms = 32 / found.prefill_tokens_per_s * 1000
    assert max(memory_ms, compute_ms) == pytest.approx(found.decode_ms_per_token, rel=2e-3)
