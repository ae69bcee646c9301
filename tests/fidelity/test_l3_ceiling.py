"""Oracles for what storage can restore (L3 ceiling, and hybrid checkpoints against KV only).

With a small device and an unbounded, fault-free storage that every prefill writes through, a
KV-only model must restore every reusable prefix: per request, what the device held plus what
storage loaded equals the trace's ceiling (computed independently in `test_trace_ceiling`). A
hybrid model restores a prefix only where every aux pool has its tail: with an aux checkpoint
at every page it restores exactly what the KV-only model restores, and coarser checkpoints
never restore more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.engine.runner import run
from sim.scenario.loading import build_scenario
from tests.fidelity.test_trace_ceiling import BLOCK, PAGE, ceiling_pages, synthetic_trace


def small_device_doc(trace: Path, **model: Any) -> dict[str, Any]:
    pools = {"kv": {}, **{name: {} for name in model}}
    device: dict[str, Any] = {"kv_pages": 400}
    if "swa" in model:
        device["swa_pages"] = 10**6
    if "mamba" in model:
        device["mamba_slots"] = 10**6
    return {
        "name": "l3-ceiling",
        "seed": 1,
        "duration_s": 1e7,
        "model": {"page_size": PAGE, "kv": {"bytes_per_token": 1024}, **model},
        "device": device,
        "host": {"mode": "buffer_only", "pages": 10**6, "pcie_gbps": 1e6},
        "storage": {
            "read_gbps": 1e6,
            "write_gbps": 1e6,
            "exists_latency_ms": 0.0,
            "pools": pools,
        },
        "existence_cache": {"entries": 10**7},
        # The same threshold (none) for the KV-only and the hybrid model: what each can
        # restore is compared, not SGLang's raised floor of one SWA window (0.5.20 on).
        "prefetch": {"policy": "wait_complete", "threshold_tokens": 0, "threshold_floor": "page"},
        "compute": {"prefill_tokens_per_s": 1e12, "decode_ms_per_token": 0.0},
        "workload": {"kind": "mooncake", "path": str(trace), "block_tokens": BLOCK},
    }


def restored_pages(doc: dict[str, Any]) -> pd.Series:
    """Per request, in arrival order: pages the device held plus pages storage loaded."""
    req = run(build_scenario(doc)).tables["requests"]
    assert (req["outcome"] == "finished").all()
    return (req["device_hit_tokens"] + req["l3_loaded_tokens"]) // PAGE


@pytest.fixture(params=[1, 2], ids=lambda s: f"seed{s}")
def trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return synthetic_trace(tmp_path / "trace.jsonl", request.param)


def test_a_kv_only_model_restores_the_trace_ceiling_from_device_and_storage(trace: Path) -> None:
    restored = restored_pages(small_device_doc(trace))
    ceiling = np.array(ceiling_pages(trace))
    np.testing.assert_array_equal(restored.to_numpy(), ceiling)
    loaded = run(build_scenario(small_device_doc(trace))).summary["l3_loaded_tokens"]
    assert loaded > 0.2 * ceiling.sum() * PAGE, "the small device must send most reuse to storage"


SWA = {"window_tokens": 2 * PAGE, "bytes_per_token": 512}
MAMBA = {"state_bytes": 1 << 16}


@pytest.mark.parametrize("retention", ["window", "whole_node"])
def test_per_page_checkpoints_restore_what_the_kv_only_model_restores(
    trace: Path, retention: str
) -> None:
    kv_only = restored_pages(small_device_doc(trace))
    doc = small_device_doc(
        trace,
        swa={**SWA, "checkpoint_tokens": PAGE},
        mamba={**MAMBA, "checkpoint_tokens": PAGE},
    )
    doc["device"]["swa_retention"] = retention
    pd.testing.assert_series_equal(restored_pages(doc), kv_only)


def test_coarser_checkpoints_never_restore_more(trace: Path) -> None:
    """Reuse in these traces starts at 512-token blocks, so checkpoints every 4 or 8 pages still
    reach every block boundary; without checkpoints only node ends, chunk ends and branch
    points do, and less is restored."""
    fine = restored_pages(small_device_doc(trace, swa={**SWA, "checkpoint_tokens": PAGE}))
    totals = []
    for every in (4, 8, 16, None):
        tokens = None if every is None else every * PAGE
        coarse = restored_pages(small_device_doc(trace, swa={**SWA, "checkpoint_tokens": tokens}))
        assert (coarse <= fine).all(), every
        totals.append(int(coarse.sum()))
    assert totals == sorted(totals, reverse=True) and totals[-1] < fine.sum()
