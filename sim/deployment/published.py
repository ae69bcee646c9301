"""Published serving measurements beside what the roofline gives for the same deployment.

The roofline (`sim.deployment.compute`) is built from datasheet peaks and a model's shape, and
checked against nothing measured; these are the measurements it can be held against: each one as
its source printed it (SGLang's own posts and nightly runs, public benchmark sites, benchmark
issues), with the engine, precision, tensor parallelism, concurrency and lengths it ran at. The
roofline is taken at the measurement's GPU, preset and `tp` and at a decode batch of the
measurement's concurrency (`compute.roofline`'s `decode_batch`), so the ratio compares the same
step; the engine itself keeps the batch of `DECODE_BATCH`. docs/compute.md shows the table
(`python -m sim.deployment.table docs/compute.md` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.deployment.compute import DECODE_BATCH, Roofline, roofline

NEAR = (0.7, 1.4)
"""Published / roofline ratios inside this band need no explanation; outside it, a measurement
says why (`why_apart`)."""


@dataclass(frozen=True)
class PublishedMeasurement:
    """One serving measurement as published. A figure or setting the source does not state is
    None, never guessed."""

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
    why_apart: str = ""
    """One line on why a ratio falls outside `NEAR`; empty when every ratio is inside."""

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

    def apart(self) -> bool:
        low, high = NEAR
        return any(not low <= ratio <= high for ratio in self.ratios().values())


def roofline_output_per_gpu(m: PublishedMeasurement, r: Roofline) -> float:
    """Output tokens/s a GPU of the roofline's deployment makes: a step of the batch, over the
    step time, over the ranks."""
    return m.compared_batch / (r.decode_ms_per_token / 1000) / r.tp


_LMSYS = (
    "SGLang for gpt-oss: From Day 0 Support to Enhanced Performance (LMSYS, 2025-08-27)",
    "https://lmsys.org/blog/2025-08-27-gpt-oss",
)
_INFERENCEX = (
    "[experimental] gptoss h100 nvidia-smi power (SemiAnalysis InferenceX)",
    "https://github.com/SemiAnalysisAI/InferenceX/issues/828",
)
_MILLSTONE = (
    "gpt-oss-120b MXFP4 inference benchmark (Millstone AI)",
    "https://www.millstoneai.com/inference-benchmark/gpt-oss-120b-mxfp4",
)
_B200_SWEEP = (
    "SGLang B200 Benchmark Sweep: 9 Models on 8x B200 (NVSwitch) (gist, 2026-02-16)",
    "https://gist.github.bluepio.com/BenHamm/78563d0d0a08d7cb61b4737392633384",
)
_DSV32_ROADMAP = (
    "[Roadmap] DeepSeek v3.2 Optimization (sgl-project/sglang), nightly data of 01/08",
    "https://gitlite.zycloud.tk/sgl-project/sglang/issues/15025",
)
_GPUSTACK_DSV32 = (
    "Optimizing DeepSeek-V3.2 Throughput on NVIDIA H200 GPUs (GPUStack performance lab)",
    "https://docs.gpustack.ai/latest/performance-lab/deepseek-v3.2/h200",
)
_BATCH_ONE = (
    "a batch-1 step is not bandwidth-bound: kernel launches, expert routing and the MXFP4 "
    "experts' dequantization set it"
)
_FREE_TP = (
    "the roofline splits the step over {tp} ranks and charges no all-reduce; with a batch "
    "of {batch} on {tp} GPUs the step is set by communication and launches, not HBM"
)
_DSA_SMALL_BATCH = (
    "8 ranks with DP attention and a batch of {batch}: the step waits on expert all-to-all, "
    "launches and the indexer's top-k rather than HBM, and a batch of {batch} 4,096-token prompts "
    "fill 8 GPUs' prefill far below the roofline's MFU"
)


def _gpt_oss(**fields: Any) -> PublishedMeasurement:
    return PublishedMeasurement(preset="gpt-oss-120b", **fields)


def _dsv32(**fields: Any) -> PublishedMeasurement:
    return PublishedMeasurement(preset="deepseek-v3.2", **fields)


PUBLISHED: tuple[PublishedMeasurement, ...] = (
    _gpt_oss(
        gpu="h100",
        gpus=None,
        tp=None,
        engine="SGLang main (>= 0.5.1.post3)",
        precision="MXFP4",
        concurrency=1,
        input_tokens=None,
        output_tokens=None,
        tpot_ms=round(1000 / 318.53, 3),
        figure="batch-1 decode throughput 318.53 tok/s; TPOT = 1000 / that",
        source_title=_LMSYS[0],
        source_url=_LMSYS[1],
        why_apart=_BATCH_ONE,
    ),
    _gpt_oss(
        gpu="h100",
        gpus=8,
        tp=8,
        engine="vLLM (version not stated in the comment)",
        precision="FP4 (MXFP4 checkpoint)",
        concurrency=32,
        input_tokens=None,
        output_tokens=None,
        tpot_ms=5.82,
        output_tokens_per_s_per_gpu=664.2,
        figure="the sweep's first table, TP 8 conc 32 (its ISL/OSL heading was not in the "
        "text read; the sweep ran 1K/1K, 1K/8K and 8K/1K)",
        source_title=_INFERENCEX[0],
        source_url=_INFERENCEX[1],
        why_apart=_FREE_TP.format(tp=8, batch=32),
    ),
    _gpt_oss(
        gpu="h100",
        gpus=2,
        tp=2,
        engine="vLLM (version not stated in the comment)",
        precision="FP4 (MXFP4 checkpoint)",
        concurrency=64,
        input_tokens=None,
        output_tokens=None,
        tpot_ms=15.21,
        output_tokens_per_s_per_gpu=2061.5,
        figure="the sweep's first table, TP 2 conc 64 (ISL/OSL as the row above)",
        source_title=_INFERENCEX[0],
        source_url=_INFERENCEX[1],
    ),
    _gpt_oss(
        gpu="h100",
        gpus=8,
        tp=8,
        engine="vLLM (version not stated in the comment)",
        precision="FP4 (MXFP4 checkpoint)",
        concurrency=8,
        input_tokens=1024,
        output_tokens=8192,
        tpot_ms=4.00,
        output_tokens_per_s_per_gpu=242.9,
        figure="the 1K/8K (decode-heavy) table, TP 8 conc 8",
        source_title=_INFERENCEX[0],
        source_url=_INFERENCEX[1],
        why_apart=_FREE_TP.format(tp=8, batch=8),
    ),
    _gpt_oss(
        gpu="h200",
        gpus=1,
        tp=1,
        engine="not stated on the comparison page",
        precision="MXFP4",
        concurrency=10,
        input_tokens=None,
        output_tokens=1024,
        tpot_ms=None,
        output_tokens_per_s_per_gpu=849.0,
        input_tokens_per_s_per_gpu=None,
        figure="1x H200 SXM peak throughput 849 tok/s over concurrency 1-10 and contexts "
        "1K-128K; compared at the largest concurrency, 10",
        source_title=_MILLSTONE[0],
        source_url=_MILLSTONE[1],
    ),
    _gpt_oss(
        gpu="b200",
        gpus=None,
        tp=None,
        engine="SGLang main (>= 0.5.1.post3)",
        precision="MXFP4",
        concurrency=1,
        input_tokens=None,
        output_tokens=None,
        tpot_ms=round(1000 / 416.02, 3),
        figure="batch-1 decode throughput 416.02 tok/s; TPOT = 1000 / that",
        source_title=_LMSYS[0],
        source_url=_LMSYS[1],
        why_apart=_BATCH_ONE,
    ),
    _gpt_oss(
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang v0.5.8.post1",
        precision="MXFP4",
        concurrency=1,
        input_tokens=1024,
        output_tokens=1024,
        tpot_ms=2.41,
        figure="TPOT at c=1 (397 tok/s), random 1K in / 1K out, sglang.bench_serving",
        source_title=_B200_SWEEP[0],
        source_url=_B200_SWEEP[1],
        why_apart=_FREE_TP.format(tp=8, batch=1),
    ),
    _dsv32(
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang nightly (run of 01/08), TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=1,
        input_tokens=4096,
        output_tokens=None,
        tpot_ms=19.18,
        output_tokens_per_s_per_gpu=round(52.13 / 8, 2),
        input_tokens_per_s_per_gpu=round(7003.29 / 8, 2),
        figure="batch 1 row: ITL 19.18 ms, 52.13 output and 7,003.29 input tok/s over 8 GPUs",
        source_title=_DSV32_ROADMAP[0],
        source_url=_DSV32_ROADMAP[1],
        why_apart=_DSA_SMALL_BATCH.format(batch=1),
    ),
    _dsv32(
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang nightly (run of 01/08), TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=8,
        input_tokens=4096,
        output_tokens=None,
        tpot_ms=19.88,
        output_tokens_per_s_per_gpu=round(402.37 / 8, 2),
        input_tokens_per_s_per_gpu=round(32024.01 / 8, 2),
        figure="batch 8 row: ITL 19.88 ms, 402.37 output and 32,024.01 input tok/s over 8 GPUs",
        source_title=_DSV32_ROADMAP[0],
        source_url=_DSV32_ROADMAP[1],
        why_apart=_DSA_SMALL_BATCH.format(batch=8),
    ),
    _dsv32(
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang nightly (run of 01/08), TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=16,
        input_tokens=4096,
        output_tokens=None,
        tpot_ms=25.30,
        output_tokens_per_s_per_gpu=round(632.33 / 8, 2),
        input_tokens_per_s_per_gpu=round(42795.90 / 8, 2),
        figure="batch 16 row: ITL 25.30 ms, 632.33 output and 42,795.90 input tok/s over 8 GPUs",
        source_title=_DSV32_ROADMAP[0],
        source_url=_DSV32_ROADMAP[1],
        why_apart=_DSA_SMALL_BATCH.format(batch=16),
    ),
    _dsv32(
        gpu="h200",
        gpus=8,
        tp=8,
        engine="SGLang (version not read), TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=None,
        input_tokens=None,
        output_tokens=None,
        tpot_ms=39.45,
        figure="optimized Generation-Heavy Prompt case: mean TPOT 39.45 ms (its concurrency "
        "and lengths not read; compared at the engine's batch of 32)",
        source_title=_GPUSTACK_DSV32[0],
        source_url=_GPUSTACK_DSV32[1],
        why_apart="a throughput benchmark runs more than the roofline's 32 requests a step, "
        "and DP attention's all-to-all is not charged",
    ),
)
"""What was found and read; fewer than three measurements for a GPU and model means no more
were found (docs/compute.md, Published serving figures)."""


def _cell(published: float | None, derived: float, ratio: float | None) -> str:
    if published is None or ratio is None:
        return "—"
    return f"{published:,.4g} / {derived:,.4g} ({ratio:.2f})"


def published_table() -> str:
    """docs/compute.md's table of published measurements beside the roofline at their
    deployment: published / roofline (ratio) for each figure the source gives."""
    lines = [
        "| preset | gpu | GPUs, tp | engine | precision | concurrency | in / out tokens "
        "| TPOT ms | output tok/s a GPU | input tok/s a GPU | why apart | source |",
        "|" + " --- |" * 12,
    ]
    for m in PUBLISHED:
        r = m.roofline()
        ratios = m.ratios()
        tp = f"tp {m.tp}" if m.tp else "tp not stated (compared at 1)"
        gpus = f"{m.gpus}, {tp}" if m.gpus else tp
        batch = str(m.concurrency) if m.concurrency else f"not stated (compared at {DECODE_BATCH})"
        lengths = f"{_length(m.input_tokens)} / {_length(m.output_tokens)}"
        cells = [
            _cell(m.tpot_ms, r.decode_ms_per_token, ratios.get("tpot")),
            _cell(
                m.output_tokens_per_s_per_gpu, roofline_output_per_gpu(m, r), ratios.get("output")
            ),
            _cell(m.input_tokens_per_s_per_gpu, r.prefill_tokens_per_s / r.tp, ratios.get("input")),
        ]
        why = m.why_apart if m.apart() else ""
        lines.append(
            f"| `{m.preset}` | `{m.gpu}` | {gpus} | {m.engine} | {m.precision} | {batch} "
            f"| {lengths} | " + " | ".join(cells) + f" | {why} "
            f"| [{m.source_title}]({m.source_url}): {m.figure} |"
        )
    return "\n".join(lines)


def _length(tokens: int | None) -> str:
    return f"{tokens:,}" if tokens is not None else "not stated"
