"""A published serving measurement, and what the closed-form roofline gives for it.

These are the measurements the simulator is held against (`sim.deployment.published_figures`
lists them), each as its source printed it, with the engine, precision, tensor parallelism,
concurrency and lengths it ran at, and the shipped scenario that reruns it through the engine
(`sim.studies.published_runs`). Beside the run, the closed form (`sim.deployment.compute`) is
taken at the measurement's GPU, preset and `tp` and at a decode batch of the measurement's
concurrency (`compute.roofline`'s `decode_batch`); the engine itself keeps the batch of
`DECODE_BATCH` for its figures when no run times the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.deployment.compute import DECODE_BATCH, Roofline, roofline

NEAR = (0.7, 1.4)
"""Published / simulated ratios inside this band need no explanation; outside it, a measurement
says why (`why_apart`)."""


@dataclass(frozen=True)
class PublishedMeasurement:
    """One serving measurement as published. A figure or setting the source does not state is
    None, never guessed."""

    scenario: str
    """The shipped scenario that reruns it: `scenarios/published/<scenario>.yaml`."""
    preset: str
    """The model, as the preset it corresponds to (`model.preset`)."""
    gpu: str
    """The GPU, as its `hardware.gpu` profile."""
    gpus: int | None
    """GPUs serving the model (one replica; None: not stated); per-GPU figures divide by it."""
    tp: int | None
    """Tensor-parallel size as stated (None: not stated; compared at tp 1)."""
    engine: str
    """Serving engine and version as the source names them."""
    precision: str
    """Weights' precision as the source names it (MXFP4, FP8, ...)."""
    concurrency: int | None
    """Requests in flight (max concurrency or batch size; None: not stated, compared at the
    engine's batch of `DECODE_BATCH`)."""
    input_tokens: int | None
    """Prompt length a request, as the benchmark drew it."""
    output_tokens: int | None
    """Output length a request."""
    figure: str
    """How the figures were read (which table row, which statistic, what was derived)."""
    source_title: str
    source_url: str
    tpot_ms: float | None = None
    """Time per output token (TPOT or ITL, mean or median as `figure` says), in ms."""
    output_tokens_per_s_per_gpu: float | None = None
    """Output throughput of the whole replica over `gpus`."""
    input_tokens_per_s_per_gpu: float | None = None
    """Input (prefill) throughput of the replica over `gpus`."""
    ttft_ms: float | None = None
    """Mean time to first token, in ms."""
    benchmark: Literal["serving", "one_batch"] = "serving"
    """How the figures were measured: `serving`, a serving benchmark's whole run (SGLang's
    `bench_serving`, vLLM's `bench serve`: throughput over the run's duration, TPOT and TTFT
    means over the requests); `one_batch`, SGLang's `bench_one_batch_server` (the batch sent at
    once: input throughput over the batch's last first token, output over the decode after it)."""
    why_apart: str = ""
    """One line on why a simulated ratio falls outside `NEAR`; empty when every one is inside."""

    @property
    def compared_tp(self) -> int:
        return self.tp or 1

    @property
    def compared_batch(self) -> int:
        return self.concurrency or DECODE_BATCH

    def roofline(self) -> Roofline:
        found = roofline(self.gpu, self.preset, self.compared_tp, decode_batch=self.compared_batch)
        if found is None:
            raise ValueError(f"no roofline for {self.gpu} x {self.preset}")
        return found

    def ratios(self) -> dict[str, float]:
        """Published / roofline for each figure the source gives: TPOT against the roofline's
        decode step at this batch and tp; output throughput per GPU against that step's batch
        over its time and the GPUs; input throughput per GPU against the prefill rate per GPU."""
        r = self.roofline()
        out: dict[str, float] = {}
        if self.tpot_ms is not None:
            out["tpot"] = self.tpot_ms / r.decode_ms_per_token
        if self.output_tokens_per_s_per_gpu is not None:
            out["output"] = self.output_tokens_per_s_per_gpu / roofline_output_per_gpu(self, r)
        if self.input_tokens_per_s_per_gpu is not None:
            out["input"] = self.input_tokens_per_s_per_gpu / (r.prefill_tokens_per_s / r.tp)
        return out


def apart(ratios: dict[str, float]) -> bool:
    """Is any ratio outside `NEAR`?"""
    low, high = NEAR
    return any(not low <= ratio <= high for ratio in ratios.values())


def roofline_output_per_gpu(m: PublishedMeasurement, r: Roofline) -> float:
    """Output tokens/s a GPU of the roofline's deployment makes: a step of the batch, over the
    step time, over the ranks."""
    return m.compared_batch / (r.decode_ms_per_token / 1000) / r.tp
