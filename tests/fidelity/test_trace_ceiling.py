"""Oracle: with capacities that never evict, a trace replay reaches the trace's ceiling hit rate.

The ceiling is computed here, independently of the simulator: for each request, the longest run
of leading pages that some request with an earlier timestamp also had in its prompt (page j of a
block with hash id h is the pair (h, j); hash ids are prefix-chained, so a pair names a prefix).
Requests that arrive at the same instant cannot reuse each other's prefill, so they do not count.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.engine.runner import run
from sim.scenario.loading import load_scenario
from tests.conftest import CONVERSATION_TRACE

PAGE = 64
BLOCK = 512


def ceiling_pages(trace: Path) -> list[int]:
    seen: set[tuple[int, int]] = set()
    pending: list[list[tuple[int, int]]] = []
    last_ts = None
    out = []
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt", encoding="utf-8") as handle:
        for line in handle:
            rec = json.loads(line)
            if rec["timestamp"] != last_ts:
                for pages in pending:
                    seen.update(pages)
                pending, last_ts = [], rec["timestamp"]
            pages = [(h, j) for h in rec["hash_ids"] for j in range(BLOCK // PAGE)]
            pages = pages[: rec["input_length"] // PAGE]
            run_length = 0
            while run_length < len(pages) and pages[run_length] in seen:
                run_length += 1
            out.append(run_length)
            pending.append(pages)
    return out


def infinite_cache_scenario(tmp_path: Path, trace: Path) -> Path:
    doc = {
        "name": "ceiling",
        "seed": 1,
        "duration_s": 1e7,
        "model": {"page_size": PAGE, "kv": {"bytes_per_token": 1024}},
        "device": {"kv_pages": 10**9},
        "host": {"mode": "buffer_only", "pages": 10**9},
        "storage": {"pools": {"kv": {}}},
        "prefetch": {"policy": "best_effort"},
        "compute": {"prefill_tokens_per_s": 1e12, "decode_ms_per_token": 0.0},
        "workload": {"kind": "mooncake", "path": str(trace), "block_tokens": BLOCK},
    }
    path = tmp_path / "ceiling.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def synthetic_trace(path: Path, seed: int, requests: int = 600) -> Path:
    """Conversation-like: a few shared system prompts, sessions that grow turn by turn."""
    rng = np.random.default_rng(seed)
    next_id = 1000
    sessions: list[list[int]] = []
    ts = 0
    lines = []
    for _ in range(requests):
        ts += int(rng.choice([0, 0, 5, 40, 300]))
        if sessions and rng.random() < 0.6:
            ids = sessions[int(rng.integers(len(sessions)))]
        else:
            ids = [int(rng.integers(4))]
            sessions.append(ids)
        for _ in range(int(rng.integers(1, 4))):
            ids.append(next_id)
            next_id += 1
        length = (len(ids) - 1) * BLOCK + int(rng.integers(1, BLOCK + 1))
        record = {"timestamp": ts, "input_length": length, "output_length": 20, "hash_ids": ids}
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_reaches_ceiling(tmp_path: Path, trace: Path) -> float:
    result = run(load_scenario(infinite_cache_scenario(tmp_path, trace)))
    req = result.tables["requests"]
    assert (req["outcome"] == "finished").all()
    expected = np.array(ceiling_pages(trace)) * PAGE
    np.testing.assert_array_equal(req["device_hit_tokens"].to_numpy(), expected)
    rate = float(expected.sum() / req["prompt_tokens"].sum())
    assert rate > 0.1
    return rate


@pytest.mark.parametrize("seed", [1, 2])
def test_synthetic_trace_reaches_its_ceiling(tmp_path: Path, seed: int) -> None:
    assert_reaches_ceiling(tmp_path, synthetic_trace(tmp_path / "trace.jsonl", seed))


def test_mooncake_conversation_trace_reaches_its_ceiling(tmp_path: Path) -> None:
    assert_reaches_ceiling(tmp_path, CONVERSATION_TRACE)
