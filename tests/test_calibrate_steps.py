"""`hicache-sim calibrate --step-times`: a table of measured forward times fitted back to the
scenario's compute section, the file it writes, and the tables it refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.engine.runner import run
from sim.scenario.loading import build_scenario, parse_override
from sim.studies.step_fit import fit_steps
from sim.studies.step_table import read_step_table
from tests.conftest import invoke, make_doc, ok

TRUE = {
    "prefill_tokens_per_s": 30000.0,
    "decode_step_ms": 12.0,
    "decode_ms_per_request": 0.05,
    "decode_ms_per_ki_context_tokens": 0.02,
}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CONTEXTS = (512, 2048, 8192)
"""Context tokens a request: two prompt lengths or more tell the per-request cost apart."""


def _decode_ms(batch: int, tokens: float, c: dict[str, float] = TRUE) -> float:
    return (
        c["decode_step_ms"]
        + c["decode_ms_per_request"] * batch
        + c["decode_ms_per_ki_context_tokens"] * tokens / 1024
    )


def _rows(noise: float = 0.0, seed: int = 0) -> list[tuple[str, int, float, float]]:
    rng = np.random.default_rng(seed)
    rows = [
        ("decode", b, b * c, _decode_ms(b, b * c) * (1 + noise * rng.standard_normal()))
        for b in BATCHES
        for c in CONTEXTS
    ]
    for b, prompt in ((1, 1024), (4, 4096), (8, 8192)):
        ms = b * prompt / TRUE["prefill_tokens_per_s"] * 1000
        rows.append(("prefill", b, b * prompt, ms * (1 + noise * rng.standard_normal())))
    return rows


def _csv(path: Path, rows: list[tuple[str, int, float, float]]) -> Path:
    lines = ["phase,batch_size,tokens,ms", *(f"{p},{b},{t!r},{m!r}" for p, b, t, m in rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_table_of_known_coefficients_is_fitted_back(tmp_path: Path) -> None:
    table = read_step_table(_csv(tmp_path / "steps.csv", _rows()))
    fit = fit_steps(table, "steps.csv")
    for key, value in TRUE.items():
        assert fit.compute[key] == pytest.approx(value, rel=1e-6), key
    assert max(abs(r) for r in fit.residuals) < 1e-6
    assert fit.warnings == []


def test_a_noisy_table_is_fitted_within_its_noise(tmp_path: Path) -> None:
    """1 % noise on every row: over 200 seeds at 2 % the worst errors were 1.9 % (step),
    16 % (per request), 9.5 % (per 1,024 context tokens) and 5 % (prefill); the tolerances
    are those, and every step the fit charges is within 3 % of the noiseless one."""
    table = read_step_table(_csv(tmp_path / "steps.csv", _rows(noise=0.01, seed=7)))
    fit = fit_steps(table, "steps.csv")
    tolerance = {
        "decode_step_ms": 0.02,
        "decode_ms_per_request": 0.16,
        "decode_ms_per_ki_context_tokens": 0.10,
        "prefill_tokens_per_s": 0.05,
    }
    for key, rel in tolerance.items():
        assert fit.compute[key] == pytest.approx(TRUE[key], rel=rel), key
    for row, fitted in zip(table.rows, fit.fitted_ms, strict=True):
        if row.phase == "decode":
            assert fitted == pytest.approx(_decode_ms(row.batch_size, row.tokens), rel=0.03)
    assert 0 < abs(fit.worst[0]) < 0.05


def test_one_batch_size_leaves_the_per_request_cost_at_0_and_says_so(tmp_path: Path) -> None:
    rows = [("decode", 8, 8.0 * c, _decode_ms(8, 8.0 * c)) for c in CONTEXTS]
    fit = fit_steps(read_step_table(_csv(tmp_path / "steps.csv", rows)), "steps.csv")
    assert fit.compute["decode_ms_per_request"] == 0
    assert any(w.startswith("decode_ms_per_request is undetermined") for w in fit.warnings)
    assert any(w.startswith("no prefill rows") for w in fit.warnings)
    assert "prefill_tokens_per_s" not in fit.compute
    assert fit.compute["decode_ms_per_ki_context_tokens"] == pytest.approx(0.02, rel=1e-6)
    assert fit.compute["decode_step_ms"] == pytest.approx(12 + 8 * 0.05, rel=1e-6)
    assert max(abs(r) for r in fit.residuals) < 1e-6


def test_one_prompt_length_charges_the_slope_to_the_context(tmp_path: Path) -> None:
    """Context = batch × 2,048: the per-request cost and the context's move together; the
    context takes the whole slope, so every measured step is still met."""
    rows = [("decode", b, b * 2048.0, _decode_ms(b, b * 2048.0)) for b in BATCHES]
    fit = fit_steps(read_step_table(_csv(tmp_path / "steps.csv", rows)), "steps.csv")
    assert fit.compute["decode_ms_per_request"] == 0
    assert fit.compute["decode_ms_per_ki_context_tokens"] == pytest.approx(0.02 + 0.05 / 2)
    assert fit.compute["decode_step_ms"] == pytest.approx(12)
    assert "measure a second prompt length" in " ".join(fit.warnings)


def test_a_negative_slope_is_held_at_0(tmp_path: Path) -> None:
    rows = [("decode", b, b * 1024.0, 20.0 - 0.01 * b) for b in BATCHES]
    rows += [("decode", b, b * 4096.0, 20.0 - 0.01 * b) for b in BATCHES]
    fit = fit_steps(read_step_table(_csv(tmp_path / "steps.csv", rows)), "steps.csv")
    assert fit.compute["decode_ms_per_request"] == 0
    assert fit.compute["decode_ms_per_ki_context_tokens"] == 0
    assert any("held at 0" in w for w in fit.warnings)


def test_the_command_writes_a_compute_section_a_scenario_runs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _csv(tmp_path / "h200 steps.csv", _rows())
    monkeypatch.chdir(tmp_path)
    result = ok(invoke("calibrate", "--step-times", str(table)))
    out = tmp_path / "compute-h200-steps.yaml"
    text = out.read_text()
    assert f"wrote {out.name}" in result.output
    assert "compute.decode_step_ms = 12" in result.output
    assert "worst residual" in result.output and "row 2" in result.output
    sha = __import__("hashlib").sha256(table.read_bytes()).hexdigest()
    assert f"sha256 {sha}" in text and "from h200 steps.csv (csv, 27 rows)" in text
    compute = yaml.safe_load(text)["compute"]
    assert list(compute) == list(TRUE)
    set_line = result.output.strip().splitlines()[-1].split()
    assert set_line[0::2] == ["--set"] * 4
    assert dict(parse_override(item) for item in set_line[1::2]) == {
        f"compute.{k}": v for k, v in compute.items()
    }

    doc = make_doc(**{"workload.requests": 3, "workload.arrival_rate_per_s": 0.05})
    doc["duration_s"] = 600
    doc["compute"] = compute
    scenario = build_scenario(doc, "<test>")
    requests = run(scenario).tables["requests"]
    finished = requests[requests["outcome"] == "finished"]
    assert len(finished) == 3
    for _, req in finished.iterrows():
        # Alone on the server: step k of its output_tokens - 1 attends prompt + k + 1 tokens.
        mean_context = req.prompt_tokens + 1 + (req.output_tokens - 2) / 2
        tpot_ms = (req.finish_s - req.first_token_s) / (req.output_tokens - 1) * 1000
        assert tpot_ms == pytest.approx(_decode_ms(1, mean_context, compute), rel=1e-9)
        prefill_ms = (req.first_token_s - req.admitted_s) * 1000
        rate = compute["prefill_tokens_per_s"]
        assert prefill_ms == pytest.approx(req.recomputed_tokens / rate * 1000, rel=1e-9)


def test_an_existing_out_needs_force(tmp_path: Path) -> None:
    table = _csv(tmp_path / "steps.csv", _rows())
    out = tmp_path / "mine.yaml"
    out.write_text("mine\n")
    result = invoke("calibrate", "--step-times", str(table), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "already exists (use --force to replace it)" in result.stderr
    assert out.read_text() == "mine\n"
    ok(invoke("calibrate", "--step-times", str(table), "--out", str(out), "--force"))
    assert yaml.safe_load(out.read_text())["compute"]["decode_step_ms"] == pytest.approx(12)


HEADER = "phase,batch_size,tokens,ms\n"
BAD_TABLES = {
    "empty": ("", "is empty"),
    "header only": (HEADER, "holds no measured rows"),
    "a column missing": (
        "phase,batch_size,ms\ndecode,1,10\n",
        "row 1: the header lacks column tokens",
    ),
    "not a number": (HEADER + "decode,1,1024,fast\n", "row 2, ms: 'fast' is not a number"),
    "a negative time": (HEADER + "decode,1,1024,-3\n", "row 2, ms: -3 is not positive"),
    "a zero batch": (HEADER + "decode,0,1024,3\n", "row 2, batch_size: 0 is not positive"),
    "half a request": (HEADER + "decode,1.5,1024,3\n", "row 2, batch_size: 1.5 is not a whole"),
    "an unknown phase": (HEADER + "mixed,1,1024,3\n", "row 2, phase: 'mixed' is not decode"),
    "fewer tokens than requests": (HEADER + "decode,8,4,3\n", "row 2, tokens: 4 is fewer"),
    "a short row": (HEADER + "decode,1,1024\n", "row 2: has 3 cells, the header 4"),
    "an infinite time": (HEADER + "prefill,1,1024,inf\n", "row 2, ms: inf is not positive"),
    "bench: not JSON": ('{"batch_size": 1,\n', "line 1: not JSON"),
    "bench: a key missing": (
        json.dumps({"batch_size": 1, "input_len": 8, "output_len": 1}) + "\n",
        "line 1, prefill_latency: missing",
    ),
    "bench: no decode median": (
        json.dumps({"batch_size": 1, "input_len": 8, "output_len": 4, "prefill_latency": 0.1})
        + "\n",
        "line 1, median_decode_latency: missing",
    ),
    "bench: a zero latency": (
        json.dumps({"batch_size": 1, "input_len": 8, "output_len": 1, "prefill_latency": 0}) + "\n",
        "line 1, prefill_latency: 0 is not positive",
    ),
    "bench: a string batch": (
        json.dumps({"batch_size": "1", "input_len": 8, "output_len": 1, "prefill_latency": 1})
        + "\n",
        "line 1, batch_size: '1' is not a number",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_a_bad_table_exits_2_naming_the_row_and_writes_nothing(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, message = BAD_TABLES[case]
    table = tmp_path / "steps.csv"
    table.write_text(text)
    monkeypatch.chdir(tmp_path)
    result = invoke("calibrate", "--step-times", str(table))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert result.stderr.startswith(f"error: {table}: {message}"), result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["steps.csv"]


def test_a_missing_or_binary_table_or_a_host_link_option_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("calibrate", "--step-times", "absent.csv")
    assert result.exit_code == 2 and "error: absent.csv: no such file" in result.stderr
    (tmp_path / "junk.csv").write_bytes(b"\xff\xfe\x00junk")
    result = invoke("calibrate", "--step-times", "junk.csv")
    assert result.exit_code == 2 and "error: junk.csv: not UTF-8 text" in result.stderr
    _csv(tmp_path / "steps.csv", _rows())
    result = invoke("calibrate", "--step-times", "steps.csv", "--repeats", "3")
    assert result.exit_code == 2 and "--repeats: measures the host link" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.csv", "steps.csv"]


def test_a_fit_a_scenario_would_refuse_exits_2(tmp_path: Path) -> None:
    """A prefill rate under 1 token/s is outside `compute.prefill_tokens_per_s`'s bounds."""
    table = _csv(tmp_path / "steps.csv", [("prefill", 1, 10.0, 20_000.0)])
    result = invoke("calibrate", "--step-times", str(table), "--out", str(tmp_path / "c.yaml"))
    assert result.exit_code == 2, result.output
    assert "compute.prefill_tokens_per_s = 0.5, which a scenario refuses" in result.stderr
    assert not (tmp_path / "c.yaml").exists()


def _bench_line(batch: int, input_len: int, output_len: int) -> dict[str, object]:
    """A result line as 0.5.23's sglang/benchmark/one_batch.py:latency_test_run_once writes it
    (latencies in seconds; the decode median only when output_len > 1)."""
    prefill_s = batch * input_len / TRUE["prefill_tokens_per_s"]
    line: dict[str, object] = {
        "run_name": "default",
        "batch_size": batch,
        "input_len": input_len,
        "output_len": output_len,
        "prefill_latency": prefill_s,
        "prefill_throughput": batch * input_len / prefill_s,
    }
    if output_len > 1:
        decode_s = _decode_ms(batch, batch * (input_len + output_len / 2)) / 1000
        line["median_decode_latency"] = decode_s
        line["median_decode_throughput"] = batch / decode_s
    line["total_latency"] = prefill_s + (output_len - 1) * line.get("median_decode_latency", 0)
    line["overall_throughput"] = 1.0
    return line


def test_a_bench_one_batch_jsonl_is_read_and_fitted(tmp_path: Path) -> None:
    lines = [_bench_line(b, i, 32) for b in (1, 8, 32) for i in (256, 2048)]
    lines.append(_bench_line(4, 1024, 1))
    path = tmp_path / "result.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = read_step_table(path)
    assert table.form == "bench_one_batch"
    assert len(table.phase("prefill")) == 7 and len(table.phase("decode")) == 6
    decode = table.phase("decode")[1]
    assert (decode.batch_size, decode.tokens) == (1, 2048 + 16)
    assert decode.ms == pytest.approx(_decode_ms(1, 2064))
    fit = fit_steps(table, str(path))
    for key, value in TRUE.items():
        assert fit.compute[key] == pytest.approx(value, rel=1e-6), key
    assert fit.warnings == []


def test_a_fifo_is_neither_read_as_a_table_nor_replaced_by_the_file(tmp_path: Path) -> None:
    fifo = tmp_path / "steps.csv"
    os.mkfifo(fifo)
    result = invoke("calibrate", "--step-times", str(fifo), "--out", str(tmp_path / "c.yaml"))
    assert result.exit_code == 2 and "a FIFO (named pipe), not a regular file" in result.stderr
    table = _csv(tmp_path / "table.csv", _rows())
    out = tmp_path / "out.yaml"
    os.mkfifo(out)
    result = invoke("calibrate", "--step-times", str(table), "--out", str(out), "--force")
    assert result.exit_code == 2 and "refusing to replace it" in result.stderr
    assert out.is_fifo() and "measured ms" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml", "steps.csv", "table.csv"]
