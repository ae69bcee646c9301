"""The DSA indexer as a sidecar pool through whole runs: it is written with every KV page,
folded into the hit query, read with each KV batch, and its shortfalls clamp hits rather than
discard them (docs/sidecars.md)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.engine.runner import run
from sim.model.backup import BackupIntent, WritePath
from sim.model.existence import ExistenceCache
from sim.scenario.loading import ScenarioError, apply_override, build_scenario
from tests.conftest import make_doc
from tests.model_helpers import make_storage, make_tree


def dsa_doc(**overrides: Any) -> dict[str, Any]:
    """KV plus an indexer, 0.5.23 in buffer_only mode behind hf3fs, indexer reads failing."""
    doc = make_doc(
        **{
            "server.sglang": "0.5.23",
            "storage.backend": "hf3fs",
            "model": {
                "page_size": 64,
                "kv": {"bytes_per_token": 70272, "replicated": True},
                "indexer": {"bytes_per_token": 8052},
            },
            "device": {"kv_pages": 150},
            "workload.requests": 600,
            "storage.pools": {"kv": {}, "indexer": {"get_fail_prob": 0.02}},
            "heal": "per_pool",
        }
    )
    doc["storage"].pop("hit_query")
    for key, value in overrides.items():
        apply_override(doc, key, value)
    return doc


@pytest.fixture(scope="module")
def clamped() -> dict[str, Any]:
    return run(build_scenario(dsa_doc())).summary


def test_a_sidecar_shortfall_clamps_and_never_discards(clamped: dict[str, Any]) -> None:
    assert clamped["prefetch_issued"] > 50
    assert clamped["prefetch_discarded"] == 0 and clamped["loops"] == 0
    assert clamped["prefetch_indexer_clamps"] > 0
    assert clamped["prefetch_indexer_clamped_tokens"] >= 64 * clamped["prefetch_indexer_clamps"]
    assert clamped["l3_loaded_tokens"] > 0


def test_the_sidecar_is_written_with_every_kv_page(clamped: dict[str, Any]) -> None:
    assert clamped["written_indexer_objects"] == clamped["written_kv_pages"] > 0
    assert clamped["storage_indexer_stored_bytes"] * 70272 == (
        clamped["storage_kv_stored_bytes"] * 8052
    )


def test_without_sidecar_failures_nothing_is_clamped(clamped: dict[str, Any]) -> None:
    clean = run(build_scenario(dsa_doc(**{"storage.pools.indexer": {}}))).summary
    assert clean["prefetch_indexer_clamps"] == 0
    assert clean["l3_loaded_tokens"] > clamped["l3_loaded_tokens"]


def test_0_5_18_reads_the_sidecar_only_after_kv_completed() -> None:
    """With KV reads failing, `after_kv` loads nothing of a short KV read (no sidecar was
    read to clamp it to), `with_kv_batch` loads the clamped prefix: more restored tokens."""
    faults = {"storage.pools": {"kv": {"get_fail_prob": 0.01}, "indexer": {}}}
    batch = run(build_scenario(dsa_doc(**faults))).summary
    after = run(build_scenario(dsa_doc(**faults, **{"prefetch.sidecar_read": "after_kv"})))
    assert after.summary["prefetch_discarded"] == 0
    assert after.summary["l3_loaded_tokens"] < batch["l3_loaded_tokens"]


def test_replicated_kv_stores_one_copy_whatever_the_ranks() -> None:
    one = run(build_scenario(dsa_doc(**{"storage.pools.indexer": {}}))).summary
    four = run(build_scenario(dsa_doc(**{"storage.pools.indexer": {}, "server.tp_size": 4})))
    sharded = dsa_doc(**{"storage.pools.indexer": {}, "server.tp_size": 4})
    sharded["model"]["kv"]["replicated"] = False
    apart = run(build_scenario(sharded)).summary
    for pool in ("kv", "indexer"):
        stored = f"storage_{pool}_stored_bytes"
        assert four.summary[stored] == one[stored]
        assert apart[stored] == 4 * one[stored]


def test_0_5_19_refuses_a_sidecar_in_buffer_only_mode() -> None:
    with pytest.raises(ScenarioError) as refused:
        build_scenario(dsa_doc(**{"server.sglang": "0.5.19", "storage.backend": "file"}))
    text = str(refused.value)
    assert "host.mode" in text and "0.5.19" in text and "sidecar" in text
    assert "allowed from 0.5.20" in text
    build_scenario(dsa_doc(**{"server.sglang": "0.5.20", "storage.backend": "file"}))


def test_a_sidecar_has_no_device_size_of_its_own() -> None:
    with pytest.raises(ScenarioError) as refused:
        build_scenario(dsa_doc(**{"device.indexer_pages": 100}))
    assert "device.indexer_pages" in str(refused.value)


@pytest.mark.parametrize(
    ("kv_believed", "indexer_believed", "expected"),
    [
        ({1, 2, 3, 4}, {1, 2}, (True, (1, 2, 3, 4))),  # an indexer page to write re-offers KV
        ({1, 2}, {1, 2, 3, 4}, (True, (1, 2, 3, 4))),  # a KV write carries the indexer
        ({1, 2, 3, 4}, {1, 2, 3, 4}, None),
    ],
)
def test_a_sidecar_rides_on_the_kv_write_of_its_node(
    kv_believed: set[int], indexer_believed: set[int], expected: tuple[bool, tuple[int, ...]] | None
) -> None:
    """SGLang 0.5.23 makes one KV intent of KV and its sidecars (buffer_mode/pipeline.py:
    _write_intents, _launch_transfers): whichever of them lacks a page, both are offered
    whole, and the backend skips what it holds."""
    tree = make_tree(kv=100)
    path = WritePath(
        ExistenceCache(1000),
        make_storage({"kv": [], "indexer": []}),
        tree.root,
        buffer_only=True,
        aux_beliefs={"indexer": ExistenceCache(1000)},
    )
    path.existence.add(sorted(kv_believed))
    path.aux_beliefs["indexer"].add(sorted(indexer_believed))
    node, _ = tree.insert([1, 2, 3, 4], 0.0)
    intent = path.offer(node, 0.0)
    if expected is None:
        assert intent == "skip_covered"
        return
    assert isinstance(intent, BackupIntent)
    assert (intent.write_kv, intent.aux_keys["indexer"]) == expected


def deepseek_doc(release: str, mode: str) -> dict[str, Any]:
    return {
        "name": "deepseek",
        "duration_s": 60,
        "server": {"sglang": release, "tp_size": 8},
        "hardware": {"gpu": "b200"},
        "model": {"preset": "deepseek-v3.2"},
        "storage": {"backend": "hf3fs"},
        "host": {"mode": mode},
        "workload": {"kind": "shared_prefix", "requests": 20, "prefix_tokens": 2048},
    }


def test_the_deepseek_preset_on_0_5_23_behind_hf3fs_resolves_its_indexer_pool() -> None:
    scenario = build_scenario(deepseek_doc("0.5.23", "buffer_only"))
    assert scenario.model.pools == ("kv", "indexer")
    assert scenario.model.indexer.bytes_per_token == 61 * 132  # type: ignore[attr-defined]
    assert scenario.sources["model.indexer.bytes_per_token"] == "preset deepseek-v3.2"
    assert scenario.model.kv.replicated and scenario.storage.pools["indexer"].capacity_gb is None
    assert run(scenario).summary["written_indexer_objects"] > 0


def test_the_deepseek_preset_on_0_5_19_in_buffer_only_mode_is_refused() -> None:
    with pytest.raises(ScenarioError) as refused:
        build_scenario(deepseek_doc("0.5.19", "buffer_only"))
    assert "SGLang 0.5.19 refuses buffer_only host memory with an indexer pool" in str(
        refused.value
    )
    build_scenario(deepseek_doc("0.5.19", "cache"))


def test_a_mixed_stack_still_discards_when_its_tail_keyed_pool_falls_short() -> None:
    """indexer + SWA: the indexer is read with KV and clamps, but an SWA shortfall fails the
    all-or-nothing check, as SGLang's check does for any stack with a tail-keyed pool."""
    doc = dsa_doc(
        **{
            "model.swa": {"window_tokens": 128, "bytes_per_token": 18432},
            "device.swa_pages": 150,
            "storage.pools": {"kv": {}, "indexer": {}, "swa": {"get_fail_prob": 0.2}},
        }
    )
    mixed = run(build_scenario(doc)).summary
    assert mixed["prefetch_discarded"] > 0
    assert mixed["prefetch_indexer_clamps"] == 0
