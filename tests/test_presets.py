"""Model presets (`sim.model.presets`): the derived pool sizes against figures worked out by
hand from each model's config.json, and how a preset behaves in a scenario (defaults under what
the file writes, provenance in the resolved config, errors that name `model.preset`)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from typing import Any

import pytest

from sim.core.documents import layered
from sim.deployment.fitting import preset_rank
from sim.deployment.hardware import GPUS
from sim.deployment.kv_dtype import fill_dsa_kv_cache
from sim.deployment.resolve import Sources
from sim.engine.runner import run
from sim.model.presets import MODEL_PRESETS, SlidingWindowHybrid, interleaved
from sim.model.presets_mla import DeepSeekSparseAttention
from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import ScenarioError, scenario_document, scenario_model
from sim.studies.grid import plan
from tests.conftest import REPO, invoke, make_doc

SHIPPED = REPO / "scenarios" / "presets" / "gpt_oss_120b.yaml"

BF16, FP32 = 2, 4

EXPECTED: dict[str, dict[str, dict[str, int | bool]]] = {
    # 24 layers alternating sliding / full: 12 + 12; 8 KV heads of 64; K and V; bf16
    "gpt-oss-20b": {
        "kv": {"bytes_per_token": 12 * 2 * 8 * 64 * BF16, "layers": 12},  # 24,576
        "swa": {"window_tokens": 128, "bytes_per_token": 12 * 2 * 8 * 64 * BF16, "layers": 12},
    },
    # 36 layers alternating: 18 + 18
    "gpt-oss-120b": {
        "kv": {"bytes_per_token": 18 * 2 * 8 * 64 * BF16, "layers": 18},  # 36,864
        "swa": {"window_tokens": 128, "bytes_per_token": 18 * 2 * 8 * 64 * BF16, "layers": 18},
    },
    # 62 layers, every 6th global: 10 global (layers 5, 11, ..., 59) + 52 local; 16 KV heads
    # of 128
    "gemma-3-27b": {
        "kv": {"bytes_per_token": 10 * 2 * 16 * 128 * BF16, "layers": 10},  # 81,920
        "swa": {
            "window_tokens": 1024,
            "bytes_per_token": 52 * 2 * 16 * 128 * BF16,
            "layers": 52,
        },  # 425,984
    },
    # 48 layers, every 4th full: 12 full (2 KV heads of 256) + 36 Gated DeltaNet. Per linear
    # layer: conv over q, k, v = 16·128 + 16·128 + 32·128 = 8,192 channels × 3 past inputs in
    # bf16, and a 32 × 128 × 128 state in fp32
    "qwen3-next-80b-a3b": {
        "kv": {"bytes_per_token": 12 * 2 * 2 * 256 * BF16, "layers": 12},  # 24,576
        "mamba": {
            "state_bytes": 36 * (8192 * 3 * BF16 + 32 * 128 * 128 * FP32),
            "layers": 36,
        },  # 77,266,944
    },
    # pattern of 52: 24 M, 4 *, 24 -; 8 KV heads of 128. Per Mamba-2 layer: conv over
    # 128·64 + 2·8·128 = 10,240 channels × 3 in bf16, state 128 heads × 64 × 128 in fp32
    "nemotron-h-8b": {
        "kv": {"bytes_per_token": 4 * 2 * 8 * 128 * BF16, "layers": 4},  # 16,384
        "mamba": {
            "state_bytes": 24 * (10240 * 3 * BF16 + 128 * 64 * 128 * FP32),
            "layers": 24,
        },  # 102,137,856
    },
    # pattern of 118: 54 M, 10 *, 54 -; conv over 256·64 + 2·8·256 = 20,480 channels, state
    # 256 × 64 × 256
    "nemotron-h-56b": {
        "kv": {"bytes_per_token": 10 * 2 * 8 * 128 * BF16, "layers": 10},  # 40,960
        "mamba": {
            "state_bytes": 54 * (20480 * 3 * BF16 + 256 * 64 * 256 * FP32),
            "layers": 54,
        },  # 912,605,184
    },
    # 61 MLA layers, each a latent of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 dims in
    # bf16 (Hopper's default), the same on every rank (one copy in storage); each layer's DSA
    # indexer key is 128 fp8 dims + 128 / 128 float32 scales = 132 bytes
    "deepseek-v3.2": {
        "kv": {"bytes_per_token": 61 * 576 * BF16, "layers": 61, "replicated": True},  # 70,272
        "indexer": {"bytes_per_token": 61 * (128 + 1 * 4), "layers": 61},  # 8,052
    },
}


def preset_doc(name: str, **model: Any) -> dict[str, Any]:
    """The test base with this preset as its model and the device and storage keys its pools
    need."""
    doc = make_doc()
    doc["model"] = {"preset": name, **model}
    pools = set(EXPECTED[name])
    doc["device"] = {"kv_pages": 2000}
    if "swa" in pools:
        doc["device"]["swa_pages"] = 2000
    if "mamba" in pools:
        doc["device"]["mamba_slots"] = 64
    doc["storage"]["pools"] = {pool: {} for pool in pools}
    return doc


def resolved(pool: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A derived spec as the resolved model lists it: KV says whether it is replicated."""
    return {"replicated": False, **spec} if pool == "kv" else spec


# ---------------------------------------------------------------- arithmetic


def test_every_preset_is_checked_here() -> None:
    assert set(MODEL_PRESETS) == set(EXPECTED)
    for name in MODEL_PRESETS:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+(\.[0-9]+)?)*", name), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_derived_sizes_match_the_hand_computed_figures(name: str) -> None:
    assert MODEL_PRESETS[name].pool_specs() == EXPECTED[name]


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("gpt-oss-20b", {"full_attention_layers": 12, "sliding_window_layers": 12}),
        ("gpt-oss-120b", {"full_attention_layers": 18, "sliding_window_layers": 18}),
        ("gemma-3-27b", {"full_attention_layers": 10, "sliding_window_layers": 52}),
        ("qwen3-next-80b-a3b", {"full_attention_layers": 12, "linear_attention_layers": 36}),
        ("nemotron-h-8b", {"attention_layers": 4, "mamba_layers": 24}),
        ("nemotron-h-56b", {"attention_layers": 10, "mamba_layers": 54}),
    ],
)
def test_layers_by_type(name: str, counts: dict[str, int]) -> None:
    preset = MODEL_PRESETS[name]
    assert {field: getattr(preset, field) for field in counts} == counts


DSA = MODEL_PRESETS["deepseek-v3.2"]
assert isinstance(DSA, DeepSeekSparseAttention)


@pytest.mark.parametrize(
    ("dtype", "sm_major", "per_layer"),
    [
        ("bf16", 9, (512 + 64) * 2),  # 1,152: the latent in bf16
        ("bf16", 10, (512 + 64) * 2),
        ("fp8_e4m3", 10, 512 + 64),  # 576: trtllm's raw fp8 latent (Blackwell's backends)
        ("fp8_e4m3", 9, 512 + 512 // 128 * 4 + 64 * 2),  # 656: fp8, 4 scales, bf16 rope
    ],
)
def test_dsa_latent_bytes_follow_the_dtype_and_the_backends_layout(
    dtype: str, sm_major: int, per_layer: int
) -> None:
    """deepseek-ai/DeepSeek-V3.2 config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim
    64; SGLang's scaled fp8 layout (flashmla_kv, Hopper's fp8 default) keeps one float32 scale
    per 128 dims and the rope dims in bf16, trtllm's (Blackwell's) the 576 dims raw."""
    assert DSA.kv_bytes_per_token_per_layer(dtype, sm_major) == per_layer
    assert DSA.kv_bytes_per_token(dtype, sm_major) == 61 * per_layer


def test_an_unknown_dsa_kv_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown KV cache dtype 'fp16'"):
        DSA.kv_bytes_per_token("fp16")


@pytest.mark.parametrize(
    ("gpu", "dtype"),
    [("h100", "bf16"), ("h200", "bf16"), ("b200", "fp8_e4m3"), ("a100-80g", "bf16")],
)
def test_sglang_picks_the_dsa_kv_dtype_from_the_gpu(gpu: str, dtype: str) -> None:
    """fp8_e4m3 from SM100 on, bf16 below; learnable attention sinks keep bf16 everywhere."""
    assert DSA.default_kv_cache_dtype(GPUS[gpu].sm_major) == dtype
    with_sinks = dataclasses.replace(DSA, attention_sinks=True)
    assert with_sinks.default_kv_cache_dtype(GPUS[gpu].sm_major) == "bf16"


def test_an_mla_latent_is_one_replicated_head() -> None:
    """Every rank holds the whole latent: at tp 8 a rank's KV and indexer bytes are the
    model's, while the weights split."""
    assert DSA.num_key_value_heads == 1
    assert DSA.pool_specs()["kv"]["replicated"] is True
    assert DSA.pool_specs(8) == DSA.pool_specs(1)
    rank = preset_rank(DSA, {"kv", "indexer"}, 8, DSA.checkpoint())
    assert rank.kv_bytes_per_token == 70272 + 8052
    assert rank.weight_bytes == DSA.weight_bytes / 8


def test_the_fp8_checkpoint_does_not_fit_one_gpu() -> None:
    assert DSA.weight_bytes == 642 * 2**30
    assert all(DSA.weight_bytes > gpu.memory_mib * 2**20 for gpu in GPUS.values())
    doc = make_doc()
    doc["model"] = {"preset": "deepseek-v3.2"}
    doc["hardware"] = {"gpu": "b200"}
    doc.pop("device")
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "device.kv_pages"
    assert "642.0 GiB a rank" in err.value.message


def _dsa_model(gpu: str | None, **model: Any) -> tuple[dict[str, Any], Sources]:
    doc: dict[str, Any] = {"model": {"preset": "deepseek-v3.2", **model}}
    if gpu is not None:
        doc["hardware"] = {"gpu": gpu}
    sources = Sources()
    assert fill_dsa_kv_cache(doc, sources) == []
    return doc, sources


@pytest.mark.parametrize(
    ("gpu", "dtype", "kv_bytes", "where"),
    [
        ("h100", "bf16", 70272, "h100 (SM90)"),
        ("b200", "fp8_e4m3", 35136, "b200 (SM100)"),
        (None, "bf16", 70272, "SM90, no hardware.gpu"),
    ],
)
def test_a_dsa_preset_takes_the_gpu_s_kv_dtype_and_says_so(
    gpu: str | None, dtype: str, kv_bytes: int, where: str
) -> None:
    doc, sources = _dsa_model(gpu)
    assert doc["model"]["kv_cache_dtype"] == dtype
    assert doc["model"]["kv"]["bytes_per_token"] == kv_bytes
    assert sources["model.kv_cache_dtype"] == (
        f"derived: SGLang's DSA default on {where} "
        "(arg_groups/overrides.py:_dsa_kv_cache_dtype_default)"
    )
    assert sources["model.kv.bytes_per_token"].startswith(
        f"derived: preset deepseek-v3.2 in {dtype} on {where}: 61 layers x {kv_bytes // 61:,} B"
    )


def test_a_written_dsa_kv_dtype_takes_the_gpu_s_layout() -> None:
    """fp8 on an H100 is flashmla_kv's scaled layout (656 bytes a layer), not Blackwell's."""
    doc, sources = _dsa_model("h100", kv_cache_dtype="fp8_e4m3")
    assert doc["model"]["kv"]["bytes_per_token"] == 61 * 656
    assert "model.kv_cache_dtype" not in sources.of
    assert "float32 block scales and bf16 rope" in sources["model.kv.bytes_per_token"]


def test_written_kv_bytes_win_over_the_dtype() -> None:
    doc, sources = _dsa_model("b200", kv={"bytes_per_token": 1000})
    assert doc["model"]["kv"] == {"bytes_per_token": 1000}
    assert doc["model"]["kv_cache_dtype"] == "fp8_e4m3"
    assert "model.kv.bytes_per_token" not in sources.of


@pytest.mark.parametrize("preset", ["gpt-oss-20b", None])
def test_a_kv_dtype_for_a_model_it_does_not_size_is_bad_input(preset: str | None) -> None:
    doc = preset_doc("gpt-oss-20b", kv_cache_dtype="fp8_e4m3")
    if preset is None:
        doc["model"] = {**make_doc()["model"], "kv_cache_dtype": "fp8_e4m3"}
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "model.kv_cache_dtype"
    assert "derived only for DeepSeek DSA presets" in err.value.message


@dataclasses.dataclass(frozen=True, kw_only=True)
class _LatentOnly(DeepSeekSparseAttention):
    """DeepSeek-V3.2 with its KV latent only, without the indexer pool and `kv.replicated`,
    so the dtype rule can be followed through a whole scenario."""

    def pool_specs(self, tp_size: int = 1) -> dict[str, dict[str, int]]:
        kv = super().pool_specs(tp_size)["kv"]
        return {"kv": {"bytes_per_token": kv["bytes_per_token"], "layers": kv["layers"]}}


@pytest.mark.parametrize(
    ("gpu", "dtype", "kv_bytes"), [("b200", "fp8_e4m3", 35136), ("h200", "bf16", 70272)]
)
def test_the_resolved_configuration_cites_the_dsa_dtype_rule(
    gpu: str, dtype: str, kv_bytes: int
) -> None:
    fields = {f.name: getattr(DSA, f.name) for f in dataclasses.fields(DSA)}
    MODEL_PRESETS.register("latent-only", _LatentOnly(**fields))
    try:
        doc = make_doc(**{"hardware.gpu": gpu, "server.tp_size": 8})
        doc["model"] = {"preset": "latent-only"}
        doc["storage"]["pools"] = {"kv": {}}
        doc.pop("device")
        scenario = build_scenario(doc)
        assert scenario.model.kv_cache_dtype == dtype
        assert scenario.model.kv.bytes_per_token == kv_bytes
        assert scenario.sources["model.kv_cache_dtype"].startswith(
            f"derived: SGLang's DSA default on {gpu} (SM"
        )
        assert scenario.sources["model.kv.bytes_per_token"].startswith(
            f"derived: preset latent-only in {dtype} on {gpu}"
        )
        assert scenario.sources["model.kv.layers"] == "preset latent-only"
        assert {"model.kv_cache_dtype", "model.kv.bytes_per_token"} <= set(
            scenario.sources.from_profiles()
        )  # what `validate` prints
        resolved = scenario_document(scenario)
        assert resolved["model"]["kv_cache_dtype"] == dtype
        assert build_scenario(resolved) == scenario
        assert pickle.loads(pickle.dumps(scenario)) == scenario
    finally:
        MODEL_PRESETS.unregister("latent-only")


def test_interleaved_puts_the_full_layer_last_in_each_group() -> None:
    assert interleaved(6, every=2) == ("sliding_attention", "full_attention") * 3
    assert interleaved(7, every=3).count("full_attention") == 2


def test_docs_quote_every_derived_size() -> None:
    """docs/model.md lists each preset's derived sizes; a changed preset must change the page."""
    page = (REPO / "docs" / "model.md").read_text()
    for name, pools in EXPECTED.items():
        assert f"`{name}`" in page, name
        for spec in pools.values():
            for value in spec.values():
                assert f"{value:,}" in page, (name, value)


# ---------------------------------------------------------------- in a scenario


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_preset_alone_gives_the_model_its_pools(name: str) -> None:
    scenario = build_scenario(preset_doc(name))
    assert scenario.model.preset == name
    assert scenario.model.pools == tuple(EXPECTED[name])
    for pool, spec in EXPECTED[name].items():
        assert scenario.model.pool_spec(pool).model_dump(exclude_none=True) == resolved(pool, spec)  # type: ignore[union-attr]


def test_what_the_file_writes_overrides_a_derived_field_and_keeps_the_rest() -> None:
    scenario = build_scenario(preset_doc("gemma-3-27b", swa={"window_tokens": 512}))
    assert scenario.model.swa.window_tokens == 512  # type: ignore[attr-defined]
    assert scenario.model.swa.bytes_per_token == 425_984  # type: ignore[attr-defined]
    assert scenario.model.kv.bytes_per_token == 81_920


def test_set_overrides_apply_to_a_preset_scenario_file() -> None:
    scenario = load_scenario(SHIPPED, ["model.page_size=32", "model.kv.bytes_per_token=1000"])
    assert scenario.model.page_size == 32
    assert scenario.model.kv.bytes_per_token == 1000
    assert scenario.model.swa.bytes_per_token == 36_864  # type: ignore[attr-defined]
    other = load_scenario(SHIPPED, ["model.preset=gpt-oss-20b"])
    assert other.model.kv.bytes_per_token == 24_576


def test_null_drops_a_pool_the_preset_brings() -> None:
    doc = preset_doc("gpt-oss-120b", swa=None)
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "device.swa_pages"
    assert "model.swa is null" in err.value.message
    del doc["device"]["swa_pages"]
    del doc["storage"]["pools"]["swa"]
    assert build_scenario(doc).model.pools == ("kv",)


def test_expanding_leaves_the_document_as_it_was() -> None:
    doc = preset_doc("gemma-3-27b", swa={"window_tokens": 512})
    before = copy.deepcopy(doc)
    build_scenario(doc)
    assert doc == before
    defaults = {"swa": {"window_tokens": 1, "bytes_per_token": 2}}
    assert layered(defaults, {"swa": {"window_tokens": 3}}) == {
        "swa": {"window_tokens": 3, "bytes_per_token": 2}
    }
    assert defaults == {"swa": {"window_tokens": 1, "bytes_per_token": 2}}


@pytest.mark.parametrize("value", ["gpt-oss-12b", "GPT-OSS-120B", 7, ["gemma-3-27b"]])
def test_an_unknown_preset_names_the_key_and_the_known_presets(value: Any) -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(preset_doc("gpt-oss-120b") | {"model": {"preset": value}}, "f.yaml")
    assert err.value.key == "model.preset"
    assert all(name in err.value.message for name in MODEL_PRESETS)


def test_an_unknown_preset_is_bad_input_on_the_command_line() -> None:
    result = invoke("validate", str(SHIPPED), "--set", "model.preset=gpt-oss-12b")
    assert result.exit_code == 2
    assert "model.preset: unknown preset 'gpt-oss-12b'" in result.stderr


def test_a_missing_device_key_says_the_preset_brought_the_pool() -> None:
    doc = preset_doc("qwen3-next-80b-a3b")
    del doc["device"]["mamba_slots"]
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "device.mamba_slots"
    assert err.value.message == "required because preset qwen3-next-80b-a3b brings a mamba pool"
    doc = preset_doc("qwen3-next-80b-a3b")
    doc["storage"]["pools"]["swa"] = {}
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "storage.pools.swa"
    assert "preset qwen3-next-80b-a3b brings kv, mamba" in err.value.message


def test_a_sweep_point_takes_its_own_presets_sizes() -> None:
    """A point starts from what the scenario wrote, so another preset brings its own sizes
    (the resolved scenario's would have kept gpt-oss-120b's)."""
    doc = preset_doc("gpt-oss-120b")
    doc["sweep"] = {"grid": {"model.preset": ["gpt-oss-20b", "gpt-oss-120b"]}}
    tasks = plan(build_scenario(doc), "<test>")
    sizes = {dict(t.values)["model.preset"]: t.doc["model"]["kv"]["bytes_per_token"] for t in tasks}
    assert sizes == {"gpt-oss-20b": 24576, "gpt-oss-120b": 36864}


# ---------------------------------------------------------------- resolved config


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_resolved_config_round_trips_and_keeps_the_preset(name: str) -> None:
    scenario = build_scenario(preset_doc(name, page_size=32))
    doc = scenario_document(scenario)
    assert doc["model"]["preset"] == name
    assert doc["model"]["kv"] == resolved("kv", EXPECTED[name]["kv"])
    assert build_scenario(doc) == scenario
    assert pickle.loads(pickle.dumps(scenario)) == scenario


def test_a_scenario_without_a_preset_resolves_as_before() -> None:
    doc = scenario_document(build_scenario(make_doc()))
    assert "preset" not in doc["model"]
    assert list(doc["model"]) == ["page_size", "kv", "swa", "mamba", "indexer"]


def test_the_schema_lists_the_presets_and_lets_a_preset_stand_for_kv() -> None:
    model = scenario_model().model_json_schema()["$defs"]["ModelSpec"]
    names = next(o["enum"] for o in model["properties"]["preset"]["anyOf"] if "enum" in o)
    assert names == list(MODEL_PRESETS)
    assert "kv" not in model.get("required", [])
    assert {"required": ["kv"]} in model["anyOf"]


def test_a_preset_registered_at_test_time_is_selectable() -> None:
    tiny = SlidingWindowHybrid(
        source="made up",
        weight_bytes=1e9,
        weight_source="made up",
        layer_types=interleaved(4, every=4),
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=64,
    )
    MODEL_PRESETS.register("tiny-swa", tiny)
    try:
        doc = preset_doc("gpt-oss-120b")
        doc["model"] = {"preset": "tiny-swa"}
        model = build_scenario(doc).model
        assert model.kv.bytes_per_token == 1 * 2 * 1 * 8 * BF16
        assert model.swa.bytes_per_token == 3 * 2 * 1 * 8 * BF16  # type: ignore[attr-defined]
    finally:
        MODEL_PRESETS.unregister("tiny-swa")
    with pytest.raises(ScenarioError):
        build_scenario(doc)


# ---------------------------------------------------------------- a run


def test_a_short_run_stores_mamba_states_of_the_preset_s_size() -> None:
    doc = preset_doc("qwen3-next-80b-a3b")
    doc["duration_s"] = 60
    doc["workload"]["requests"] = 120
    doc["device"]["kv_pages"] = 300
    summary = run(build_scenario(doc)).summary
    state = EXPECTED["qwen3-next-80b-a3b"]["mamba"]["state_bytes"]
    assert summary["requests_finished"] > 0
    assert summary["prefetch_success"] > 0
    assert summary["storage_mamba_stored_bytes"] > 0
    assert summary["storage_mamba_stored_bytes"] % state == 0
    page = 64 * EXPECTED["qwen3-next-80b-a3b"]["kv"]["bytes_per_token"]
    assert summary["storage_kv_stored_bytes"] % page == 0
