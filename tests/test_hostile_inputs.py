"""Hostile input on every surface that parses or reads: each case is refused fast with exit 2
naming the option or key and the bound, and nothing is written (docs/reliability.md)."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_SWEEP, invoke, make_doc

BOMB = (
    "{"
    + ", ".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]"
        for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
    )
    + "}"
)
"""Nine nested alias levels in one flow mapping: 9**9 leaves when expanded."""


def _scenario(tmp_path: Path, **overrides: object) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(**{**TINY_SWEEP, **overrides})))
    return path


def _refused_fast(result: object, started: float, *words: str) -> None:
    elapsed = time.perf_counter() - started
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert elapsed < 10, f"took {elapsed:.1f} s"
    for word in words:
        assert word in result.output, result.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "args",
    [
        ("validate", "{s}", "--set", f"heal={BOMB}"),
        ("run", "{s}", "--set", f"heal={BOMB}", "--out", "{out}"),
        ("sweep", "{s}", "--set", "sweep.grid={heal: " + BOMB + "}", "--out", "{out}"),
        ("compare", "{s}", "--vary", f"heal={BOMB}", "--out", "{out}"),
        ("compare", "{s}", "--variant", f"a:heal={BOMB}", "--out", "{out}"),
    ],
    ids=["validate-set", "run-set", "sweep-grid-set", "vary", "variant"],
)
def test_alias_bombs_on_every_command_line_surface_are_refused_at_once(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    scenario, out = _scenario(tmp_path), tmp_path / "out"
    started = time.perf_counter()
    result = invoke(*(a.replace("{s}", str(scenario)).replace("{out}", str(out)) for a in args))
    _refused_fast(result, started, "aliases expand")
    assert not out.exists()


def test_an_alias_bomb_in_a_files_sweep_grid_is_refused_by_validate_and_sweep(
    tmp_path: Path,
) -> None:
    text = yaml.safe_dump(make_doc(**TINY_SWEEP)) + f"sweep: {{seeds: 1, grid: {{heal: {BOMB}}}}}\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    for command in (("validate", str(path)), ("sweep", str(path), "--out", str(tmp_path / "o"))):
        started = time.perf_counter()
        _refused_fast(invoke(*command), started, "aliases expand")
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.partial").exists()


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("prefetch.retry.interval_s", 1e-300, "0.001 s"),
        ("prefetch.retry.max_attempts", 10**9, "1000"),
        ("cluster.link_gbps", 5e-324, "GB/s"),
        ("storage.read_gbps", 5e-324, "GB/s"),
        ("storage.write_gbps", 1e-9, "GB/s"),
        ("host.pcie_gbps", 1e-9, "GB/s"),
        ("compute.prefill_tokens_per_s", 1e-300, "per second"),
        ("cluster.router", {"policy": "power_of_two", "load_poll_interval_s": 1e-300}, "seconds"),
        ("cluster.router", {"policy": "cache_aware", "eviction_interval_s": 1e-300}, "seconds"),
    ],
)
def test_every_timer_rate_and_attempt_count_has_a_physical_bound(
    tmp_path: Path, key: str, value: object, bound: str
) -> None:
    doc = make_doc(**TINY_SWEEP)
    if key == "cluster.link_gbps":
        doc["cluster"] = {"instances": 2}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_merge(doc, key, value)))
    result = invoke("validate", str(path))
    assert result.exit_code == 2, result.output
    assert key.split(".")[-1] in result.output or "interval_s" in result.output
    assert bound in result.output


def test_retry_interval_zero_still_turns_retries_off(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(**{"prefetch.retry.interval_s": 0.0})))
    assert invoke("validate", str(path)).exit_code == 0


def _merge(doc: dict[str, object], key: str, value: object) -> dict[str, object]:
    node = doc
    *path, leaf = key.split(".")
    for part in path:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[leaf] = value
    return doc


def _trace_scenario(tmp_path: Path, trace: str) -> Path:
    doc = make_doc(workload={"kind": "mooncake", "path": trace, "block_tokens": 512})
    doc["model"].pop("swa")
    doc["device"].pop("swa_pages")
    doc["storage"]["pools"].pop("swa")
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_gzip_trace_of_blank_lines_is_refused_within_seconds(tmp_path: Path) -> None:
    from sim.workload.kinds import MAX_BLANK_LINES

    trace = tmp_path / "blank.jsonl.gz"
    with gzip.open(trace, "wb") as handle:
        handle.write(b"\n" * (MAX_BLANK_LINES + 10))
    started = time.perf_counter()
    result = invoke("validate", str(_trace_scenario(tmp_path, str(trace))))
    _refused_fast(result, started, "blank", "line")


def test_non_regular_files_are_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        started = time.perf_counter()
        result = invoke("validate", path)
        _refused_fast(result, started, "not a regular file")
    started = time.perf_counter()
    result = invoke("validate", str(_trace_scenario(tmp_path, "/dev/zero")))
    _refused_fast(result, started, "workload.path", "device")
    assert "not found" not in result.output


def test_a_result_file_linked_to_dev_zero_is_refused(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, **{"workload.requests": 20, "duration_s": 20})
    run_dir = tmp_path / "run"
    assert invoke("run", str(scenario), "--out", str(run_dir)).exit_code == 0
    for name in ("summary.json", "timeseries.parquet", "config.resolved.yaml"):
        target = run_dir / name
        target.unlink()
        target.symlink_to("/dev/zero")
        started = time.perf_counter()
        result = invoke("plot", str(run_dir))
        assert result.exit_code in (0, 2), result.output
        assert time.perf_counter() - started < 10
        target.unlink()
        target.write_text("{}")


def _serve(answer: bytes | None) -> tuple[int, object]:
    """A local TCP port that answers every connection with `answer` (None: reads and waits,
    as an HTTP server does for a request that never comes)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if answer is not None:
                conn.sendall(answer)

    threading.Thread(target=loop, daemon=True).start()
    return server.getsockname()[1], server


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("foo://x:1", ("unknown scheme 'foo'",)),
        ("http://[::", ("unknown scheme 'http'",)),
        ("tcp://localhost", ("HOST:PORT",)),
        ("silent", ("no answer within",)),
        ("junk", ("cannot join a Dask scheduler",)),
        ("closed", ("cannot join a Dask scheduler",)),
    ],
)
def test_a_scheduler_address_that_is_no_dask_scheduler_exits_2_in_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address: str, words: tuple[str, ...]
) -> None:
    import socket

    import sim.studies.executors

    monkeypatch.setattr(sim.studies.executors, "SCHEDULER_TIMEOUT_S", 2.0)
    server = None
    if address in ("silent", "junk"):
        port, server = _serve(None if address == "silent" else b"\xff" * 64)
        address = f"tcp://127.0.0.1:{port}"
    elif address == "closed":
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
        probe.close()
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {"seeds": 1, "grid": {"heal": ["none"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    started = time.perf_counter()
    result = invoke(
        "sweep", str(path), "--executor", "dask", "--scheduler", address, "--out", str(out)
    )
    _refused_fast(result, started, "--scheduler", *words)
    assert not out.exists() and not (tmp_path / ".out.partial").exists()
    if server is not None:
        server.close()  # type: ignore[attr-defined]


def test_scheduler_without_the_dask_executor_is_refused(tmp_path: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {"seeds": 1, "grid": {"heal": ["none"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke(
        "sweep", str(path), "--scheduler", "tcp://127.0.0.1:8786", "--out", str(tmp_path / "o")
    )
    assert result.exit_code == 2 and "--executor dask" in result.output
    assert not (tmp_path / "o").exists()


def test_labels_with_mathtext_are_drawn_as_plain_text(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, **{"workload.requests": 20, "duration_s": 20})
    out = tmp_path / "cmp"
    result = invoke(
        "compare",
        str(scenario),
        "--variant",
        "$\\badcmd{$:heal=none",
        "--variant",
        "b:heal=keep_pages",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert (out / "comparison.png").is_file()


def test_a_plot_that_fails_never_loses_the_finished_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sim.outputs.plot_compare
    import sim.outputs.plot_sweep

    def broken(*args: object, **kwargs: object) -> list[Path]:
        raise RuntimeError("no figure")

    monkeypatch.setattr(sim.outputs.plot_compare, "plot_comparison", broken)
    monkeypatch.setattr(sim.outputs.plot_sweep, "plot_sweep", broken)
    scenario = _scenario(tmp_path, **{"workload.requests": 20, "duration_s": 20})
    out = tmp_path / "cmp"
    result = invoke("compare", str(scenario), "--heal", "none,keep_pages", "--out", str(out))
    assert result.exit_code == 0 and "no figure" in result.output
    assert (out / "comparison.csv").is_file()
    doc = yaml.safe_load(scenario.read_text())
    doc["sweep"] = {"seeds": 1, "grid": {"heal": ["none"]}}
    scenario.write_text(yaml.safe_dump(doc))
    result = invoke("sweep", str(scenario), "--executor", "serial", "--out", str(tmp_path / "sw"))
    assert result.exit_code == 0 and "no figure" in result.output
    assert (tmp_path / "sw" / "runs.parquet").is_file()


def test_a_size_in_bits_is_refused_not_read_as_bytes(tmp_path: Path) -> None:
    path = _scenario(tmp_path, **{"storage.pools.kv.capacity_gb": "12Gb"})
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "storage.pools.kv.capacity_gb" in result.output
    assert "bit" in result.output
    ok = _scenario(tmp_path, **{"storage.pools.kv.capacity_gb": "12GB"})
    assert invoke("validate", str(ok)).exit_code == 0


def test_debug_zero_means_off_and_run_takes_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sim.cli.runs

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(sim.cli.runs, "run", broken)
    path = _scenario(tmp_path)
    monkeypatch.setenv("HICACHE_DEBUG", "0")
    off = invoke("run", str(path), "--out", str(tmp_path / "a"))
    assert off.exit_code == 1 and "Traceback" not in off.output
    on = invoke("run", str(path), "--debug", "--out", str(tmp_path / "b"))
    assert on.exit_code == 1 and "Traceback" in on.output


def test_an_infinite_tolerance_is_called_infinite(tmp_path: Path) -> None:
    path = _scenario(tmp_path)
    result = invoke(
        "capacity",
        str(path),
        "--param",
        "device.swa_pages",
        "--target",
        "requests>=1",
        "--range",
        "100",
        "400",
        "--tolerance",
        "inf",
        "--out",
        str(tmp_path / "c"),
    )
    assert result.exit_code == 2 and "not a finite number" in result.output


def test_validate_plans_the_sweep(tmp_path: Path) -> None:
    doc = make_doc(**TINY_SWEEP)
    doc["sweep"] = {"seeds": 3, "grid": {"heal": ["none", "keep_pages"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = invoke("validate", str(path))
    assert result.exit_code == 0 and "sweep of 6 runs" in result.output
    doc["sweep"]["grid"] = {"device.kv_pages": [400, -1]}
    path.write_text(yaml.safe_dump(doc))
    bad = invoke("validate", str(path))
    assert bad.exit_code == 2 and "sweep.grid.device.kv_pages" in bad.output


def test_the_hash_id_bound_is_the_one_the_message_states(tmp_path: Path) -> None:
    import json

    from sim.scenario.loading import ScenarioError, build_scenario

    limit = 2**62 // 512 - 1

    def scan(hash_id: int) -> None:
        trace = tmp_path / "t.jsonl"
        trace.write_text(
            json.dumps(
                {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [hash_id]}
            )
            + "\n"
        )
        doc = make_doc(workload={"kind": "mooncake", "path": str(trace), "block_tokens": 512})
        doc["model"].pop("swa")
        doc["device"].pop("swa_pages")
        doc["storage"]["pools"].pop("swa")
        build_scenario(doc, "<t>").workload.scan()

    scan(limit - 1)
    with pytest.raises(ScenarioError) as err:
        scan(limit)
    assert f"below {limit} " in str(err.value)
    docs = (Path(__file__).resolve().parents[1] / "docs" / "scenarios.md").read_text()
    assert "below 2⁶² / `block_tokens` − 1" in docs


def test_compare_warns_when_every_variant_gives_the_same_results(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, **{"workload.requests": 20, "duration_s": 20})
    same = invoke(
        "compare",
        str(scenario),
        "--vary",
        "prefetch.retry.idle_pass_ms=0.1,0.2",
        "--out",
        str(tmp_path / "a"),
    )
    assert same.exit_code == 0 and "identical results" in same.output
    differ = invoke(
        "compare", str(scenario), "--vary", "device.kv_pages=300,2000", "--out", str(tmp_path / "b")
    )
    assert differ.exit_code == 0 and "identical results" not in differ.output
