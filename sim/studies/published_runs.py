"""The published serving measurements rerun through the engine, and docs/compute.md's table of
them (`python -m sim.deployment.table docs/compute.md` writes it).

Each measurement names its shipped scenario (`scenarios/published/`): the same GPU, preset, `tp`,
concurrency and lengths, as a `concurrency` workload. The run's figures are read off its request
and decode-gap tables the way the measurement's benchmark computes them
(`PublishedMeasurement.benchmark`), and each is set beside the published one as published /
simulated; the closed-form roofline's TPOT at the same batch stays beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sim.deployment.compute import DECODE_BATCH
from sim.deployment.published import PublishedMeasurement, apart
from sim.deployment.published_figures import PUBLISHED
from sim.engine.runner import RunResult, run
from sim.scenario.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "published"
"""Where the measurements' scenarios are shipped."""


@dataclass(frozen=True)
class Simulated:
    """A run's figures, each as the measurement's benchmark defines it."""

    tpot_ms: float
    output_tokens_per_s_per_gpu: float
    input_tokens_per_s_per_gpu: float
    ttft_ms: float
    finished: int
    requests: int


def scenario_path(m: PublishedMeasurement) -> Path:
    return SCENARIOS / f"{m.scenario}.yaml"


def benchmark_figures(result: RunResult, m: PublishedMeasurement) -> Simulated:
    """The run's figures as `m`'s benchmark computes them, over `m.gpus` (its `tp` where the
    source states no GPU count). `serving`: mean TPOT and TTFT over the finished requests, and
    tokens over the run, from t = 0 to the last finish (bench_serving's duration). `one_batch`
    (0.5.23: benchmark/one_batch_server.py): input tokens over the batch's last first token,
    output tokens over the time after it, and the TPOT that output rate gives a request."""
    req = result.tables["requests"]
    done = req[req["outcome"] == "finished"]
    gpus = m.gpus or result.scenario.server.tp_size
    many = done[done["output_tokens"] > 1]
    tpot_s = float(
        ((many["finish_s"] - many["first_token_s"]) / (many["output_tokens"] - 1)).mean()
    )
    ttft_s = float((done["first_token_s"] - done["arrival_s"]).mean())
    end_s = float(done["finish_s"].max())
    inputs, outputs = int(done["prompt_tokens"].sum()), int(done["output_tokens"].sum())
    if m.benchmark == "one_batch":
        prefill_s = float(done["first_token_s"].max())
        output_rate = outputs / (end_s - prefill_s)
        input_rate = inputs / prefill_s
        tpot_s = len(done) / output_rate
    else:
        output_rate, input_rate = outputs / end_s, inputs / end_s
    return Simulated(
        tpot_ms=tpot_s * 1000,
        output_tokens_per_s_per_gpu=output_rate / gpus,
        input_tokens_per_s_per_gpu=input_rate / gpus,
        ttft_ms=ttft_s * 1000,
        finished=len(done),
        requests=len(req),
    )


@cache
def simulate(m: PublishedMeasurement) -> Simulated:
    """Run `m`'s scenario (once a process) and read its figures."""
    return benchmark_figures(run(load_scenario(scenario_path(m))), m)


FIGURES = (
    ("tpot", "tpot_ms"),
    ("output", "output_tokens_per_s_per_gpu"),
    ("input", "input_tokens_per_s_per_gpu"),
    ("ttft", "ttft_ms"),
)
"""Each compared figure's name and its field on the measurement and on `Simulated`."""


def simulated_ratios(m: PublishedMeasurement, sim: Simulated) -> dict[str, float]:
    """Published / simulated for each figure the source gives."""
    out = {}
    for name, field in FIGURES:
        published = getattr(m, field)
        if published is not None:
            out[name] = published / getattr(sim, field)
    return out


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _cell(published: float | None, simulated: float) -> str:
    if published is None:
        return "—"
    return f"{_number(published)} / {_number(simulated)} ({published / simulated:.2f})"


def _length(tokens: int | None) -> str:
    return f"{tokens:,}" if tokens is not None else "not stated"


def published_table() -> str:
    """docs/compute.md's table: for each measurement published / simulated (ratio) for every
    figure its source gives, the closed form's TPOT at its batch, and its scenario."""
    lines = [
        "| preset | gpu | GPUs, tp | engine | concurrency | in / out tokens | TPOT ms "
        "| output tok/s a GPU | input tok/s a GPU | TTFT ms | closed-form TPOT ms | why apart "
        "| source | scenario |",
        "|" + " --- |" * 14,
    ]
    for m in PUBLISHED:
        sim = simulate(m)
        tp = f"tp {m.tp}" if m.tp else "tp not stated (compared at 1)"
        gpus = f"{m.gpus}, {tp}" if m.gpus else tp
        batch = str(m.concurrency) if m.concurrency else f"not stated (compared at {DECODE_BATCH})"
        cells = [_cell(getattr(m, field), getattr(sim, field)) for _, field in FIGURES]
        closed = m.roofline().decode_ms_per_token
        closed_cell = f"{_number(closed)} ({m.tpot_ms / closed:.2f})" if m.tpot_ms else "—"
        why = m.why_apart if apart(simulated_ratios(m, sim)) else ""
        lines.append(
            f"| `{m.preset}` | `{m.gpu}` | {gpus} | {m.engine} | {batch} "
            f"| {_length(m.input_tokens)} / {_length(m.output_tokens)} | "
            + " | ".join(cells)
            + f" | {closed_cell} | {why} | [{m.source_title}]({m.source_url}): {m.figure} "
            f"| [`{m.scenario}`](../scenarios/published/{m.scenario}.yaml) |"
        )
    return "\n".join(lines)
