"""The `concurrency` workload (bench_serving's --max-concurrency with random lengths): C requests
in flight until the prompts run out, lengths drawn as bench_serving draws them, the same stream
for the same seed, and bad keys refused by name."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.engine.runner import run
from sim.workload.concurrency import ClosedLoop, ConcurrencyWorkload, random_lengths
from tests.conftest import invoke, make_doc, make_scenario

CLOSED_LOOP = {
    "workload": {
        "kind": "concurrency",
        "concurrency": 6,
        "requests": 40,
        "input_tokens": 1024,
        "output_tokens": 64,
    },
    "storage.hit_query": "kv_only",
    "device.kv_pages": 4000,
}


def _spec(**fields: object) -> ConcurrencyWorkload:
    return ConcurrencyWorkload(kind="concurrency", **fields)  # type: ignore[arg-type]


def test_concurrency_requests_are_in_flight_until_the_prompts_run_out() -> None:
    result = run(make_scenario(**copy.deepcopy(CLOSED_LOOP)))
    req = result.tables["requests"]
    assert (req["outcome"] == "finished").all() and len(req) == 40
    assert (req["arrival_s"] == 0.0).sum() == 6
    last_arrival = req["arrival_s"].max()
    times = sorted(set(req["arrival_s"]) | set(req["finish_s"]))
    for t in times:
        in_flight = int((req["arrival_s"] <= t).sum() - (req["finish_s"] <= t).sum())
        assert in_flight == (6 if t <= last_arrival else in_flight), t
        assert in_flight <= 6
    finishes = set(req["finish_s"])
    later = req[req["arrival_s"] > 0]
    assert later["arrival_s"].isin(finishes).all(), "a follow-up starts at a finish"
    assert list(req.sort_values(["arrival_s", "rid"])["rid"]) == sorted(req["rid"])


def test_lengths_are_drawn_as_bench_serving_draws_them() -> None:
    """Default range ratio 0.0: uniform over [1, full]; 1.0: exactly full; 0.5: [full/2, full]."""
    rng = np.random.default_rng(3)
    drawn = random_lengths(1024, 0.0, 20_000, rng)
    assert min(drawn) >= 1 and max(drawn) == 1024
    assert np.mean(drawn) == pytest.approx(512.5, rel=0.02)
    assert set(random_lengths(300, 1.0, 50, rng)) == {300}
    assert min(random_lengths(1000, 0.5, 5000, rng)) == 500
    assert _spec().range_ratio == 0.0


def test_pages_are_fresh_and_the_stream_is_deterministic() -> None:
    spec = _spec(concurrency=3, requests=5, input_tokens=256, output_tokens=128, range_ratio=0.5)
    a = ClosedLoop(spec, 64, np.random.default_rng(9))
    b = ClosedLoop(spec, 64, np.random.default_rng(9))
    first = list(a.arrivals())
    assert [r.rid for r in first] == [0, 1, 2] and [r.arrival_s for r in first] == [0.0] * 3
    assert [(r.prompt_tokens, r.output_tokens) for r in first] == [
        (r.prompt_tokens, r.output_tokens) for r in b.arrivals()
    ]
    nxt = a.follow_up(first[1], 2.5)
    assert nxt is not None and (nxt.rid, nxt.arrival_s) == (3, 2.5)
    assert a.follow_up(first[0], 3.0) is not None and a.follow_up(first[2], 4.0) is None
    keys = [k for r in first for k in r.pages]
    assert len(keys) == len(set(keys)), "no two prompts share a page"
    runs = [run(make_scenario(**copy.deepcopy(CLOSED_LOOP))).summary for _ in range(2)]
    assert runs[0]["tpot_p50_s"] == runs[1]["tpot_p50_s"]
    assert runs[0]["e2e_p99_s"] == runs[1]["e2e_p99_s"]


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("workload.concurrency", 0, "workload.concurrency"),
        ("workload.requests", -1, "workload.requests"),
        ("workload.range_ratio", 1.5, "workload.range_ratio"),
        ("workload.input_tokens", 2**24, "workload.input_tokens"),
        ("workload.prefixes", 4, "workload.prefixes"),
    ],
)
def test_a_bad_key_exits_2_naming_it(tmp_path: Path, key: str, value: object, named: str) -> None:
    doc = make_doc(**copy.deepcopy(CLOSED_LOOP))
    doc["workload"][key.split(".")[1]] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 2, result.output
    assert named in result.stderr
