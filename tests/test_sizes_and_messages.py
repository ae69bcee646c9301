"""Sizes with units, every validation problem at once, and the resolved configuration a
capacity planner reads (docs/scenarios.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.outputs.results import resolved_yaml
from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import Scenario, ScenarioError
from tests.conftest import invoke, make_doc

KV_PAGE = 64 * 24576
SWA_PAGE = 64 * 18432


def scenario_with(**overrides: object) -> Scenario:
    return build_scenario(make_doc(**overrides), "<test>")


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("device.kv_pages", "8GiB", 8 * 2**30 // KV_PAGE),
        ("device.kv_pages", "100 MB", 100 * 10**6 // KV_PAGE),
        ("device.kv_pages", "65536 tokens", 1024),
        ("device.kv_pages", "12 pages", 12),
        ("device.swa_pages", "1GiB", 2**30 // SWA_PAGE),
        ("host.pages", "16GB", 16 * 10**9 // (KV_PAGE + SWA_PAGE)),
        ("storage.pools.swa.capacity_gb", "2TiB", 2 * 2**40 / 1e9),
        ("storage.pools.swa.capacity_gb", "500 GB", 500.0),
    ],
)
def test_a_size_with_a_unit_becomes_the_key_s_own_unit(key: str, text: str, expected: float):
    scenario = scenario_with(**{key: text})
    node: object = scenario
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    assert node == pytest.approx(expected)


def test_mamba_states_are_sized_in_bytes_not_tokens() -> None:
    doc = make_doc(**{"model.mamba": {"state_bytes": 2**20}, "device.mamba_slots": "64MiB"})
    assert build_scenario(doc, "<t>").device.capacity("mamba") == 64
    doc["device"]["mamba_slots"] = "100 tokens"
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc, "<t>")
    assert err.value.key == "device.mamba_slots"
    assert "not sized in tokens" in err.value.message


def test_a_bad_size_names_the_key_echoes_the_value_and_lists_the_units() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_with(**{"storage.pools.swa.capacity_gb": "50 parsecs"})
    assert err.value.key == "storage.pools.swa.capacity_gb"
    assert "'50 parsecs'" in err.value.message and "GiB" in err.value.message


def test_every_problem_is_reported_at_once_with_guesses_values_and_units() -> None:
    doc = make_doc(
        **{
            "heal": "keep_page",
            "storage.hit_query": "min_of_pool",
            "storage.pools.swa.capacty_gb": 3,
            "storage.pools.swa.put_fail_prob": 1.5,
            "workload.prefixs": 3,
        }
    )
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc, "f.yaml")
    problems = dict(err.value.problems)
    assert problems["heal"].endswith("did you mean 'keep_pages'? (got 'keep_page')")
    assert "did you mean 'min_of_pools'?" in problems["storage.hit_query"]
    assert problems["storage.pools.swa.capacty_gb"] == "unknown key; did you mean 'capacity_gb'?"
    assert (
        "(got 1.5; expected a probability in [0, 1])" in problems["storage.pools.swa.put_fail_prob"]
    )
    assert problems["workload.prefixs"] == "unknown key; did you mean 'prefixes'?"
    assert len(str(err.value).splitlines()) == len(problems) == 5
    assert all(line.startswith("f.yaml: ") for line in str(err.value).splitlines())


def test_the_cli_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    doc = make_doc(**{"heal": "nope", "device.kv_pages": "lots"})
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert "device.kv_pages: 'lots' is not a size" in result.output
    assert "heal: Input should be" in result.output


def test_every_pool_of_the_model_is_in_the_resolved_configuration_with_its_sizes() -> None:
    doc = make_doc()
    del doc["storage"]["pools"]["kv"]
    scenario = build_scenario(doc, "<t>")
    text = resolved_yaml(scenario)
    resolved = yaml.safe_load(text)
    assert set(resolved["storage"]["pools"]) == {"kv", "swa"}
    assert resolved["storage"]["pools"]["kv"]["capacity_gb"] is None
    pages = scenario.device.kv_pages
    assert f"kv_pages: {pages}  # {pages * 64:,} tokens" in text
    assert build_scenario(resolved, "<resolved>") == scenario


def test_validate_says_which_pools_got_the_defaults(tmp_path: Path) -> None:
    doc = make_doc()
    del doc["storage"]["pools"]["kv"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 0
    assert "note: storage.pools.kv is not given" in result.output
    assert "storage.pools.swa" not in result.output
    assert load_scenario(path).storage_pool("kv").capacity_gb is None


def test_run_prints_a_short_summary_with_units(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(duration_s=20, **{"workload.requests": 20})))
    result = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "tokens (" in result.output and "% of prompt)" in result.output
    assert "TTFT p50 / p99" in result.output and " s / " in result.output
    assert "is in " in result.output and "summary.json" in result.output


def test_sizes_with_units_use_the_pool_sizes_a_preset_brings() -> None:
    doc = make_doc(**{"device.kv_pages": "80GiB", "storage.pools.swa.capacity_gb": "500GB"})
    doc["model"] = {"preset": "gpt-oss-120b"}
    scenario = build_scenario(doc, "<t>")
    page_bytes = 64 * scenario.model.kv.bytes_per_token
    assert scenario.device.kv_pages == 80 * 2**30 // page_bytes
    assert scenario.storage_pool("swa").capacity_gb == 500.0
    assert set(scenario.storage.pools) == {"kv", "swa"}


# ---------------------------------------------------------------- a newcomer's first commands


@pytest.mark.parametrize("written", ["H200", "H200-SXM", "h200-sxm", "h200 SXM"])
def test_a_gpu_written_as_its_maker_names_it_is_the_profile(written: str) -> None:
    from tests.test_deployments import deployment_doc

    scenario = build_scenario(deployment_doc(**{"hardware.gpu": written}))
    assert scenario.hardware.gpu == "h200"
    assert scenario.hardware.memory_mib == 143771


def test_a_gpu_the_profiles_lack_gets_a_did_you_mean() -> None:
    from tests.test_deployments import deployment_doc

    with pytest.raises(ScenarioError) as err:
        build_scenario(deployment_doc(**{"hardware.gpu": "h20"}))
    assert err.value.key == "hardware.gpu" and "did you mean 'h200'?" in err.value.message


def test_the_release_list_names_the_aliases_with_their_release() -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_with(**{"server.sglang": "0.5.99"})
    assert "pr36386 (0.5.19), latest (0.5.23), custom" in err.value.message


def test_click_s_own_refusals_share_the_error_prefix(tmp_path: Path) -> None:
    result = invoke("run", "--bogus")
    assert result.exit_code == 2
    assert "error: No such option '--bogus'" in result.output
    assert "Error:" not in result.output


def test_compare_tells_a_bad_heal_beside_a_bad_scenario_key(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc()))
    result = invoke("compare", str(path), "--heal", "nope,exact", "--set", "device.kv_pages=abc")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: --set: device.kv_pages: 'abc' is not a size")
    assert lines[1].startswith("--heal nope: heal: Input should be")
    assert len(lines) == 2  # exact is fine; the bad --set is told once
