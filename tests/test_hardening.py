"""Hostile input that used to hang or leak: each case is bounded work now (docs/reliability.md)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import Scenario, ScenarioError
from tests.conftest import invoke, make_doc

LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)
"""Nine lines of nested aliases: 9**9 (387 million) leaves when expanded."""


@pytest.mark.parametrize("tail", ["", "name: x\nseed: *i\n"], ids=["unknown-keys", "as-a-value"])
def test_nested_aliases_are_checked_once_each_and_echoed_briefly(tmp_path: Path, tail: str):
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + tail)
    started = time.perf_counter()
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert time.perf_counter() - started < 10, "the check re-walked every alias"
    assert len(str(err.value)) < 5000
    result = invoke("validate", str(path))
    assert result.exit_code == 2


def test_a_device_without_mamba_slots_rejects_every_request() -> None:
    """No working slot for the recurrent state: nothing can ever run, so every request is
    rejected at once instead of waiting unfinished to the horizon."""
    from sim.engine.runner import run
    from tests.conftest import make_scenario

    scenario = make_scenario(
        **{"model.mamba": {"state_bytes": 1 << 20}, "device.mamba_slots": 0, "duration_s": 30}
    )
    summary = run(scenario).summary
    assert summary["requests"] > 0
    assert summary["requests_rejected"] == summary["requests"]
    assert summary["requests_unfinished"] == 0


def test_debug_shows_the_traceback_behind_an_unexpected_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exit-1 error prints one line and says how to get the stack; --debug prints it."""
    import sim.cli.runs

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(sim.cli.runs, "run", broken)
    monkeypatch.setenv("HICACHE_DEBUG", "")  # unset again at teardown, whatever --debug sets
    path = tmp_path / "s.yaml"
    import yaml

    from tests.conftest import make_doc

    path.write_text(yaml.safe_dump(make_doc()))
    plain = invoke("run", str(path), "--out", str(tmp_path / "a"))
    assert plain.exit_code == 1 and "Traceback" not in plain.output
    assert "RuntimeError: boom" in plain.output and "--debug" in plain.output
    debug = invoke("--debug", "run", str(path), "--out", str(tmp_path / "b"))
    assert debug.exit_code == 1 and "Traceback" in debug.output and "boom" in debug.output


def _trace(tmp_path: Path, records: list[dict[str, object]]) -> Path:
    import json

    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _trace_scenario(tmp_path: Path, trace: Path) -> Scenario:

    doc = make_doc(workload={"kind": "mooncake", "path": str(trace), "block_tokens": 512})
    doc["model"].pop("swa")
    doc["device"].pop("swa_pages")
    doc["storage"]["pools"].pop("swa")
    return build_scenario(doc, "<t>")


def test_trace_keys_never_collide_with_the_keys_of_output_pages(tmp_path: Path) -> None:
    """Hash id 2**45 with 8 pages per block gives page key 2**48 + 1, which was the key of the
    second output page ever generated: a block never seen matched it on the device."""
    from sim.engine.runner import run

    records = [
        {"timestamp": 0, "input_length": 512, "output_length": 64, "hash_ids": [1]},
        {"timestamp": 10000, "input_length": 512, "output_length": 64, "hash_ids": [1]},
        {"timestamp": 20000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2**45]},
    ]
    req = run(_trace_scenario(tmp_path, _trace(tmp_path, records))).tables["requests"]
    assert int(req.loc[2, "device_hit_tokens"]) == 512, "only the first block was ever seen"


def test_trace_hash_ids_beyond_the_key_space_are_bad_input(tmp_path: Path) -> None:
    records = [{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [2**60]}]
    with pytest.raises(ScenarioError) as err:
        _trace_scenario(tmp_path, _trace(tmp_path, records)).workload.scan()
    assert "hash_ids" in str(err.value) and "below" in str(err.value)


def test_plot_and_export_trace_replace_a_planted_symlink_instead_of_writing_through(
    tmp_path: Path,
) -> None:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc(duration_s=20, **{"workload.requests": 20})))
    run_dir = tmp_path / "run"
    assert invoke("run", str(path), "--out", str(run_dir), "--storage-trace").exit_code == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    for name in ("timeseries.png", "kv.csv"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(victim)
    assert invoke("plot", str(run_dir)).exit_code == 0
    out = str(run_dir / "kv.csv")
    assert invoke("export-trace", str(run_dir), "--pool", "kv", "--out", out).exit_code == 0
    assert victim.read_text() == "mine"
    for name in ("timeseries.png", "kv.csv"):
        assert not (run_dir / name).is_symlink() and (run_dir / name).stat().st_size > 0
        assert (run_dir / name).stat().st_mode & 0o777 == 0o644, "readable as a plain write"


def test_one_seed_gives_no_interval_and_a_grid_cannot_sweep_the_seed() -> None:
    import math

    from sim.core.stats import confidence

    one = confidence([0.4])
    assert one["mean"] == 0.4 and one["n"] == 1
    assert all(math.isnan(one[k]) for k in ("std", "ci_low", "ci_high"))
    two = confidence([0.4, 0.6])
    assert two["ci_low"] < 0.5 < two["ci_high"]
    doc = make_doc()
    doc["sweep"] = {"seeds": 2, "grid": {"seed": [1, 2, 3]}}
    with pytest.raises(ScenarioError) as err:
        build_scenario(doc, "<t>")
    assert err.value.key == "sweep.grid.seed" and "sweep.seeds" in err.value.message


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"workload.output_tokens": 10**12}, "workload.output_tokens"),
        ({"workload.prefixes": 10**9}, "workload.prefixes"),
        ({"workload.suffix_tokens": 10**30}, "workload.suffix_tokens"),
        ({"workload.requests": 10**9}, "workload.requests"),
        (
            {"workload.prefix_tokens": 2**24, "workload.suffix_tokens": 2**24},
            "workload.prefix_tokens",
        ),
    ],
)
def test_workload_sizes_have_bounds_that_validate_enforces(
    overrides: dict[str, int], key: str
) -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(make_doc(**overrides), "<t>")
    assert err.value.key == key


def test_multiturn_sessions_and_conversation_length_are_bounded() -> None:
    multiturn = {"kind": "multiturn", "sessions": 10**9}
    with pytest.raises(ScenarioError) as err:
        build_scenario(make_doc(workload=multiturn), "<t>")
    assert err.value.key == "workload.sessions"
    long = {"kind": "multiturn", "turns": 10_000, "turn_tokens": 10**5}
    with pytest.raises(ScenarioError) as err:
        build_scenario(make_doc(workload=long), "<t>")
    assert err.value.key == "workload.turns"


def test_a_huge_trace_request_and_a_line_without_end_are_bad_input(tmp_path: Path) -> None:
    huge = [{"timestamp": 0, "input_length": 200 * 2**20, "output_length": 1, "hash_ids": []}]
    huge[0]["hash_ids"] = list(range(-(-huge[0]["input_length"] // 512)))  # type: ignore[arg-type]
    with pytest.raises(ScenarioError) as err:
        _trace_scenario(tmp_path, _trace(tmp_path, huge)).workload.scan()
    assert "input_length" in str(err.value)
    endless = tmp_path / "endless.jsonl"
    endless.write_bytes(b"[" + b"1," * (3 * 2**20))
    with pytest.raises(ScenarioError) as err:
        _trace_scenario(tmp_path, endless).workload.scan()
    assert "line 1" in str(err.value) and "longer than" in str(err.value)


def test_set_reads_exponent_numbers_as_numbers() -> None:
    from sim.core.documents import parse_override

    assert parse_override("storage.read_gbps=1e9") == ("storage.read_gbps", 1e9)
    assert parse_override("prefetch.timeout_base_s=2.5E-1") == ("prefetch.timeout_base_s", 0.25)
    assert parse_override("name=run1e9x") == ("name", "run1e9x")
    scenario = build_scenario(make_doc(), "<t>")
    doc = make_doc()
    key, value = parse_override("storage.read_gbps=1e3")
    doc["storage"][key.split(".")[1]] = value
    assert build_scenario(doc, "<t>").storage.read_gbps == 1000.0 != scenario.storage.read_gbps


def test_a_sweep_too_large_to_plan_is_refused_at_once(tmp_path: Path) -> None:
    import yaml

    doc = make_doc()
    doc["sweep"] = {"seeds": 1, "grid": {"storage.read_gbps": list(range(1, 1001))}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    started = time.perf_counter()
    result = invoke("sweep", str(path), "--seeds", "1000", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "1,000,000 runs" in result.output
    assert time.perf_counter() - started < 10
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("timeseries.parquet", b"not parquet"),
        ("storage_trace.parquet", b"PAR1 junk"),
        ("timeseries.parquet", b"PAR1" + b"\0" * 16 + b"PAR1"),
        ("storage_trace.parquet", b"PAR1" + b"\0" * 16 + b"PAR1"),
        ("instances.parquet", b"PAR1" + b"\0" * 16 + b"PAR1"),
        ("config.resolved.yaml", b"- a list\n- not a mapping\n"),
        ("config.resolved.yaml", b"name: !!python/object:os.system {}\n"),
    ],
    ids=[
        "junk-timeseries",
        "junk-storage-trace",
        "footerless-timeseries",
        "footerless-storage-trace",
        "footerless-instances",
        "config-as-list",
        "python-tag",
    ],
)
def test_crafted_run_directories_are_bad_input_for_every_reader(
    traced_run: Path, tmp_path: Path, name: str, content: bytes
) -> None:
    import shutil

    crafted = tmp_path / "run"
    shutil.copytree(traced_run, crafted)
    (crafted / name).write_bytes(content)
    codes = []
    for args in (
        ["plot", str(crafted)],
        ["report", str(crafted)],
        ["export-trace", str(crafted), "--pool", "kv"],
    ):
        result = invoke(*args)
        assert result.exit_code in (0, 2), (args, result.output)
        assert "Traceback" not in result.output
        codes.append(result.exit_code)
    assert 2 in codes, "a reader that needs the damaged file says so"


def test_a_sweep_resumes_over_junk_task_files(tmp_path: Path) -> None:
    import yaml

    doc = make_doc(duration_s=10, **{"workload.requests": 10})
    doc["sweep"] = {"seeds": 2, "grid": {"heal": ["none", "keep_pages"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "sweep"
    args = ["sweep", str(path), "--executor", "serial", "--out", str(out)]
    assert invoke(*args).exit_code == 0
    tasks = sorted((out / "tasks").glob("*.json"))
    for task, junk in zip(tasks, ["[1]", "{}", "not json", '{"error": null}'], strict=True):
        task.write_text(junk)
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "4 computed" in result.output


def test_long_and_non_utf8_out_names_and_two_merge_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(make_doc(duration_s=10, **{"workload.requests": 10}))
    )
    long_ok = invoke("run", "s.yaml", "--out", "a" * 250)
    assert long_ok.exit_code == 0, long_ok.output
    too_long = invoke("run", "s.yaml", "--out", "b" * 300)
    assert too_long.exit_code == 2 and "at most 255 bytes" in too_long.output
    bad = os.fsdecode(b"bad\xffname")
    not_utf8 = invoke("run", "s.yaml", "--out", bad)
    assert not_utf8.exit_code == 2 and "not a valid UTF-8 path" in not_utf8.output
    assert sorted(os.listdir(tmp_path)) == ["a" * 250, "s.yaml"]
    (tmp_path / "m.yaml").write_text("a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n")
    merged = invoke("validate", "m.yaml")
    assert merged.exit_code == 2 and "c.<<: two merge keys in one mapping" in merged.output


def test_a_sweep_never_writes_into_another_scenario_s_directory_or_beside_another_writer(
    tmp_path: Path,
) -> None:
    import fcntl

    import yaml

    def sweep_file(name: str) -> Path:
        doc = make_doc(name=name, duration_s=10, **{"workload.requests": 10})
        doc["sweep"] = {"seeds": 2, "grid": {"heal": ["none"]}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    first, second = sweep_file("first"), sweep_file("second")
    out = tmp_path / "out"
    assert invoke("sweep", str(first), "--executor", "serial", "--out", str(out)).exit_code == 0
    before = sorted(p.name for p in out.iterdir())
    other = invoke("sweep", str(second), "--executor", "serial", "--out", str(out))
    assert other.exit_code == 2 and "holds a sweep of scenario 'first'" in other.output
    assert sorted(p.name for p in out.iterdir()) == before
    run_dir = tmp_path / "a_run"
    assert invoke("run", str(first), "--out", str(run_dir)).exit_code == 0
    into_run = invoke("sweep", str(first), "--executor", "serial", "--out", str(run_dir))
    assert into_run.exit_code == 2 and "not a sweep directory" in into_run.output
    with (tmp_path / ".busy.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = invoke("sweep", str(first), "--executor", "serial", "--out", str(tmp_path / "busy"))
    assert busy.exit_code == 2 and "another sweep is writing" in busy.output
    assert not (tmp_path / "busy").exists()


def test_the_horizon_is_bounded_so_exported_timestamps_stay_exact() -> None:
    with pytest.raises(ScenarioError) as err:
        build_scenario(make_doc(duration_s=1e13), "<t>")
    assert err.value.key == "duration_s"
    assert build_scenario(make_doc(duration_s=1e9), "<t>").duration_s == 1e9


def test_an_interrupted_capacity_search_says_where_its_runs_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from sim.studies.capacity import CapacitySearch

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(CapacitySearch, "bisect", interrupted)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(make_doc()))
    out = tmp_path / "cap"
    result = invoke(
        "capacity", str(path), "--param", "storage.pools.swa.capacity_gb",
        "--target", "l3_loaded_rate>=0.1", "--range", "0.1", "1", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 130
    assert "no partial result directory" not in result.output
    assert f"--out {out}" in result.output and "kept in" in result.output


def test_a_trace_length_of_thousands_of_digits_is_bad_input(tmp_path: Path) -> None:
    """Found by the trace fuzzer: the bound's message once formatted the huge number, which
    Python refuses past 4,300 digits (exit 1)."""
    path = tmp_path / "trace.jsonl"
    path.write_text(
        f'{{"timestamp": 0, "input_length": {"9" * 4200}, "output_length": 1, "hash_ids": [0]}}\n'
    )
    with pytest.raises(ScenarioError) as err:
        _trace_scenario(tmp_path, path).workload.scan()
    assert "input_length" in str(err.value)
