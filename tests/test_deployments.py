"""Deployments by name: SGLang releases, storage backends and GPUs as profiles of defaults, what
SGLang derives from them (chunk size, memory fraction, device and host pools, host link, its
layout switches), where every value came from, and what a release's server refuses to start."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.deployment.hardware import GPUS, H200_LINK, link_rates
from sim.deployment.profiles import SGLANG_RELEASES, STORAGE_BACKENDS, release_names
from sim.deployment.table import write_into
from sim.model.build import build_model
from sim.model.operation import PrefetchOp, plan_aux_transfers
from sim.scenario.loading import ScenarioError, build_scenario, load_scenario
from sim.studies.grid import plan
from tests.conftest import REPO, invoke, make_doc, ok

_SHARED: dict[str, Any] = {
    "host.mode": "cache",
    "prefetch.policy": "timeout",
    "prefetch.threshold_tokens": 256,
    "prefetch.timeout_base_s": 1.0,
    "prefetch.timeout_per_ki_token_s": 0.25,
    "device.swa_retention": "window",
    "host.io_backend": "kernel",
    "host.mem_layout": "page_first",
    "prefetch.shrink": "page",
    "prefetch.short_span_aux": "none",
    "prefetch.threshold_floor": "swa_window",
    "prefetch.sidecar_read": "with_kv_batch",
}
_KV_BELIEFS = {
    "existence_cache.beliefs": "kv",
    "heal": "keep_pages",
    "prefetch.heal_after_deadline": True,
}
_POOL_BELIEFS = {
    "existence_cache.entries": 524288,
    "existence_cache.beliefs": "per_pool",
    "heal": "per_pool",
}
_RETRIES_ON = {
    "prefetch.retry.max_attempts": 8,
    "prefetch.retry.interval_passes": 8,
    "prefetch.retry.head_exempt": True,
}
RELEASE_VALUES: dict[str, dict[str, Any]] = {
    "0.5.18": {
        **_SHARED,
        "heal": "none",
        "prefetch.threshold_floor": "page",
        "prefetch.sidecar_read": "after_kv",
        "host.auto_size": False,
        "prefetch.retry.max_attempts": 0,
        "prefetch.retry.interval_passes": 0,
    },
    "0.5.19": {
        **_SHARED,
        **_KV_BELIEFS,
        "existence_cache.entries": 131072,
        "prefetch.retry.max_attempts": 4,
        "prefetch.retry.interval_passes": 0,
        "host.anchor_lock_cap": 0.0,
        "prefetch.short_span_aux": "own_pages",
        "prefetch.threshold_floor": "page",
        "prefetch.retry.head_exempt": False,
        "prefetch.retry.short_spans": True,
        "prefetch.retry.deadline_cancels": False,
        "host.auto_size": False,
    },
    **{
        version: {
            **_SHARED,
            **_KV_BELIEFS,
            **_RETRIES_ON,
            "existence_cache.entries": 524288,
            "host.anchor_lock_cap": 0.5,
            "prefetch.retry.short_spans": version == "0.5.20",
            "prefetch.retry.deadline_cancels": False,
            **(
                {"host.auto_size": True, "host.memory_fraction": 0.8}
                if version == "0.5.21"
                else {"host.auto_size": False}
            ),
        }
        for version in ("0.5.20", "0.5.21")
    },
    **{
        version: {
            **_SHARED,
            **_POOL_BELIEFS,
            **_RETRIES_ON,
            "host.anchor_lock_cap": 0.5,
            "prefetch.heal_after_deadline": heals,
            "prefetch.retry.short_spans": False,
            "prefetch.retry.deadline_cancels": not heals,
            "host.auto_size": True,
            "host.memory_fraction": 0.8,
        }
        for version, heals in (("0.5.22", True), ("0.5.23", False))
    },
}
for _version, _values in RELEASE_VALUES.items():
    _values["prefetch.hit_query_error"] = "miss" if _version >= "0.5.22" else "stop"
RELEASE_VALUES["pr36386"] = RELEASE_VALUES["0.5.19"]
RELEASE_VALUES["latest"] = RELEASE_VALUES["0.5.23"]
BACKEND_VALUES: dict[str, dict[str, Any]] = {
    "file": {
        "storage.hit_query": "intersect",
        "storage.write_dedup": True,
        "storage.eviction": "lru",
        "storage.exists_ttl_s": 0.0,
        "storage.failed_read": "miss_batch",
        "storage.failed_put_torn": False,
    },
    "hf3fs": {
        "storage.hit_query": "min_of_pools",
        "storage.write_dedup": True,
        "storage.eviction": "lru",
        "storage.failed_read": "keep",
    },
    "nixl": {
        "storage.hit_query": "min_of_pools",
        "storage.write_dedup": False,
        "storage.eviction": "lru",
        "storage.failed_read": "keep",
    },
    "mooncake": {
        "storage.hit_query": "intersect",
        "storage.write_dedup": True,
        "storage.eviction": "lease",
        "storage.eviction_high_watermark_ratio": 0.9,
        "storage.eviction_ratio": 0.05,
        "storage.failed_read": "keep",
    },
}
_NOT_FOUND = {"storage.eviction": "lru", "storage.failed_read": "keep"}
"""What the newer backends' client code leaves to the store: the schema's defaults."""
BACKEND_VALUES.update(
    {
        "mori": {"storage.hit_query": "cascading_min", "storage.write_dedup": False},
        "npu_memcache": {"storage.hit_query": "min_of_pools_no_swa", "storage.write_dedup": True},
        "seaweedfs": {"storage.hit_query": "min_of_pools", "storage.write_dedup": False},
        "sim": {"storage.hit_query": "min_of_pools", "storage.write_dedup": False},
        "shm": {"storage.hit_query": "none", "storage.write_dedup": True},
        "tensorcast": {"storage.hit_query": "raises", "storage.write_dedup": False},
        "aibrix": {"storage.hit_query": "raises", "storage.write_dedup": False},
        "eic": {"storage.hit_query": "raises", "storage.write_dedup": False},
        "simm": {"storage.hit_query": "raises", "storage.write_dedup": True},
    }
)
for _values in BACKEND_VALUES.values():
    for _key, _value in _NOT_FOUND.items():
        _values.setdefault(_key, _value)
GPU_VALUES: dict[str, dict[str, Any]] = {
    # nvidia-smi memory.total; the H200's measured link (kernel 50.8, bulk 55.3, 3.69 us a
    # copy); Gen4 cards at half the bandwidth
    "h100": {"memory_mib": 81559, "kernel_gbps": 50.8, "bulk_gbps": 55.3},
    "h200": {"memory_mib": 143771, "kernel_gbps": 50.8, "bulk_gbps": 55.3},
    "b200": {"memory_mib": 183359, "kernel_gbps": 50.8, "bulk_gbps": 55.3},
    "a100-80g": {"memory_mib": 81920, "kernel_gbps": 25.4, "bulk_gbps": 27.65},
    "l40s": {"memory_mib": 46068, "kernel_gbps": 25.4, "bulk_gbps": 27.65},
}


def value_at(doc: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        doc = doc[part]
    return doc


def deployment_doc(**keys: Any) -> dict[str, Any]:
    """Only the names of a deployment, a model preset and a small workload."""
    doc: dict[str, Any] = {
        "name": "deployment",
        "duration_s": 60,
        "model": {"preset": "gpt-oss-120b"},
        "hardware": {"gpu": "h200"},
        "workload": {"kind": "shared_prefix", "requests": 40, "prefixes": 4},
    }
    for key, value in keys.items():
        node = doc
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return doc


PROFILES = [
    *(
        ("server.sglang", "sglang", name, SGLANG_RELEASES, RELEASE_VALUES)
        for name in sorted(RELEASE_VALUES)
    ),
    *(
        ("storage.backend", "backend", name, STORAGE_BACKENDS, BACKEND_VALUES)
        for name in sorted(BACKEND_VALUES)
    ),
]


@pytest.mark.parametrize(
    ("key", "label", "name", "registry", "pinned"), PROFILES, ids=[p[2] for p in PROFILES]
)
def test_each_profile_sets_its_pinned_values(
    key: str, label: str, name: str, registry: Any, pinned: dict[str, dict[str, Any]]
) -> None:
    scenario = build_scenario(deployment_doc(**{key: name}))
    resolved = scenario.model_dump(mode="json")
    for setting, value in pinned[name].items():
        assert value_at(resolved, setting) == value, setting
        assert scenario.sources[setting] == registry[name].label, setting
    assert {s.key for s in registry[name].settings} == set(pinned[name])


@pytest.mark.parametrize("gpu", sorted(GPU_VALUES))
def test_each_gpu_sets_its_memory_and_link(gpu: str) -> None:
    hardware = GPUS[gpu].values()
    assert {k: hardware[k] for k in GPU_VALUES[gpu]} == GPU_VALUES[gpu]
    assert hardware["copy_overhead_us"] == pytest.approx(3.69, abs=0.01)


def test_the_h200_link_fit_is_the_measured_table() -> None:
    """Per-copy overhead: median over the direct chunks of (chunk time - bytes at 55.3 GB/s)."""
    extra_us = sorted(
        b / (h * 1e9) * 1e6 - b / 55.3e9 * 1e6
        for b, h in [(4096, 0.94), (16384, 2.32), (65536, 15.3), (262144, 33.5), (2359296, 50.9)]
    )
    assert link_rates(H200_LINK)["copy_overhead_us"] == pytest.approx(extra_us[2], abs=0.01)


def test_the_scenario_wins_over_every_profile_and_says_so() -> None:
    doc = deployment_doc(
        **{
            "server.sglang": "pr36386",
            "storage.backend": "mooncake",
            "existence_cache.entries": 524288,
            "storage.hit_query": "min_of_pools",
            "host.mode": "buffer_only",
        }
    )
    scenario = build_scenario(doc)
    assert scenario.existence_cache.entries == 524288
    assert scenario.storage.hit_query == "min_of_pools"
    assert scenario.sources["existence_cache.entries"] == "user; sglang 0.5.19 has 131072"
    assert scenario.sources["storage.hit_query"] == "user; backend mooncake has intersect"
    assert scenario.sources["host.mode"] == "user; sglang 0.5.19 has cache"
    assert scenario.sources["existence_cache.beliefs"] == "sglang 0.5.19"
    assert scenario.sources["storage.read_gbps"] == "default"


def test_a_scenario_without_profiles_is_unchanged_by_them() -> None:
    """Only SGLang's own sizing rule fills what the document left out (the host SWA pool)."""
    plain = build_scenario(make_doc())
    assert plain.sources.from_profiles() == {
        "host.swa_pages": "derived: host SWA pool = 1.2 x the device SWA pool (--hicache-ratio)"
    }
    assert plain.server.sglang is None and plain.hardware.memory_mib is None


def _flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize(
    ("backend", "differs"), [("hf3fs", {}), ("file", {"storage.failed_read": ("keep", "halt")})]
)
def test_the_schema_defaults_are_a_real_deployment(backend: str, differs: dict[str, Any]) -> None:
    """A scenario naming no release runs SGLang 0.5.21 behind hf3fs in buffer_only mode, value
    for value (and the file backend's, but for what a failed read does)."""
    plain = _flat(build_scenario(make_doc()).model_dump())
    named = _flat(
        build_scenario(
            make_doc(
                **{
                    "server.sglang": "0.5.21",
                    "storage.backend": backend,
                    "host.mode": "buffer_only",
                }
            )
        ).model_dump()
    )
    found = {
        key: (plain.get(key), named.get(key))
        for key in plain.keys() | named.keys()
        if plain.get(key) != named.get(key) and key not in ("server.sglang", "storage.backend")
    }
    assert found == differs


def test_releases_before_0_5_22_refuse_mamba_in_buffer_only_mode(tmp_path: Path) -> None:
    doc = deployment_doc(
        **{
            "server.sglang": "0.5.21",
            "host.mode": "buffer_only",
            "model.mamba": {"state_bytes": 75497472, "layers": 18},
        }
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "host.mode: SGLang 0.5.21 refuses buffer_only host memory with a mamba pool" in (
        result.stderr
    )
    assert "allowed from 0.5.22" in result.stderr
    assert not (tmp_path / "out").exists()
    for release in ("0.5.19", "0.5.20"):
        doc["server"]["sglang"] = release
        with pytest.raises(ScenarioError, match=r"allowed from 0\.5\.22"):
            build_scenario(doc)
    for release in ("0.5.22", "0.5.23", "latest"):
        doc["server"]["sglang"] = release
        assert build_scenario(doc).model.pools == ("kv", "swa", "mamba")
    doc["server"]["sglang"] = "0.5.19"
    doc["host"]["mode"] = "cache"
    assert build_scenario(doc).host.mode == "cache"


def test_0_5_18_has_no_buffer_only_mode() -> None:
    doc = deployment_doc(**{"server.sglang": "0.5.18", "host.mode": "buffer_only"})
    with pytest.raises(ScenarioError, match=r"no buffer_only host memory mode.*came in 0\.5\.19"):
        build_scenario(doc)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("main", "did you mean '0.5.23' (latest)?"), ("v0.5.20", "did you mean '0.5.20'?")],
)
def test_a_retired_name_is_refused_with_the_release_to_name(name: str, hint: str) -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(deployment_doc(**{"server.sglang": name}))
    assert err.value.key == "server.sglang"
    assert "is no longer accepted" in err.value.message and hint in err.value.message
    listed = (
        "0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23, pr36386 (0.5.19), latest (0.5.23), custom"
    )
    assert listed in err.value.message


@pytest.mark.parametrize(
    ("release", "fold", "failed_read"),
    [
        ("0.5.19", "min_of_pools", "halt"),
        ("0.5.21", "min_of_pools", "halt"),
        ("0.5.22", "min_of_pools", "miss_batch"),
        ("0.5.23", "intersect", "miss_batch"),
    ],
)
def test_a_backend_behaves_as_the_release_that_runs_it(
    release: str, fold: str, failed_read: str
) -> None:
    """The file backend's read errors are caught from 0.5.22 on and its hit query intersects
    the pools' restorable endpoints from 0.5.23 on."""
    doc = deployment_doc(**{"server.sglang": release, "storage.backend": "file"})
    scenario = build_scenario(doc)
    assert scenario.storage.hit_query == fold
    assert scenario.storage.failed_read == failed_read
    assert scenario.sources["storage.hit_query"] == "backend file"


def test_a_mamba_host_pool_needs_a_page_first_layout() -> None:
    doc = deployment_doc(**{"model.mamba": {"state_bytes": 1000}, "host.mem_layout": "layer_first"})
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "host.mem_layout"


# ---------------------------------------------------------------------- SGLang's memory rules


@pytest.mark.parametrize(
    ("gpu", "fraction", "chunk"),
    [
        # reserved MiB = 512 + 1.5 x chunk + 128 (tp 1) + 2 x decode graphs + 8 x prefill graphs,
        # at least 10 GiB above 60 GiB: H200 512 + 12288 + 128 + 512 + 58 x 8 = 13,904
        ("h200", round((143771 - 13904) / 143771, 3), 8192),
        ("h100", round((81559 - 13904) / 81559, 3), 8192),
        # B200: 512 + 24576 + 128 + 1024 + 74 x 8 = 26,832
        ("b200", round((183359 - 26832) / 183359, 3), 16384),
        # L40S (below 60 GiB: 4096 tokens, 32 graphs, no floor): 512 + 6144 + 128 + 64 + 400
        ("l40s", round((46068 - 7248) / 46068, 3), 4096),
    ],
)
def test_chunk_and_memory_fraction_follow_sglangs_rule(
    gpu: str, fraction: float, chunk: int
) -> None:
    scenario = build_scenario(
        deployment_doc(**{"hardware.gpu": gpu, "model.preset": "gpt-oss-20b"})
    )
    assert scenario.compute.chunk_tokens == chunk
    assert scenario.server.mem_fraction_static == fraction
    assert scenario.sources["compute.chunk_tokens"].startswith("derived:")


def test_the_32gb_tier_moved_between_releases() -> None:
    """0.5.20 raised GPUs of 20-35 GiB from 2048 to 4096 tokens a chunk."""

    def chunk(era: str) -> int | None:
        doc = deployment_doc(
            **{"server.sglang": era, "hardware.gpu": "custom", "hardware.memory_mib": 32607}
        )
        doc["device"] = {"kv_pages": 100, "swa_pages": 100}
        return build_scenario(doc).compute.chunk_tokens

    assert chunk("0.5.18") == chunk("pr36386") == 2048
    assert chunk("0.5.20") == chunk("0.5.23") == 4096


def test_device_pools_are_memory_minus_weights_split_as_sglang_splits_them() -> None:
    scenario = build_scenario(deployment_doc())
    fraction = round((143771 - 13904) / 143771, 3)
    pools_bytes = (143771 - 1024) * 2**20 * fraction - 60.8 * 2**30
    full_cell = 18 * 2 * 8 * 64 * 2 * (1 + 0.8)  # KV plus 0.8 x SWA per full token
    kv_tokens = int(pools_bytes // full_cell) // 64 * 64
    assert scenario.device.kv_pages == kv_tokens // 64 == 16454
    assert scenario.device.swa_pages == int(kv_tokens * 0.8) // 64
    # the host pool: 2 x the device's tokens in cache mode (no release: buffer_only, 1.2 x)
    assert scenario.host.pages == int(16454 * 64 * 1.2) // 64 + 1
    cache = build_scenario(deployment_doc(**{"host.mode": "cache"}))
    assert cache.host.pages == 16454 * 2 + 1
    ratio = build_scenario(deployment_doc(**{"host.hicache_ratio": 3}))
    assert ratio.host.pages == 16454 * 3 + 1


def test_tensor_parallel_ranks_hold_a_share_of_weights_and_heads() -> None:
    tp8 = build_scenario(deployment_doc(**{"server.tp_size": 8}))
    fraction = tp8.server.mem_fraction_static
    # tp 8: 1024 MiB for communication, 512 decode graphs from tp 4 on (2 MiB each)
    assert fraction == round((143771 - (512 + 12288 + 1024 + 1024 + 464)) / 143771, 3) == 0.893
    rest = (143771 - 1024) * 2**20 * fraction - 60.8 * 2**30 / 8
    cell = 18 * 2 * 1 * 64 * 2 * 1.8  # 8 KV heads over 8 ranks: one each
    assert tp8.device.kv_pages == int(rest // cell) // 64
    tp16 = build_scenario(deployment_doc(**{"server.tp_size": 16}))
    cell16 = cell  # 8 heads over 16 ranks: still one head a rank (replicated)
    rest16 = (143771 - 1024) * 2**20 * tp16.server.mem_fraction_static - 60.8 * 2**30 / 16
    assert tp16.device.kv_pages == int(rest16 // cell16) // 64


def test_a_mamba_pool_takes_its_share_of_memory() -> None:
    """mamba_full_memory_ratio 0.9: states get 0.9 / 1.9 of the pools, less one state."""
    scenario = build_scenario(
        deployment_doc(**{"model.preset": "nemotron-h-8b", "hardware.gpu": "h100"})
    )
    fraction = scenario.server.mem_fraction_static
    rest = (81559 - 1024) * 2**20 * fraction - 8e9 * 2
    state = 102137856
    slots = int((rest * 0.9 / 1.9 - state) // state)
    assert scenario.device.mamba_slots == slots
    assert scenario.device.kv_pages == int((rest - (slots + 1) * state) // 16384) // 64


def test_weights_that_leave_no_room_are_bad_input(tmp_path: Path) -> None:
    doc = deployment_doc(**{"model.preset": "qwen3-next-80b-a3b", "hardware.gpu": "h100"})
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "device.kv_pages"
    assert "leave no memory for the KV cache" in err.value.message
    doc["server"] = {"tp_size": 4}
    assert build_scenario(doc).device.kv_pages > 0


def test_device_sizes_need_a_preset_or_the_scenarios_own() -> None:
    doc = make_doc()
    doc["hardware"] = {"gpu": "h200"}
    del doc["device"]["kv_pages"]
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "device.kv_pages"
    assert "model.preset" in err.value.message


# ---------------------------------------------------------------------- host link and layouts


def test_the_io_backend_picks_the_host_link() -> None:
    kernel = build_scenario(deployment_doc())
    assert kernel.host.pcie_gbps == 50.8 and kernel.host.copy_overhead_us == 0.0
    direct = build_scenario(deployment_doc(**{"host.io_backend": "direct"}))
    assert direct.host.pcie_gbps == 55.3
    assert direct.host.copy_overhead_us == pytest.approx(3.69, abs=0.01)
    assert direct.host.mem_layout == "page_first_direct"
    assert direct.sources["host.mem_layout"].startswith("adjusted: direct io cannot use page_first")


@pytest.mark.parametrize(
    ("keys", "io", "layout"),
    [
        ({"host.mem_layout": "page_first_direct"}, "direct", "page_first_direct"),
        ({"host.mem_layout": "layer_first"}, "kernel", "layer_first"),
        ({"host.mem_layout": "layer_first", "storage.backend": "mooncake"}, "kernel", "page_first"),
        (
            {
                "host.mem_layout": "layer_first",
                "host.io_backend": "direct",
                "storage.backend": "mooncake",
            },
            "direct",
            "page_first_direct",
        ),
    ],
)
def test_sglang_switches_layouts_it_cannot_use(keys: dict[str, Any], io: str, layout: str) -> None:
    scenario = build_scenario(deployment_doc(**keys))
    assert (scenario.host.io_backend, scenario.host.mem_layout) == (io, layout)


# ---------------------------------------------------------------------- provenance and files


def test_a_deployment_by_name_runs_and_says_where_every_value_came_from(tmp_path: Path) -> None:
    doc = deployment_doc(**{"server.sglang": "0.5.20", "storage.backend": "mooncake"})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    ok(invoke("run", str(path), "--out", str(tmp_path / "run")))
    text = (tmp_path / "run" / "config.resolved.yaml").read_text()
    for line in text.splitlines():
        if re.match(r"^\s*[a-z_]+: \S", line):
            assert "  # " in line, f"no source on {line!r}"
    assert re.search(r"kv_pages: 16454  # .*; derived: 0\.903 of 143,771 MiB", text)
    assert re.search(r"hit_query: intersect  # backend mooncake", text)
    assert re.search(r"entries: 524288  # sglang 0\.5\.20", text)
    assert re.search(r"bytes_per_token: 36864  # preset gpt-oss-120b", text)
    assert re.search(r"read_gbps: 10\.0  # default", text)
    assert re.search(r"name: deployment  # user", text)
    again = build_scenario(yaml.safe_load(text))
    assert again == load_scenario(path)
    meta = (tmp_path / "run" / "meta.json").read_text()
    assert '"device.kv_pages": "derived:' in meta


def test_validate_prints_what_profiles_and_rules_set(tmp_path: Path) -> None:
    doc = deployment_doc(**{"server.sglang": "pr36386", "existence_cache.entries": 1000})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = ok(invoke("validate", str(path))).output
    assert "device.kv_pages = 16454  (derived:" in out
    assert "prefetch.retry.max_attempts = 4  (sglang 0.5.19)" in out
    assert (
        "note: existence_cache.entries = 1000 is the scenario's own; sglang 0.5.19 has 131072"
        in out
    )


def test_pickling_keeps_values_and_sources_and_equality_ignores_sources() -> None:
    scenario = build_scenario(deployment_doc(**{"server.sglang": "0.5.23"}))
    again = pickle.loads(pickle.dumps(scenario))
    assert again == scenario
    assert again.sources.of == scenario.sources.of
    assert build_scenario(scenario.model_dump(mode="json")) == scenario


def test_a_calibration_file_is_found_beside_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(
        "gpu: test\nmemory_mib: 81559\nkernel_gbps: 40\nbulk_gbps: 44\ncopy_overhead_us: 5\n"
    )
    doc = deployment_doc(**{"hardware": {"calibration": "gpu.yaml"}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    scenario = load_scenario(path)
    assert scenario.hardware.memory_mib == 81559 and scenario.host.pcie_gbps == 40
    assert scenario.sources["hardware.kernel_gbps"] == "calibration gpu.yaml"
    (tmp_path / "gpu.yaml").write_text("gpu: test\nmemory_mib: -1\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.key == "hardware.calibration"
    assert "memory_mib" in err.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [("kernel_gbps", 1e5), ("bulk_gbps", 0.0001), ("memory_mib", 2**25), ("copy_overhead_us", 2e6)],
)
def test_an_out_of_range_calibration_value_names_the_file_and_its_key(
    tmp_path: Path, key: str, value: float
) -> None:
    """Within the calibration file's own types but outside what the scenario takes: the error
    names the calibration file and its key, not the scenario's `hardware.*` key."""
    values = {"gpu": "test", "memory_mib": 81559, "kernel_gbps": 40, "bulk_gbps": 44}
    values |= {"copy_overhead_us": 5, key: value}
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(values))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(deployment_doc(**{"hardware": {"calibration": "gpu.yaml"}})))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.key == "hardware.calibration"
    assert "gpu.yaml" in err.value.message and key in err.value.message


# ---------------------------------------------------------------------- sweeps


def test_a_sweep_point_starts_from_what_the_scenario_wrote() -> None:
    """Varying a profile or the preset re-derives everything that follows from it."""
    doc = deployment_doc()
    doc["sweep"] = {
        "variants": {
            "pr": {"server.sglang": "pr36386", "host.mode": "buffer_only"},
            "main-20b": {"server.sglang": "0.5.23", "model.preset": "gpt-oss-20b"},
        },
        "grid": {"hardware.gpu": ["h100", "h200"]},
    }
    tasks = plan(build_scenario(doc), "<test>")
    assert [dict(t.values)["variant"] for t in tasks] == ["pr", "pr", "main-20b", "main-20b"]
    pages = {(dict(t.values)["variant"], dict(t.values)["hardware.gpu"]): t.doc for t in tasks}
    assert pages["pr", "h100"]["existence_cache"]["entries"] == 131072
    assert pages["main-20b", "h100"]["existence_cache"]["beliefs"] == "per_pool"
    assert pages["main-20b", "h100"]["model"]["kv"]["bytes_per_token"] == 24576
    kv = {key: d["device"]["kv_pages"] for key, d in pages.items()}
    assert kv["pr", "h100"] < kv["pr", "h200"] and kv["main-20b", "h100"] > kv["pr", "h100"]


def test_a_variant_cannot_set_a_key_the_grid_sweeps() -> None:
    doc = deployment_doc()
    doc["sweep"] = {"variants": {"a": {"heal": "none"}}, "grid": {"heal": ["none", "exact"]}}
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == "sweep.variants.a.heal"


def test_the_deployment_sweep_plans_every_row() -> None:
    scenario = load_scenario(REPO / "scenarios" / "sweeps" / "deployments.yaml")
    tasks = plan(scenario, "deployments.yaml")
    rows = {dict(t.values)["variant"]: t.doc for t in tasks}
    assert len(rows) == 10 and len(tasks) == 10 * 6 * 3
    assert rows["0.5.19-file-buffer"]["existence_cache"]["entries"] == 131072
    assert rows["0.5.19-file-buffer-kvblind"]["storage"]["hit_query"] == "kv_only"
    assert rows["0.5.22-file-buffer-mamba"]["storage"]["hit_query"] == "min_of_pools"
    assert rows["0.5.23-file-buffer-mamba"]["storage"]["hit_query"] == "intersect"
    assert rows["0.5.23-file-cache"]["host"]["mode"] == "cache"
    assert all(label.startswith(("0.5.22", "0.5.23")) for label in rows if "mamba" in label)


# ---------------------------------------------------------------------- the documentation


def test_docs_show_the_profiles_as_the_registries_hold_them() -> None:
    """docs/deployments.md's release and backend tables are `sim.deployment.table`'s output
    (`python -m sim.deployment.table docs/deployments.md` writes them)."""
    text = (REPO / "docs" / "deployments.md").read_text()
    assert write_into(text) == text
    for name in ("releases", "backends"):
        assert f"<!-- {name} table: start -->" in text
    for release in release_names():
        for setting in SGLANG_RELEASES[release].settings:
            assert f"| `{setting.key}` |" in text


@pytest.mark.parametrize("section", ["device", "host", "compute"])
@pytest.mark.parametrize("written", [5, None, "big"])
def test_a_section_written_as_no_mapping_is_refused_not_replaced_by_derived_sizes(
    section: str, written: Any
) -> None:
    """A derivation fills in what a section leaves out; it never overwrites the section itself
    when the scenario wrote something else there."""
    doc = deployment_doc()
    doc[section] = written
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc)
    assert err.value.key == section


@pytest.mark.parametrize(("release", "drops"), [("0.5.22", True), ("0.5.23", False)])
def test_a_deadline_stopped_discard_heals_only_before_0_5_23(release: str, drops: bool) -> None:
    """0.5.23 behind the file backend: the intersecting hit query, and a prefetch its deadline
    stopped with half its KV read drops no belief when it is discarded (a deadline is no
    evidence); 0.5.22 drops the KV beliefs past what was read."""
    doc = make_doc(**{"server.sglang": release, "storage.backend": "file"})
    del doc["heal"], doc["storage"]["hit_query"]
    scenario = build_scenario(doc)
    assert scenario.storage.hit_query == ("intersect" if release == "0.5.23" else "min_of_pools")
    assert scenario.heal == "per_pool" and scenario.prefetch.policy == "timeout"
    prefetcher = build_model(scenario).prefetcher
    span = (11, 12, 13, 14)
    prefetcher.write_path.believe(span)
    op = PrefetchOp(rid=1, start_page=0, span=span, issued_s=0.0, hit_pages=4, completed_pages=2)
    op.aux = plan_aux_transfers(prefetcher.storage.aux, op)
    assert prefetcher.host.alloc_prefetch(4)
    op.terminated = True
    resolution = prefetcher.resolve(op, 5.0)
    assert resolution.outcome == "discarded"
    believed = [key for key in span if key in prefetcher.write_path.existence]
    assert believed == ([11, 12] if drops else [11, 12, 13, 14])
