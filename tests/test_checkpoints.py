"""Aux checkpoints: a backup writes an aux pool's tail at every multiple of
`model.<pool>.checkpoint_tokens` inside a node, so storage holds resume points that no node end
provides (SGLang: Mamba's mamba_track_interval; SWA windows every N tokens in open PR #27557)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.engine.runner import run
from sim.scenario.loading import ScenarioError, build_scenario, load_scenario
from tests.conftest import REPO, make_doc
from tests.model_helpers import pool

NODE = list(range(100, 110))
"""A node of 10 pages whose first page has absolute index 2."""


def test_without_checkpoints_a_backup_writes_the_tail_at_the_node_end_only() -> None:
    assert pool("swa", 2).backup_keys(NODE, 2) == (108, 109)
    assert pool("mamba").backup_keys(NODE, 2) == (109,)


def test_checkpoints_add_the_tail_at_every_multiple_inside_the_node() -> None:
    """Absolute multiples of 4 inside [2, 12) are 4 and 8: relative ends 2 and 6, then 10."""
    swa = replace(pool("swa", 2), checkpoint_pages=4)
    assert swa.backup_keys(NODE, 2) == (100, 101, 104, 105, 108, 109)
    assert replace(pool("mamba"), checkpoint_pages=4).backup_keys(NODE, 2) == (101, 105, 109)
    assert replace(pool("swa", 2), checkpoint_pages=1).backup_keys(NODE, 2) == tuple(NODE)


def test_a_checkpoint_must_be_a_multiple_of_the_page() -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(make_doc(**{"model.swa.checkpoint_tokens": 100}), "<test>")
    assert err.value.key == "model.swa.checkpoint_tokens"


def cut_hole(
    checkpoint_tokens: int | None, retention: str = "window", budget: str = "batch"
) -> dict[str, object]:
    every = "null" if checkpoint_tokens is None else checkpoint_tokens
    scenario = load_scenario(
        REPO / "scenarios" / "cut_hole.yaml",
        [
            "duration_s=300",
            "warmup_s=30",
            f"model.swa.checkpoint_tokens={every}",
            f"device.swa_retention={retention}",
            f"compute.chunk_budget={budget}",
        ],
    )
    return run(scenario).summary


def test_swa_checkpoints_at_the_context_end_restore_a_context_no_node_end_holds() -> None:
    """A shared 4 Ki-token context, then distinct questions, with whole-node retention (no
    branch-point windows) and each request chunked on its own: without checkpoints no SWA tail is
    ever written at the context's end and nothing is restored; checkpoints every 512 tokens (the
    end is a multiple) restore it; per-page checkpoints restore no more, at more SWA objects
    written. (A shared chunk budget cuts some prompts at the context's end by chance.)"""
    none, coarse, fine = (cut_hole(c, "whole_node", "request") for c in (None, 512, 64))
    assert none["l3_loaded_tokens"] == 0 and none["prefetch_discarded"] == 0
    assert coarse["l3_loaded_tokens"] > 0 and coarse["prefetch_discarded"] == 0
    assert fine["l3_loaded_tokens"] == coarse["l3_loaded_tokens"]
    assert (
        none["storage_swa_put_inserts"]
        < coarse["storage_swa_put_inserts"]
        < fine["storage_swa_put_inserts"]
    )


def test_under_window_retention_the_branch_point_restores_the_context_without_checkpoints() -> None:
    """SGLang today keeps the window where a request left the tree, so the context's end becomes
    a node end whose SWA tail is written once the hit-query heal has dropped the context's
    beliefs: storage restores the context without any checkpoint. Checkpoints that fall on the
    context end put the tail in storage with the first write and on the device with the first
    prefill, so they restore more, sooner, and nothing is backed off on the device."""
    window, coarse = cut_hole(None), cut_hole(512)
    assert window["l3_loaded_tokens"] > 0 and window["prefetch_discarded"] == 0
    assert window["device_backoff_tokens"] > 0 == coarse["device_backoff_tokens"]
    assert coarse["l3_loaded_tokens"] > window["l3_loaded_tokens"]
    assert coarse["written_swa_objects"] > window["written_swa_objects"]
