"""The answer of a capacity search or a plan in plain words, first on its report: what was
sized, for which deployment (release, backend, GPU, model), the answer with its interval and
unit, and what is not modelled; no scenario key in the paragraph (they are in the tables)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sim.outputs.card import deployment_card
from sim.outputs.plain import capacity_paragraph, plan_paragraph

CONFIG: dict[str, Any] = {
    "model": {"preset": "gpt-oss-120b", "page_size": 64},
    "server": {"sglang": "0.5.23", "tp_size": 1},
    "storage": {"backend": "file", "pools": {"swa": {"capacity_gb": 10}}},
    "hardware": {"gpu": "h200"},
    "cluster": {"instances": 2},
}
KEY = re.compile(r"\b[a-z_]+\.[a-z_]+|\b[a-z]+_[a-z_]+\b")
"""A dotted scenario key or a snake_case metric name."""


def keys_in(text: str) -> list[str]:
    return KEY.findall(text.replace("docs/model.md", ""))


def test_a_capacity_answer_in_plain_words() -> None:
    answer = {
        "param": "storage.pools.swa.capacity_gb",
        "target": "l3_loaded_rate>=0.2",
        "seeds": 3,
        "answer": 32.09375,
        "largest_failing": 29.0,
        "overloaded": None,
    }
    rows = [
        {"value": 29.0, "n": 3, "mean": 0.18, "ci_low": 0.17, "ci_high": 0.19},
        {"value": 32.09375, "n": 3, "mean": 0.23, "ci_low": 0.21, "ci_high": 0.25},
    ]
    text = capacity_paragraph(answer, rows, CONFIG)
    assert text.startswith(
        "This search sized the SWA storage pool's capacity for gpt-oss-120b on 2 servers of "
        "one H200 each, SGLang 0.5.23 with the file storage backend"
    )
    assert "the share of prompt tokens restored from storage is at least 0.2" in text
    assert "The answer is 32.1 GB (resolved to within 3.1 GB; 29.0 GB fails)" in text
    assert "at a mean of 0.23 (95 % interval 0.21 to 0.25)" in text
    assert "Not modelled:" in text and not keys_in(text), keys_in(text)
    same = capacity_paragraph(answer, [{**rows[1], "ci_low": 0.23, "ci_high": 0.23}], CONFIG)
    assert "at 0.23 (every seed gave the same value)" in same


def test_a_plan_answer_in_plain_words() -> None:
    doc = {
        "axes": {"cluster.instances": [1, 2, 4], "storage.pools.swa.capacity_gb": [10, 20]},
        "targets": ["ttft_p99_s<=2"],
        "seeds": 3,
        "answer": {
            "values": {"cluster.instances": 2, "storage.pools.swa.capacity_gb": 20},
            "gpus": 2,
            "cost_usd_per_hour": 7.25,
            "cost_usd_per_month": 5292.5,
            "metrics": {"ttft_p99_s": {"mean": 1.5, "n": 3, "ci_low": 1.2, "ci_high": 1.8}},
        },
        "neighbours": ["cluster.instances=1: ..."],
        "overloaded": {"statement": "..."},
    }
    text = plan_paragraph(doc, CONFIG)
    assert text.startswith(
        "This plan priced 6 deployments of gpt-oss-120b on servers of one H200 each"
    )
    assert "the TTFT p99 is at most 2 s" in text
    assert "The cheapest of the grid's points is 2 servers, 20 GB for the SWA storage" in text
    assert "$7.25 per hour ($5,292 per month, 2 GPUs)" in text
    assert "the TTFT p99 at a mean of 1.5 s (95 % interval 1.2 s to 1.8 s)" in text
    assert "may lie between the grid's points" in text and "were overloaded" in text
    assert not keys_in(text), keys_in(text)


def test_a_relative_target_is_told_as_asked_with_its_reference_mean() -> None:
    answer = {
        "param": "storage.pools.swa.capacity_gb",
        "target": "heal_rate>=0.2519",
        "requested_target": "heal_rate>=95%@unbounded",
        "reference": {"value": None, "n": 3, "mean": 0.26521, "ci_low": 0.25, "ci_high": 0.28},
        "seeds": 3,
        "answer": None,
    }
    text = capacity_paragraph(answer, [], CONFIG)
    assert "the heal rate is at least 95 % of the unbounded pool's 0.2652 with 95 %" in text
    at_value = {**answer, "reference": {**answer["reference"], "value": 100.0}}
    text = capacity_paragraph(at_value, [], CONFIG)
    assert "at least 95 % of its value at 100 GB, 0.2652" in text


@pytest.mark.parametrize(
    ("instances", "tp", "words"),
    [
        (1, 1, "gpt-oss-120b on one H200, SGLang"),
        (1, 4, "gpt-oss-120b on one server of 4 H200 GPUs, SGLang"),
        (3, 2, "gpt-oss-120b on 3 servers of 2 H200 GPUs each, SGLang"),
    ],
)
def test_the_deployment_reads_as_a_person_writes_it(instances: int, tp: int, words: str) -> None:
    config = {**CONFIG, "cluster": {"instances": instances}, "server": {"tp_size": tp}}
    config["server"]["sglang"] = "0.5.23"
    assert words in plan_paragraph({"axes": {}, "targets": [], "seeds": 1}, config)


def test_the_deployment_card_names_no_raw_keys() -> None:
    config = {
        **CONFIG,
        "model": {
            "preset": "qwen3-next-80b-a3b",
            "kv": {"bytes_per_token": 12288},
            "page_size": 64,
        },
        "device": {"kv_pages": 100, "mamba_slots": 20},
    }
    config["model"]["mamba"] = {"state_bytes": 38633472}
    device = dict(deployment_card(config))["device pools"]
    assert device.startswith("KV pages 100") and "Mamba slots 20" in device
    assert not keys_in(device), keys_in(device)
