"""Sizes at `server.tp_size` > 1: `model.<pool>` bytes are one rank's (a preset derives them at
the scenario's tp_size as SGLang splits heads), the device sizing keeps them as they are and
splits only the weights, and a rank never holds more than its GPU's memory. A preset that does
not fit says what would (more ranks, a published lower precision)."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from sim.deployment.compute import DECODE_BATCH, DECODE_CONTEXT_TOKENS, roofline
from sim.deployment.hardware import GPUS
from sim.deployment.sizing import CONTEXT_MIB
from sim.engine.runner import run
from sim.model.presets import MODEL_PRESETS
from sim.scenario.loading import build_scenario
from sim.scenario.schema import Scenario, ScenarioError
from sim.studies.grid import plan
from tests.test_deployments import deployment_doc

TP_SIZES = (1, 2, 4, 8)
GRID = list(itertools.product(MODEL_PRESETS.names(), GPUS.names(), TP_SIZES))


def sized(preset: str, gpu: str, tp: int, **keys: Any) -> Scenario:
    return build_scenario(
        deployment_doc(
            **{"model.preset": preset, "hardware.gpu": gpu, "server.tp_size": tp}, **keys
        )
    )


def rank_bytes(scenario: Scenario) -> float:
    """What one rank holds: its share of the weights and every device pool at its bytes."""
    model, device, page = scenario.model, scenario.device, scenario.model.page_size
    preset = MODEL_PRESETS[str(model.preset)]
    held = preset.checkpoint(model.weights_dtype).weight_bytes / scenario.server.tp_size
    held += device.kv_pages * page * model.kv.bytes_per_token
    indexer = getattr(model, "indexer", None)
    if indexer is not None:
        held += device.kv_pages * page * indexer.bytes_per_token  # type: ignore[attr-defined]
    swa = getattr(model, "swa", None)
    if swa is not None:
        held += device.swa_pages * page * swa.bytes_per_token  # type: ignore[attr-defined]
    mamba = getattr(model, "mamba", None)
    if mamba is not None:
        held += (device.mamba_slots + 1) * mamba.state_bytes  # type: ignore[attr-defined]
    return held


@pytest.mark.parametrize(("preset", "gpu", "tp"), GRID)
def test_a_rank_never_holds_more_than_its_gpu_s_memory(preset: str, gpu: str, tp: int) -> None:
    try:
        scenario = sized(preset, gpu, tp)
    except ScenarioError as exc:
        assert [key for key, _ in exc.problems] == ["device.kv_pages"]
        assert "leave no memory for the KV cache" in exc.message
        return
    memory = GPUS[gpu].memory_mib * 2**20
    static = (GPUS[gpu].memory_mib - CONTEXT_MIB) * 2**20 * scenario.server.mem_fraction_static
    assert rank_bytes(scenario) <= static < memory
    derived = MODEL_PRESETS[preset].pool_specs(tp)["kv"]["bytes_per_token"]
    if scenario.model.kv_cache_dtype is not None:  # a DSA latent follows the GPU's dtype
        derived = MODEL_PRESETS[preset].kv_bytes_per_token(  # type: ignore[attr-defined]
            scenario.model.kv_cache_dtype, GPUS[gpu].sm_major
        )
    assert scenario.model.kv.bytes_per_token == derived


def test_every_preset_fits_some_gpu_at_more_than_one_rank() -> None:
    """The grid above is not vacuous: at tp > 1 most of it is sized."""
    fitted = set()
    for preset, gpu, tp in GRID:
        if tp > 1:
            try:
                sized(preset, gpu, tp)
            except ScenarioError:
                continue
            fitted.add(preset)
    assert fitted == set(MODEL_PRESETS.names())


def test_qwen3_next_at_tp_2_resolves_one_rank_s_bytes_that_fit_the_rank() -> None:
    two = sized("qwen3-next-80b-a3b", "h200", 2)
    # 12 full layers x K and V x 1 of the 2 KV heads x 256 x bf16
    assert two.model.kv.bytes_per_token == 12 * 2 * 1 * 256 * 2 == 12288
    # 36 linear layers: half of the conv's 16·128 + 16·128 + 32·128 channels x 3 past inputs
    # in bf16, and 16 of the 32 value heads x 128 x 128 in fp32
    state = 36 * (8192 // 2 * 3 * 2 + 16 * 128 * 128 * 4)
    assert two.model.mamba.state_bytes == state == 38633472  # type: ignore[attr-defined]
    pools = (GPUS["h200"].memory_mib - CONTEXT_MIB) * 2**20 * two.server.mem_fraction_static
    pools -= 80e9 * 2 / 2
    assert 0.99 * pools < rank_bytes(two) - 80e9 <= pools


def test_a_rank_splits_kv_heads_down_to_one_and_replicates_mamba_groups() -> None:
    gpt = MODEL_PRESETS["gpt-oss-120b"]  # 8 KV heads
    assert (
        gpt.pool_specs(8)["kv"]["bytes_per_token"]
        == gpt.pool_specs(1)["kv"]["bytes_per_token"] // 8
    )
    assert gpt.pool_specs(16)["kv"] == gpt.pool_specs(8)["kv"]  # one head a rank, replicated
    nemotron = MODEL_PRESETS["nemotron-h-8b"]  # 8 groups, 128 heads of 64, state 128
    conv = (128 * 64 + 2 * 16 * 128) // 16 * 3  # 16 ranks: the 8 groups replicated to 16
    ssm = 128 // 16 * 64 * 128
    assert nemotron.pool_specs(16)["mamba"]["state_bytes"] == 24 * (conv * 2 + ssm * 4)


@pytest.mark.parametrize("preset", MODEL_PRESETS.names())
@pytest.mark.parametrize("tp", TP_SIZES)
def test_the_roofline_reads_the_kv_the_rank_holds(preset: str, tp: int) -> None:
    """The decode step's KV reads are the per-rank bytes the preset's pool specs give."""
    found = roofline("h200", preset, tp)
    assert found is not None
    specs = MODEL_PRESETS[preset].pool_specs(tp)
    kv = DECODE_CONTEXT_TOKENS * specs["kv"]["bytes_per_token"]
    if "swa" in specs:
        window = min(specs["swa"]["window_tokens"], DECODE_CONTEXT_TOKENS)
        kv += window * specs["swa"]["bytes_per_token"]
    weights = found.decode_step_bytes - DECODE_BATCH * kv
    assert 0 < weights <= MODEL_PRESETS[preset].weight_bytes / tp * 1.0000001


def test_a_page_moves_every_rank_s_shard_through_storage() -> None:
    """Written out here, the device sizes are not derived; the bytes still are, one rank's."""
    doc = deployment_doc(
        **{
            "model.preset": "qwen3-next-80b-a3b",
            "server.tp_size": 2,
            "device.kv_pages": 300,
            "device.mamba_slots": 40,
        }
    )
    doc["workload"].update(requests=60)
    summary = run(build_scenario(doc)).summary
    page, state = 64 * 12288, 38633472
    one_rank = summary["written_kv_pages"] * page + summary["written_mamba_objects"] * state
    assert one_rank > 0
    assert summary["staged_write_bytes"] == one_rank  # over one rank's PCIe link
    assert summary["written_bytes"] == 2 * one_rank  # both ranks' shards to storage
    assert summary["storage_kv_stored_bytes"] % (2 * page) == 0


def test_a_sweep_over_tp_size_derives_each_point_s_bytes() -> None:
    doc = deployment_doc()
    doc["sweep"] = {"grid": {"server.tp_size": [1, 2, 4]}}
    tasks = plan(build_scenario(doc), "<test>")
    sizes = {
        dict(t.values)["server.tp_size"]: t.doc["model"]["kv"]["bytes_per_token"] for t in tasks
    }
    assert sizes == {1: 36864, 2: 36864 // 2, 4: 36864 // 4}  # 8 KV heads of gpt-oss-120b


# ---------------------------------------------------------------- a preset that does not fit


def test_a_preset_too_big_for_one_gpu_names_the_tp_size_and_the_precision_that_fit() -> None:
    with pytest.raises(ScenarioError) as err:
        sized("qwen3-next-80b-a3b", "h200", 1)
    assert [key for key, _ in err.value.problems] == ["device.kv_pages"]  # no host.pages after
    assert "the weights (149.0 GiB a rank) leave no memory" in err.value.message
    assert err.value.message.endswith(
        "it fits with server.tp_size: 2 (74.5 GiB a rank) or model.weights_dtype: fp8 "
        "(74.5 GiB a rank)"
    )
    sized("qwen3-next-80b-a3b", "h200", 2)
    sized("qwen3-next-80b-a3b", "h200", 1, **{"model.weights_dtype": "fp8"})


@pytest.mark.parametrize(("preset", "gpu", "tp"), GRID)
def test_the_tp_size_a_refusal_names_is_sized(preset: str, gpu: str, tp: int) -> None:
    try:
        sized(preset, gpu, tp)
    except ScenarioError as exc:
        named = re.search(r"it fits with server\.tp_size: (\d+)", exc.message)
        if named is None:
            assert (
                "does not fit on 8 of these GPUs" in exc.message or "weights_dtype" in exc.message
            )
            return
        fits = int(named.group(1))
        sized(preset, gpu, fits)
        for fewer in TP_SIZES:
            if tp < fewer < fits:
                with pytest.raises(ScenarioError):
                    sized(preset, gpu, fewer)


def test_a_lower_precision_halves_the_weights_of_the_sizing_and_of_the_roofline() -> None:
    bf16 = sized("qwen3-next-80b-a3b", "h200", 2)
    fp8 = sized("qwen3-next-80b-a3b", "h200", 2, **{"model.weights_dtype": "fp8"})
    assert fp8.device.kv_pages > bf16.device.kv_pages
    assert "fp8 weights a rank (tp 2)" in fp8.sources["device.kv_pages"]
    assert fp8.compute.decode_ms_per_token < bf16.compute.decode_ms_per_token
    full, half = (
        roofline("h200", "qwen3-next-80b-a3b", 2),
        roofline("h200", "qwen3-next-80b-a3b", 2, "fp8"),
    )
    assert full is not None and half is not None
    assert full.decode_step_bytes - half.decode_step_bytes == pytest.approx(80e9 / 2)


def test_only_a_published_precision_is_taken() -> None:
    sized("gpt-oss-120b", "h200", 1, **{"model.weights_dtype": "mxfp4"})  # as shipped
    with pytest.raises(ScenarioError) as err:
        sized("gpt-oss-120b", "h200", 1, **{"model.weights_dtype": "bf16"})
    assert err.value.key == "model.weights_dtype"
    assert "gpt-oss-120b has no published bf16 checkpoint; it has mxfp4" in err.value.message
    doc = deployment_doc(**{"model.weights_dtype": "fp8"})
    doc["model"] = {"kv": {"bytes_per_token": 1024}, "weights_dtype": "fp8"}
    doc["device"] = {"kv_pages": 100}
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "model.weights_dtype"
    assert "needs model.preset" in err.value.message


def test_an_unknown_preset_with_a_gpu_is_told_once_and_first() -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(deployment_doc(**{"model.preset": "qwen3-next"}))
    assert [key for key, _ in err.value.problems] == ["model.preset"]
    assert "did you mean 'qwen3-next-80b-a3b'?" in err.value.message
