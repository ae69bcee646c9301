"""Published serving measurements, each rerun by its shipped scenario: every one names its source
and holds figures in range, its scenario is the same deployment and finishes every request, a
simulated ratio outside the band says why, and docs/compute.md's table is the runs' output."""

from __future__ import annotations

import pytest

from sim.deployment.compute import DECODE_BATCH, GPU_PEAKS, MODEL_COMPUTE, roofline
from sim.deployment.published import NEAR, PublishedMeasurement
from sim.deployment.published_figures import PUBLISHED
from sim.deployment.table import write_into
from sim.scenario.loading import load_scenario
from sim.studies.published_runs import (
    SCENARIOS,
    published_table,
    scenario_path,
    simulate,
    simulated_ratios,
)
from sim.workload.concurrency import ConcurrencyWorkload
from tests.conftest import REPO

IDS = [f"{m.preset}-{m.gpu}-tp{m.tp}-c{m.concurrency}" for m in PUBLISHED]


def test_docs_compute_holds_the_published_table() -> None:
    text = (REPO / "docs" / "compute.md").read_text()
    start, end = "<!-- compute published table: start -->", "<!-- compute published table: end -->"
    assert text.index(start) < text.index(end)
    block = text[text.index(start) + len(start) : text.index(end)].strip()
    assert block == published_table()
    assert write_into(text) == text


@pytest.mark.parametrize("m", PUBLISHED, ids=IDS)
def test_every_measurement_names_its_source_and_figures_in_range(m: PublishedMeasurement) -> None:
    assert m.preset in MODEL_COMPUTE and m.gpu in GPU_PEAKS
    assert m.source_title.strip() and m.source_url.startswith("https://")
    assert m.figure.strip() and m.engine.strip() and m.precision.strip()
    assert m.tp is None or m.tp in (1, 2, 4, 8, 16)
    assert m.gpus is None or (1 <= m.gpus <= 64 and m.gpus >= (m.tp or 1))
    assert m.concurrency is None or 1 <= m.concurrency <= 4096
    for tokens in (m.input_tokens, m.output_tokens):
        assert tokens is None or 1 <= tokens <= 1_000_000
    figures = [
        m.tpot_ms,
        m.output_tokens_per_s_per_gpu,
        m.input_tokens_per_s_per_gpu,
        m.ttft_ms,
    ]
    assert any(f is not None for f in figures), "a measurement without a figure"
    assert m.tpot_ms is None or 0.5 <= m.tpot_ms <= 2000
    assert m.ttft_ms is None or 1 <= m.ttft_ms <= 10_000_000
    for rate in (m.output_tokens_per_s_per_gpu, m.input_tokens_per_s_per_gpu):
        assert rate is None or 0 < rate <= 200_000
    if m.output_tokens_per_s_per_gpu is not None or m.input_tokens_per_s_per_gpu is not None:
        assert m.gpus is not None, "a per-GPU figure needs the GPU count"


@pytest.mark.parametrize("m", PUBLISHED, ids=IDS)
def test_a_simulated_ratio_outside_the_band_says_why_and_one_inside_says_nothing(
    m: PublishedMeasurement,
) -> None:
    low, high = NEAR
    ratios = simulated_ratios(m, simulate(m))
    outside = [k for k, r in ratios.items() if not low <= r <= high]
    assert ratios, "nothing compared"
    assert bool(m.why_apart) == bool(outside), (ratios, m.why_apart)


def test_each_measurement_has_its_scenario_and_each_scenario_its_measurement() -> None:
    named = [m.scenario for m in PUBLISHED]
    assert len(set(named)) == len(named), "two measurements share a scenario"
    shipped = {p.stem for p in SCENARIOS.glob("*.yaml")}
    assert shipped == set(named)


@pytest.mark.parametrize("m", PUBLISHED, ids=IDS)
def test_the_scenario_runs_the_measurements_deployment(m: PublishedMeasurement) -> None:
    """Same GPU, preset and tp, the stated concurrency and lengths (a stated length is the
    longest drawn, or with bench_serving's default range ratio twice the published mean), and
    a horizon that lets every request finish."""
    scenario = load_scenario(scenario_path(m))
    assert scenario.hardware.gpu == m.gpu and scenario.model.preset == m.preset
    assert scenario.server.tp_size == m.compared_tp
    workload = scenario.workload
    assert isinstance(workload, ConcurrencyWorkload)
    assert workload.concurrency == m.compared_batch
    assert workload.requests >= workload.concurrency
    if m.benchmark == "one_batch":
        assert workload.requests == workload.concurrency, "bench_one_batch_server sends one batch"
    for stated, drawn in (
        (m.input_tokens, workload.input_tokens),
        (m.output_tokens, workload.output_tokens),
    ):
        if stated is not None:
            mean = drawn if workload.range_ratio == 1.0 else (1 + drawn) / 2
            assert mean == pytest.approx(stated, abs=1), (stated, drawn)
    sim = simulate(m)
    assert sim.finished == sim.requests == workload.requests


def test_every_gpu_and_model_the_issue_names_has_measurements() -> None:
    """gpt-oss-120b on the H100, H200 and B200, and a second preset on at least two of them."""
    pairs = {(m.preset, m.gpu) for m in PUBLISHED}
    assert {("gpt-oss-120b", g) for g in ("h100", "h200", "b200")} <= pairs
    second = {g for p, g in pairs if p != "gpt-oss-120b"}
    assert len(second) >= 2


def test_the_roofline_at_the_measurements_batch_by_hand() -> None:
    """gpt-oss-120b on 2 H100s, a step of 64: all 60.8 GiB of weights over 2 ranks, and 64
    requests x (18 x 8,192 + 18 x 128) tokens-layers x 2 x 4 heads x 64 x 2 bytes, at 72 % of
    3.35 TB/s; the engine's own batch is unchanged."""
    weights = 60.8 * 2**30 / 2
    kv = 64 * (18 * 8192 + 18 * 128) * 2 * 4 * 64 * 2
    by_hand = (weights + kv) / (3.35e12 * 0.72) * 1000
    found = roofline("h100", "gpt-oss-120b", 2, decode_batch=64)
    assert found is not None
    assert found.decode_ms_per_token == pytest.approx(by_hand, rel=2e-3)
    engine = roofline("h200", "gpt-oss-120b", 1)
    assert engine == roofline("h200", "gpt-oss-120b", 1, decode_batch=DECODE_BATCH)
    assert engine is not None and engine.decode_ms_per_token == 21.73


def test_the_table_row_shows_published_simulated_and_ratio() -> None:
    """InferenceX's tp 2, 64 requests: 15.21 ms published against the run's mean TPOT, and the
    closed form's 17.6 ms (by hand above) beside it."""
    m = next(m for m in PUBLISHED if m.tpot_ms == 15.21)
    sim = simulate(m)
    row = next(line for line in published_table().splitlines() if "| 15.21 / " in line)
    ratio = 15.21 / sim.tpot_ms
    assert f"15.21 / {sim.tpot_ms:.4g} ({ratio:.2f})" in row
    assert "| 17.6 (0.86) |" in row and "| 2, tp 2 |" in row and "| 64 |" in row
    assert f"(../scenarios/published/{m.scenario}.yaml)" in row
    assert row.count(" | ") == 13


def test_per_gpu_figures_divide_the_replicas_by_its_gpus() -> None:
    """SGLang's cookbook, 8 B200s at 100 requests: 7,773.26 output tok/s in all."""
    cookbook = next(m for m in PUBLISHED if m.gpu == "b200" and m.tpot_ms == 14.31)
    assert cookbook.gpus == 8
    assert cookbook.output_tokens_per_s_per_gpu == pytest.approx(7773.26 / 8, abs=0.01)
