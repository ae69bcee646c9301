"""Compute speed from the deployment: the roofline of a named GPU running a model preset gives
`compute.prefill_tokens_per_s` and `compute.decode_ms_per_token`, a written value wins, and a
scenario with neither name runs the schema's made-up defaults and `validate` says so."""

from __future__ import annotations

from typing import Any

import pytest

from sim.deployment.compute import (
    GPU_PEAKS,
    MODEL_COMPUTE,
    made_up_compute,
    roofline,
)
from sim.deployment.hardware import GPUS
from sim.deployment.table import write_into
from sim.model.presets import GIB, MODEL_PRESETS
from sim.scenario.loading import build_scenario
from tests.conftest import REPO, invoke, make_doc, ok
from tests.test_deployments import deployment_doc as named_deployment


def deployment_doc(**keys: Any) -> dict[str, Any]:
    """The newcomer's deployment by name (a small workload instead of the trace)."""
    newcomer = {"name": "compute", "server.sglang": "0.5.20", "storage.backend": "mooncake"}
    return named_deployment(**{**newcomer, **keys})


def test_h200_gpt_oss_120b_is_the_roofline_of_the_cited_figures() -> None:
    """By hand from docs/compute.md: 989.4 TFLOP/s dense BF16 at 45 %, 4.8 TB/s at 72 %;
    5.1 B of 116.8 B parameters active, 64 heads of 64 dimensions, 18 full and 18 sliding
    (128-token) layers, 8 KV heads, a 60.8 GiB checkpoint."""
    flops = 2 * 5.1e9 + 4 * 64 * 64 * (18 * 8192 + 18 * 128)
    prefill = 989.4e12 * 0.45 / flops
    weights = min(116.8e9, 32 * 5.1e9) * (60.8 * GIB / 116.8e9)
    kv = 32 * (18 * 8192 + 18 * 128) * 2 * 8 * 64 * 2
    decode_ms = (weights + kv) / (4.8e12 * 0.72) * 1000
    found = roofline("h200", "gpt-oss-120b", 1)
    assert found is not None
    assert found.prefill_flops_per_token == pytest.approx(flops)
    assert found.prefill_tokens_per_s == round(prefill)
    assert found.decode_ms_per_token == pytest.approx(decode_ms, abs=5e-4)
    assert 35_000 < found.prefill_tokens_per_s < 35_300 and 21 < found.decode_ms_per_token < 22


@pytest.mark.parametrize(("gpu", "latent_bytes"), [("b200", 576), ("h100", 1152)])
def test_deepseek_v3_2_is_the_roofline_of_its_latent_and_its_indexer(
    gpu: str, latent_bytes: int
) -> None:
    """By hand from DeepSeek-V3.2's config and model card: 37 B of 685 B parameters active;
    128 heads meeting a 576-dim latent key (kv_lora_rank 512 + rope 64) and a 512-dim value
    in at most index_topk 2,048 of the 8,192 tokens, in each of 61 layers; the indexer's
    64 heads x 128 dims scoring all 8,192. A decode step at tp 8 reads an eighth of the
    642 GiB checkpoint and, per request, 2,048 latents a layer (fp8 on a B200, bf16 on an
    H100; whole on every rank) and 8,192 indexer keys of 132 bytes."""
    flops = 2 * 37e9 + 2 * 128 * (576 + 512) * 61 * 2048 + 2 * 64 * 128 * 61 * 8192
    weights = min(685e9, 32 * 37e9) * (642 * GIB / 685e9) / 8
    kv = 32 * (61 * 2048 * latent_bytes + 61 * 8192 * 132)
    found = roofline(gpu, "deepseek-v3.2", 8)
    assert found is not None
    assert found.prefill_flops_per_token == pytest.approx(flops)
    assert found.decode_step_bytes == pytest.approx(weights + kv)
    sixteen = roofline(gpu, "deepseek-v3.2", 16)
    assert sixteen is not None
    assert sixteen.decode_step_bytes == pytest.approx(weights / 2 + kv)


def test_the_newcomer_scenario_derives_its_compute_and_says_from_what() -> None:
    scenario = build_scenario(deployment_doc())
    found = roofline("h200", "gpt-oss-120b", 1)
    assert found is not None
    assert scenario.compute.prefill_tokens_per_s == found.prefill_tokens_per_s
    assert scenario.compute.decode_ms_per_token == found.decode_ms_per_token
    prefill = scenario.sources["compute.prefill_tokens_per_s"]
    decode = scenario.sources["compute.decode_ms_per_token"]
    assert prefill.startswith("derived: roofline h200 x gpt-oss-120b at tp 1: 12.65 GFLOP")
    assert "45% of 989.4 TFLOP/s" in prefill
    assert decode.startswith("derived: roofline h200 x gpt-oss-120b at tp 1: a step of 32")
    assert "72% of 4.8 TB/s" in decode
    assert made_up_compute(scenario.sources) == []


def test_a_written_compute_value_wins_and_says_what_the_roofline_gives() -> None:
    scenario = build_scenario(deployment_doc(**{"compute.prefill_tokens_per_s": 60000}))
    assert scenario.compute.prefill_tokens_per_s == 60000
    assert scenario.sources["compute.prefill_tokens_per_s"] == (
        "user; the roofline h200 x gpt-oss-120b at tp 1 gives 35186.0"
    )
    assert scenario.sources["compute.decode_ms_per_token"].startswith("derived: roofline")


def test_a_written_value_equal_to_the_roofline_is_plainly_the_users() -> None:
    found = roofline("h200", "gpt-oss-120b", 1)
    assert found is not None
    written = {"compute.decode_ms_per_token": found.decode_ms_per_token}
    scenario = build_scenario(deployment_doc(**written))
    assert scenario.sources["compute.decode_ms_per_token"] == "user"


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200"])
def test_tensor_parallelism_splits_compute_and_reads(gpu: str) -> None:
    """tp ranks share a token's FLOPs and a step's weights and KV heads (8 KV heads: halved at
    tp 2); communication is not charged, so the rate doubles and the step halves."""
    one, two = roofline(gpu, "gpt-oss-120b", 1), roofline(gpu, "gpt-oss-120b", 2)
    assert one is not None and two is not None
    assert two.prefill_tokens_per_s == pytest.approx(2 * one.prefill_tokens_per_s, abs=1)
    assert two.decode_step_bytes == pytest.approx(one.decode_step_bytes / 2)
    scenario = build_scenario(deployment_doc(**{"hardware.gpu": gpu, "server.tp_size": 2}))
    assert scenario.compute.prefill_tokens_per_s == two.prefill_tokens_per_s
    assert "at tp 2" in scenario.sources["compute.prefill_tokens_per_s"]


def test_a_rank_keeps_one_kv_head_beyond_the_heads() -> None:
    """At tp 16 a rank still holds one of gpt-oss's 8 KV heads: weights keep shrinking, KV not."""
    eight, sixteen = roofline("h200", "gpt-oss-120b", 8), roofline("h200", "gpt-oss-120b", 16)
    assert eight is not None and sixteen is not None
    assert sixteen.decode_step_bytes > eight.decode_step_bytes / 2


def test_a_faster_gpu_prefills_faster_and_decodes_sooner() -> None:
    rates = {gpu: roofline(gpu, "gpt-oss-120b", 1) for gpu in ("a100-80g", "h100", "b200")}
    a100, h100, b200 = (rates[g] for g in ("a100-80g", "h100", "b200"))
    assert a100 is not None and h100 is not None and b200 is not None
    assert a100.prefill_tokens_per_s < h100.prefill_tokens_per_s < b200.prefill_tokens_per_s
    assert a100.decode_ms_per_token > h100.decode_ms_per_token > b200.decode_ms_per_token


def test_every_gpu_profile_and_preset_has_figures() -> None:
    assert sorted(GPU_PEAKS) == sorted(GPUS)
    assert sorted(MODEL_COMPUTE) == sorted(MODEL_PRESETS)
    for gpu in GPUS:
        for preset in MODEL_PRESETS:
            found = roofline(gpu, preset, 1)
            assert found is not None and found.prefill_tokens_per_s > 0
            assert found.decode_ms_per_token > 0


@pytest.mark.parametrize("drop", [("hardware",), ("model", "preset")], ids=["no gpu", "no preset"])
def test_without_a_gpu_or_a_preset_the_made_up_default_stays(drop: tuple[str, ...]) -> None:
    doc = deployment_doc()
    if drop == ("hardware",):
        doc.pop("hardware")
        doc["device"] = {"kv_pages": 2000, "swa_pages": 2000}
    else:
        doc["model"] = make_doc()["model"]
        doc["device"] = {"kv_pages": 2000, "swa_pages": 2000}
    scenario = build_scenario(doc)
    assert scenario.compute.prefill_tokens_per_s == 20000
    assert scenario.compute.decode_ms_per_token == 20
    assert made_up_compute(scenario.sources) == [
        "compute.prefill_tokens_per_s",
        "compute.decode_ms_per_token",
    ]


def test_a_gpu_without_peaks_derives_nothing() -> None:
    """`hardware.gpu: custom` names memory, not a chip: no roofline."""
    doc = deployment_doc(**{"hardware.gpu": "custom", "hardware.memory_mib": 143771})
    scenario = build_scenario(doc)
    assert scenario.sources["compute.prefill_tokens_per_s"] == "default"


def test_validate_warns_of_made_up_compute_and_exits_0(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(make_doc()))
    told = ok(invoke("validate", str(path)))
    assert "warning: compute.prefill_tokens_per_s = 20000.0 is the schema's made-up" in (
        told.stderr
    )
    assert "warning: compute.decode_ms_per_token = 20.0" in told.stderr
    named = tmp_path / "named.yaml"
    named.write_text(yaml.safe_dump(deployment_doc()))
    told = ok(invoke("validate", str(named)))
    assert "made-up" not in told.stderr
    assert "compute.prefill_tokens_per_s = 35186.0  (derived: roofline h200" in told.stdout


def test_docs_compute_tables_are_the_modules_figures() -> None:
    """docs/compute.md's tables are `sim.deployment.compute`'s output
    (`python -m sim.deployment.table docs/compute.md` writes them)."""
    text = (REPO / "docs" / "compute.md").read_text()
    assert write_into(text) == text
    for name in ("compute gpus", "compute models", "compute roofline", "compute published"):
        assert f"<!-- {name} table: start -->" in text
    assert "| `gpt-oss-120b` | 35,186 / 31.135 | 35,186 / 21.73 |" in text
