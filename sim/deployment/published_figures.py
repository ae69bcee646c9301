"""The published serving measurements the simulator is held against, each with the shipped
scenario that reruns it (`scenarios/published/`; `sim.studies.published_runs` runs them and writes
docs/compute.md's table).

Every figure is as its source printed it, or derived from printed figures as `figure` says (a
replica's throughput over its GPUs; a batch-1 throughput's reciprocal; a whole benchmark's input
tokens over its duration, which counts the decode time too and so understates the prefill rate).
"""

from __future__ import annotations

from typing import Any

from sim.deployment.published import PublishedMeasurement

_LMSYS = (
    "SGLang for gpt-oss: From Day 0 Support to Enhanced Performance (LMSYS, 2025-08-27)",
    "https://lmsys.org/blog/2025-08-27-gpt-oss",
)
_SGLANG_GPT_OSS = (
    "GPT-OSS, SGLang cookbook, 5.1 Speed Benchmark",
    "https://docs.sglang.io/cookbook/autoregressive/OpenAI/GPT-OSS.md",
)
_SGLANG_DSV32 = (
    "DeepSeek-V3.2, SGLang cookbook, 5.1 Speed Benchmark on Blackwell",
    "https://docs.sglang.io/cookbook/autoregressive/DeepSeek/DeepSeek-V3_2",
)
_DSV32_ROADMAP = (
    "[Roadmap] DeepSeek v3.2 Optimization (sgl-project/sglang), nightly data of 01/08",
    "https://gitlite.zycloud.tk/sgl-project/sglang/issues/15025",
)
_GPUSTACK_GPT_OSS = (
    "Optimizing GPT-OSS-120B Throughput on NVIDIA H100 GPUs (GPUStack performance lab)",
    "https://docs.gpustack.ai/latest/performance-lab/gpt-oss-120b/h100",
)
_GPUSTACK_DSV32 = (
    "Optimizing DeepSeek-V3.2 Throughput on NVIDIA H200 GPUs (GPUStack performance lab)",
    "https://docs.gpustack.ai/latest/performance-lab/deepseek-v3.2/h200",
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

_ALL_EXPERTS = (
    "the engine's decode step reads every expert's weights whatever the batch "
    "(`compute.decode_step_ms` is the whole checkpoint over the ranks), while a batch of {batch} "
    "routes to a few of gpt-oss-120b's 128 experts a layer: the simulated step is too slow"
)
_FREE_TP = (
    "the engine splits the step over {tp} ranks and charges no all-reduce, no kernel launch and "
    "no scheduling between steps; with a batch of {batch} on {tp} GPUs those set the step, not HBM"
)
_FRONT_END = (
    "a measured TTFT also holds the HTTP request, tokenization and the scheduler's first pass, "
    "none of which is simulated (only the prefill, about a millisecond here)"
)
_DP_ATTENTION = (
    "DP attention over 8 ranks with a batch of {batch}: a step waits on the experts' all-to-all, "
    "launches and the indexer's top-k, none of which the engine charges"
)
_SMALL_PREFILL = (
    "the engine's prefill of one batch runs over all 8 ranks at the dense fit's MFU, and a batch "
    "of {batch} 4,096-token prompts does not fill 8 GPUs' prefill"
)
_SHORT_PROMPTS = (
    "at ShareGPT's short requests (about 300 tokens in, 200 out) scheduling, sampling and "
    "admitting new requests between steps weigh more than HBM reads"
)


def _gpt_oss(**fields: Any) -> PublishedMeasurement:
    return PublishedMeasurement(preset="gpt-oss-120b", **fields)


def _dsv32(**fields: Any) -> PublishedMeasurement:
    return PublishedMeasurement(preset="deepseek-v3.2", **fields)


def _dsv32_nightly(batch: int, itl_ms: float, output: float, input_: float) -> PublishedMeasurement:
    return _dsv32(
        scenario=f"deepseek_v3_2_b200_tp8_b{batch}_nightly",
        benchmark="one_batch",
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang nightly (run of 01/08), TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=batch,
        input_tokens=4096,
        output_tokens=None,
        tpot_ms=itl_ms,
        output_tokens_per_s_per_gpu=round(output / 8, 2),
        input_tokens_per_s_per_gpu=round(input_ / 8, 2),
        figure=f"batch {batch} row: ITL {itl_ms:g} ms, {output:,g} output and {input_:,g} "
        "input tok/s over 8 GPUs",
        source_title=_DSV32_ROADMAP[0],
        source_url=_DSV32_ROADMAP[1],
        why_apart=f"{_DP_ATTENTION.format(batch=batch)}; {_SMALL_PREFILL.format(batch=batch)}",
    )


_GPT_OSS_H100 = (
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp8_c1_lmsys",
        benchmark="one_batch",
        gpu="h100",
        gpus=8,
        tp=8,
        engine="SGLang v0.5.1.post3",
        precision="MXFP4",
        concurrency=1,
        input_tokens=1024,
        output_tokens=512,
        tpot_ms=round(1000 / 318.53, 3),
        figure="batch-1 decode throughput 318.53 tok/s, TPOT = 1000 / that; tp, version and "
        "lengths from the post's reproduction commands (sglang benchmark/gpt_oss/README.md, "
        "bench_one_batch_server)",
        source_title=_LMSYS[0],
        source_url=_LMSYS[1],
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp1_c4_gpustack",
        gpu="h100",
        gpus=1,
        tp=1,
        engine="vLLM v0.10.2",
        precision="MXFP4",
        concurrency=4,
        input_tokens=229,
        output_tokens=217,
        tpot_ms=8.31,
        output_tokens_per_s_per_gpu=453.04,
        ttft_ms=49.00,
        figure="baseline, ShareGPT at max concurrency 4: mean TPOT 8.31 ms, 453.04 output "
        "tok/s; lengths are the 100 requests' means",
        source_title=_GPUSTACK_GPT_OSS[0],
        source_url=_GPUSTACK_GPT_OSS[1],
        why_apart=f"{_ALL_EXPERTS.format(batch=4)}; {_FRONT_END}",
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp2_c4_gpustack",
        gpu="h100",
        gpus=2,
        tp=2,
        engine="vLLM v0.10.2 (--async-scheduling)",
        precision="MXFP4",
        concurrency=4,
        input_tokens=229,
        output_tokens=217,
        tpot_ms=5.75,
        output_tokens_per_s_per_gpu=round(645.55 / 2, 2),
        ttft_ms=37.51,
        figure="optimized, ShareGPT at max concurrency 4: mean TPOT 5.75 ms, 645.55 output "
        "tok/s over 2 GPUs",
        source_title=_GPUSTACK_GPT_OSS[0],
        source_url=_GPUSTACK_GPT_OSS[1],
        why_apart=f"{_ALL_EXPERTS.format(batch=4)}; {_FRONT_END}",
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp1_c100_32k_gpustack",
        gpu="h100",
        gpus=1,
        tp=1,
        engine="vLLM v0.10.2",
        precision="MXFP4",
        concurrency=100,
        input_tokens=32000,
        output_tokens=100,
        input_tokens_per_s_per_gpu=round(16136.57 - 49.65, 2),
        ttft_ms=99444.04,
        figure="baseline, random 32K in / 100 out, 100 prompts sent at once: input tok/s = "
        "total 16,136.57 less output 49.65",
        source_title=_GPUSTACK_GPT_OSS[0],
        source_url=_GPUSTACK_GPT_OSS[1],
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp2_c500_4k_gpustack",
        gpu="h100",
        gpus=2,
        tp=2,
        engine="vLLM v0.10.2 (--async-scheduling)",
        precision="MXFP4",
        concurrency=500,
        input_tokens=4000,
        output_tokens=200,
        input_tokens_per_s_per_gpu=round((34491.13 - 1135.29) / 2, 2),
        ttft_ms=29487.34,
        figure="optimized, random 4K in / 200 out, 500 prompts sent at once: input tok/s = "
        "(total 34,491.13 less output 1,135.29) over 2 GPUs",
        source_title=_GPUSTACK_GPT_OSS[0],
        source_url=_GPUSTACK_GPT_OSS[1],
        why_apart="the engine's prefill scales linearly to tp 2 at the dense fit's MFU and "
        "charges no all-reduce, and an MoE's small expert matmuls likely reach less; the 500 "
        "prompts queue behind a prefill that is too fast, so TTFT is short too",
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp2_c64_inferencex",
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
        figure="the sweep's first table, TP 2 conc 64 (its ISL/OSL heading was not in the text "
        "read; the sweep ran 1K/1K, 1K/8K and 8K/1K)",
        source_title=_INFERENCEX[0],
        source_url=_INFERENCEX[1],
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_h100_tp8_c8_inferencex",
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
    ),
)

_GPT_OSS_H200 = (
    _gpt_oss(
        scenario="gpt_oss_120b_h200_tp1_c10_millstone",
        gpu="h200",
        gpus=1,
        tp=1,
        engine="not stated on the comparison page",
        precision="MXFP4",
        concurrency=10,
        input_tokens=None,
        output_tokens=1024,
        output_tokens_per_s_per_gpu=849.0,
        figure="1x H200 SXM peak throughput 849 tok/s over concurrency 1-10 and contexts "
        "1K-128K; compared at the largest concurrency, 10",
        source_title=_MILLSTONE[0],
        source_url=_MILLSTONE[1],
        why_apart=_ALL_EXPERTS.format(batch=10),
    ),
)

_GPT_OSS_B200 = (
    _gpt_oss(
        scenario="gpt_oss_120b_b200_tp4_c1_lmsys",
        benchmark="one_batch",
        gpu="b200",
        gpus=4,
        tp=4,
        engine="SGLang v0.5.1.post3",
        precision="MXFP4",
        concurrency=1,
        input_tokens=1024,
        output_tokens=512,
        tpot_ms=round(1000 / 416.02, 3),
        figure="batch-1 decode throughput 416.02 tok/s, TPOT = 1000 / that; tp, version and "
        "lengths from the post's reproduction commands (sglang benchmark/gpt_oss/README.md, "
        "bench_one_batch_server)",
        source_title=_LMSYS[0],
        source_url=_LMSYS[1],
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_b200_tp8_c1_cookbook",
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang 0.5.6",
        precision="MXFP4",
        concurrency=1,
        input_tokens=332,
        output_tokens=213,
        tpot_ms=2.31,
        output_tokens_per_s_per_gpu=round(405.93 / 8, 2),
        ttft_ms=33.71,
        figure="latency-sensitive run, ShareGPT at max concurrency 1: mean TPOT 2.31 ms; "
        "405.93 output and 633.76 input tok/s over 8 GPUs; lengths are the 100 requests' means",
        source_title=_SGLANG_GPT_OSS[0],
        source_url=_SGLANG_GPT_OSS[1],
        why_apart=f"{_FREE_TP.format(tp=8, batch=1)}; {_FRONT_END}",
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_b200_tp8_c100_cookbook",
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang 0.5.6",
        precision="MXFP4",
        concurrency=100,
        input_tokens=297,
        output_tokens=192,
        tpot_ms=14.31,
        output_tokens_per_s_per_gpu=round(7773.26 / 8, 2),
        ttft_ms=102.94,
        figure="throughput-sensitive run, ShareGPT at max concurrency 100 (89.23 on average): "
        "mean TPOT 14.31 ms; 7,773.26 output and 12,003.57 input tok/s over 8 GPUs",
        source_title=_SGLANG_GPT_OSS[0],
        source_url=_SGLANG_GPT_OSS[1],
        why_apart=f"{_FREE_TP.format(tp=8, batch=100)}; {_SHORT_PROMPTS}",
    ),
    _gpt_oss(
        scenario="gpt_oss_120b_b200_tp8_c1_sweep",
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
)

_DSV32_B200 = (
    _dsv32_nightly(1, 19.18, 52.13, 7003.29),
    _dsv32_nightly(8, 19.88, 402.37, 32024.01),
    _dsv32_nightly(16, 25.30, 632.33, 42795.90),
    _dsv32(
        scenario="deepseek_v3_2_b200_tp8_c100_cookbook",
        gpu="b200",
        gpus=8,
        tp=8,
        engine="SGLang 0.5.6, TP 8 EP 8 DP 8 (DeepSeek-V3.2-Exp)",
        precision="FP8 checkpoint",
        concurrency=100,
        input_tokens=302,
        output_tokens=188,
        tpot_ms=106.16,
        output_tokens_per_s_per_gpu=round(859.80 / 8, 2),
        ttft_ms=530.36,
        figure="throughput-sensitive run, random up to 1,024 in and out at max concurrency 100 "
        "(88.05 on average): mean TPOT 106.16 ms; 859.80 output and 1,377.06 input tok/s over "
        "8 GPUs; lengths are the 1,000 requests' means; V3.2-Exp has V3.2's shape",
        source_title=_SGLANG_DSV32[0],
        source_url=_SGLANG_DSV32[1],
        why_apart=f"{_DP_ATTENTION.format(batch=100)} (expert parallelism over 8 ranks)",
    ),
)

_DSV32_H200 = (
    _dsv32(
        scenario="deepseek_v3_2_h200_tp8_c100_sglang_gpustack",
        gpu="h200",
        gpus=8,
        tp=8,
        engine="SGLang v0.5.6.post2, TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=100,
        input_tokens=1000,
        output_tokens=2000,
        tpot_ms=39.45,
        output_tokens_per_s_per_gpu=round(2469.32 / 8, 2),
        ttft_ms=2103.54,
        figure="optimized, random 1K in / 2K out (Generation-Heavy), 100 prompts sent at "
        "once: mean TPOT 39.45 ms, 2,469.32 output tok/s over 8 GPUs",
        source_title=_GPUSTACK_DSV32[0],
        source_url=_GPUSTACK_DSV32[1],
    ),
    _dsv32(
        scenario="deepseek_v3_2_h200_tp8_c100_vllm_gpustack",
        gpu="h200",
        gpus=8,
        tp=8,
        engine="vLLM v0.13.0, TP 8",
        precision="FP8 checkpoint",
        concurrency=100,
        input_tokens=1000,
        output_tokens=2000,
        tpot_ms=45.72,
        output_tokens_per_s_per_gpu=round(2075.01 / 8, 2),
        ttft_ms=4789.20,
        figure="baseline, random 1K in / 2K out, 100 prompts sent at once: mean TPOT 45.72 ms, "
        "2,075.01 output tok/s over 8 GPUs",
        source_title=_GPUSTACK_DSV32[0],
        source_url=_GPUSTACK_DSV32[1],
        why_apart="vLLM at tp 8 without DP attention: the engine charges none of the all-reduces "
        "of 61 layers nor the indexer's top-k, and prefills the 100 prompts sent at once faster "
        "than vLLM did",
    ),
    _dsv32(
        scenario="deepseek_v3_2_h200_tp8_c500_2k_gpustack",
        gpu="h200",
        gpus=8,
        tp=8,
        engine="SGLang v0.5.6.post2, TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=500,
        input_tokens=2000,
        output_tokens=100,
        input_tokens_per_s_per_gpu=round((27712.54 - 1319.64) / 8, 2),
        ttft_ms=18696.78,
        figure="optimized, random 2K in / 100 out, 500 prompts sent at once: input tok/s = "
        "(total 27,712.54 less output 1,319.64) over 8 GPUs",
        source_title=_GPUSTACK_DSV32[0],
        source_url=_GPUSTACK_DSV32[1],
    ),
    _dsv32(
        scenario="deepseek_v3_2_h200_tp8_c500_4k_gpustack",
        gpu="h200",
        gpus=8,
        tp=8,
        engine="SGLang v0.5.6.post2, TP 8 DP 8",
        precision="FP8 checkpoint",
        concurrency=500,
        input_tokens=4000,
        output_tokens=200,
        input_tokens_per_s_per_gpu=round((20545.67 - 978.37) / 8, 2),
        ttft_ms=44019.81,
        figure="optimized, random 4K in / 200 out, 500 prompts sent at once: input tok/s = "
        "(total 20,545.67 less output 978.37) over 8 GPUs",
        source_title=_GPUSTACK_DSV32[0],
        source_url=_GPUSTACK_DSV32[1],
    ),
)

PUBLISHED: tuple[PublishedMeasurement, ...] = (
    *_GPT_OSS_H100,
    *_GPT_OSS_H200,
    *_GPT_OSS_B200,
    *_DSV32_B200,
    *_DSV32_H200,
)
"""What was found and read. No DeepSeek-V3.2 measurement on H100s was found, and one of
gpt-oss-120b on an H200 (docs/compute.md, Published serving figures)."""
