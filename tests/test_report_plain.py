"""The answer of a capacity search or a plan in plain words, first on its report: what was
sized, for which deployment (release, backend, GPU, model), the answer with its interval and
unit, and what is not modelled; no scenario key in the paragraph (they are in the tables)."""

from __future__ import annotations

import re
from typing import Any

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
        "h200 GPUs, SGLang 0.5.23 with the file storage backend"
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
    assert text.startswith("This plan priced 6 deployments of gpt-oss-120b on servers of h200")
    assert "the TTFT p99 is at most 2 s" in text
    assert "The cheapest of the grid's points is 2 servers, 20 GB for the SWA storage" in text
    assert "$7.25 per hour ($5,292 per month, 2 GPUs)" in text
    assert "the TTFT p99 at a mean of 1.5 s (95 % interval 1.2 s to 1.8 s)" in text
    assert "may lie between the grid's points" in text and "were overloaded" in text
    assert not keys_in(text), keys_in(text)
