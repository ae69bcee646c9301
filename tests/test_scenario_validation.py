"""Scenario validation and the CLI's bad-input contract (docs/scenarios.md).

Every malformed scenario must raise a `ScenarioError` that names the offending dotted key, and
through the CLI must exit 2 with a message on stderr naming the file and the key, print no
traceback, and write nothing: neither the `--out` directory nor a `results/` directory in the
current directory (nor a leftover staging directory beside `--out`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from sim.cli import cli
from sim.scenario.loading import ScenarioError, check_references, load_scenario, parse_override
from tests.conftest import REPO, make_doc

SCENARIO_FILE = "scenario.yaml"


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def doc_text(**overrides: Any) -> str:
    return dump(make_doc(**overrides))


def doc_without(*dotted: str) -> str:
    doc = make_doc()
    for key in dotted:
        *parents, leaf = key.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[leaf]
    return dump(doc)


def mooncake_text(path: str, **overrides: Any) -> str:
    doc = make_doc(workload={"kind": "mooncake", "path": path, "block_tokens": 512})
    for key, value in overrides.items():
        doc["workload"][key] = value
    return dump(doc)


# (id, YAML text, dotted key the error must name, further text the message must contain)
BAD_SCENARIOS: list[tuple[str, str, str | None, tuple[str, ...]]] = [
    ("unknown-top-level", doc_text(bogus=1), "bogus", ("unknown key",)),
    (
        "unknown-in-storage-pool",
        doc_text(**{"storage.pools.swa.bogus": 1}),
        "storage.pools.swa.bogus",
        ("unknown key",),
    ),
    ("unknown-in-model-kv", doc_text(**{"model.kv.extra": 3}), "model.kv.extra", ()),
    ("unknown-in-workload", doc_text(**{"workload.bogus": 1}), "workload.bogus", ()),
    ("seed-not-int", doc_text(seed="abc"), "seed", ()),
    ("seed-negative", doc_text(seed=-1), "seed", ()),
    ("kv-pages-fractional", doc_text(**{"device.kv_pages": 1.5}), "device.kv_pages", ()),
    (
        "negative-capacity",
        doc_text(**{"storage.pools.swa.capacity_gb": -1}),
        "storage.pools.swa.capacity_gb",
        (),
    ),
    (
        "put-fail-prob-above-one",
        doc_text(**{"storage.pools.swa.put_fail_prob": 1.5}),
        "storage.pools.swa.put_fail_prob",
        (),
    ),
    (
        "get-fail-prob-negative",
        doc_text(**{"storage.pools.kv.get_fail_prob": -0.1}),
        "storage.pools.kv.get_fail_prob",
        (),
    ),
    (
        "storage-pool-model-lacks",
        doc_text(**{"storage.pools.mamba": {"capacity_gb": 1}}),
        "storage.pools.mamba",
        ("mamba",),
    ),
    ("unknown-storage-pool-name", doc_text(**{"storage.pools.foo": {}}), "storage.pools.foo", ()),
    (
        "device-slot-model-lacks",
        doc_text(**{"device.mamba_slots": 16}),
        "device.mamba_slots",
        ("mamba",),
    ),
    ("missing-swa-pages", doc_without("device.swa_pages"), "device.swa_pages", ("swa",)),
    ("missing-model", doc_without("model"), "model", ("missing",)),
    ("missing-workload-kind", doc_without("workload.kind"), "workload", ()),
    ("bad-heal-enum", doc_text(heal="sometimes"), "heal", ("keep_pages",)),
    ("bad-hit-query-enum", doc_text(**{"storage.hit_query": "foo"}), "storage.hit_query", ()),
    ("bad-host-mode", doc_text(**{"host.mode": "x"}), "host.mode", ()),
    ("bad-workload-kind", doc_text(**{"workload.kind": "bogus"}), "workload", ("bogus",)),
    ("storage-not-mapping", doc_text(storage=5), "storage", ()),
    ("bad-name", doc_text(name="has spaces"), "name", ()),
    ("duration-inf", doc_text(duration_s=float("inf")), "duration_s", ()),
    ("duration-nan", doc_text(duration_s=float("nan")), "duration_s", ()),
    ("warmup-equals-duration", doc_text(warmup_s=120, duration_s=120), "warmup_s", ()),
    (
        "window-beyond-bound",
        doc_text(**{"model.swa.window_tokens": 2**24 + 1}),
        "model.swa.window_tokens",
        ("16777216",),
    ),
    ("warmup-above-duration", doc_text(warmup_s=200, duration_s=120), "warmup_s", ()),
    (
        "outage-reversed",
        doc_text(**{"storage.pools.swa.put_outage_s": [5, 1]}),
        "storage.pools.swa",
        ("put_outage_s",),
    ),
    (
        "block-tokens-not-page-multiple",
        mooncake_text("trace.jsonl", block_tokens=100),
        "workload.block_tokens",
        ("page_size",),
    ),
    ("mooncake-without-path", doc_text(workload={"kind": "mooncake"}), "workload.path", ()),
    (
        "sweep-sweeps-itself",
        doc_text(sweep={"grid": {"sweep.seeds": [1, 2]}}),
        "sweep.grid.sweep.seeds",
        (),
    ),
    ("duplicate-top-level-key", "name: a\nname: b\n", "name", ("duplicate", "line 2")),
    (
        # the nested duplicate must be named by its dotted key, like every other error
        "duplicate-nested-key",
        "name: a\nstorage:\n  hit_query: intersect\n  hit_query: kv_only\n",
        "storage.hit_query",
        ("duplicate",),
    ),
]

# Files that fail before there is any key: the message names the file and the reason.
BAD_FILES: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    ("empty-file", "", ("empty",)),
    ("comment-only-file", "# nothing here\n", ("empty",)),
    ("list-root", "- name: a\n- name: b\n", ("mapping", "list")),
    ("scalar-root", "just a string\n", ("mapping", "str")),
    ("python-object-tag", "!!python/object:builtins.dict\nname: x\n", ("python/object",)),
    (
        "python-apply-tag-on-value",
        "name: x\nseed: !!python/object/apply:os.system ['echo pwned']\n",
        ("python/object/apply", "line 2", "seed"),
    ),
    ("yaml-syntax", "name: [unclosed\n", ("not valid YAML",)),
    ("not-utf8", b"name: caf\xe9\n", ("cannot read",)),
]


def write_scenario(directory: Path, text: str | bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / SCENARIO_FILE
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def invoke_in(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> tuple[Result, list[str]]:
    """Run the CLI with `workdir` as the current directory; also list what it holds after."""
    monkeypatch.chdir(workdir)
    result = CliRunner().invoke(cli, args)
    return result, sorted(os.listdir(workdir))


def assert_bad_input(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr + result.output
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def run_bad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | bytes, *extra: str
) -> tuple[Result, Path]:
    """`run` a scenario from a fresh working directory; assert that nothing was written."""
    workdir = tmp_path / "work"
    write_scenario(workdir, text)
    out = tmp_path / "out"
    result, left = invoke_in(
        workdir, monkeypatch, ["run", SCENARIO_FILE, "--out", str(out), *extra]
    )
    assert not out.exists(), "a failed run must not create --out"
    assert left == [SCENARIO_FILE], f"the failed run wrote into the cwd: {left}"
    assert sorted(os.listdir(tmp_path)) == ["work"], "staging directory left beside --out"
    return result, workdir


def _load_and_check(path: Path) -> None:
    scenario = load_scenario(path)
    check_references(scenario, str(path))


# --- the Python API ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "extra"),
    [pytest.param(t, k, e, id=i) for i, t, k, e in BAD_SCENARIOS],
)
def test_load_scenario_names_the_key(tmp_path: Path, text: str, key: str, extra: tuple[str, ...]):
    path = write_scenario(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        _load_and_check(path)
    err = info.value
    assert err.source == str(path)
    assert err.key is not None and (err.key == key or err.key.startswith(key + ".")), err.key
    assert str(err).startswith(f"{path}: {err.key}: ")
    for needle in extra:
        assert needle in str(err)


@pytest.mark.parametrize(("text", "extra"), [pytest.param(t, e, id=i) for i, t, e in BAD_FILES])
def test_load_scenario_bad_file(tmp_path: Path, text: str | bytes, extra: tuple[str, ...]):
    path = write_scenario(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}: ")
    for needle in extra:
        assert needle in str(info.value)


def test_missing_trace_file_names_workload_path(tmp_path: Path):
    path = write_scenario(tmp_path, mooncake_text("no_such_trace.jsonl"))
    scenario = load_scenario(path)  # the schema alone cannot know the file is missing
    with pytest.raises(ScenarioError) as info:
        check_references(scenario, str(path))
    assert info.value.key == "workload.path"
    assert "no_such_trace.jsonl" in str(info.value)


def test_missing_scenario_file(tmp_path: Path):
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value)


def test_valid_base_scenario_loads(tmp_path: Path):
    """The control case: the unmodified helper document is valid, so the failures above are
    caused by the one change each makes."""
    path = write_scenario(tmp_path, doc_text())
    scenario = load_scenario(path)
    assert scenario.heal == "keep_pages"
    assert scenario.model.pools == ("kv", "swa")


# --- the CLI: exit 2, names file and key, no traceback, nothing written --------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [pytest.param(t, k, id=i) for i, t, k, _ in BAD_SCENARIOS],
)
def test_cli_run_bad_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str):
    result, _ = run_bad(tmp_path, monkeypatch, text)
    assert_bad_input(result, SCENARIO_FILE, key)
    assert result.stdout == ""


@pytest.mark.parametrize(("text", "extra"), [pytest.param(t, e, id=i) for i, t, e in BAD_FILES])
def test_cli_run_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | bytes, extra: tuple[str, ...]
):
    result, _ = run_bad(tmp_path, monkeypatch, text)
    assert_bad_input(result, SCENARIO_FILE, *extra)


def test_cli_run_missing_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    result, _ = run_bad(tmp_path, monkeypatch, mooncake_text("no_such_trace.jsonl"))
    assert_bad_input(result, SCENARIO_FILE, "workload.path", "no_such_trace.jsonl")


def test_cli_run_missing_scenario_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    out = tmp_path / "out"
    result, left = invoke_in(workdir, monkeypatch, ["run", "nope.yaml", "--out", str(out)])
    assert_bad_input(result, "nope.yaml")
    assert left == []
    assert not out.exists()


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        pytest.param("noequals", ("--set", "noequals"), id="no-equals"),
        pytest.param("=5", ("--set", "=5"), id="empty-key"),
        pytest.param("heal=[unclosed", ("--set", "heal", "not valid YAML"), id="bad-yaml-value"),
        pytest.param("seed.inner=1", ("seed", "not a mapping"), id="through-a-scalar"),
        pytest.param("heal=sometimes", ("--set: heal",), id="bad-enum-value"),
        pytest.param("bogus.key=1", ("--set: bogus", "unknown key"), id="unknown-key"),
        pytest.param(
            "storage.pools.mamba.capacity_gb=1",
            ("--set: storage.pools.mamba",),
            id="pool-model-lacks",
        ),
        pytest.param("duration_s=.inf", ("--set: duration_s",), id="non-finite"),
    ],
)
def test_cli_run_bad_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str, needles: tuple[str, ...]
):
    result, _ = run_bad(tmp_path, monkeypatch, doc_text(), "--set", override)
    assert_bad_input(result, *needles)


def test_parse_override_syntax_errors_are_scenario_errors():
    for text in ("noequals", "=1", "  =1"):
        with pytest.raises(ScenarioError) as info:
            parse_override(text)
        assert info.value.source == "--set"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(doc_text(**{"storage.pools.swa.bogus": 1}), id="unknown-key"),
        pytest.param("", id="empty-file"),
    ],
)
def test_subprocess_bad_input_end_to_end(tmp_path: Path, text: str):
    """`python -m sim run` as a user runs it: exit 2, one-line error, nothing written."""
    workdir = tmp_path / "work"
    write_scenario(workdir, text)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "run", SCENARIO_FILE, "--out", str(out)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert SCENARIO_FILE in proc.stderr
    if text:
        assert "storage.pools.swa.bogus" in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()
    assert sorted(os.listdir(workdir)) == [SCENARIO_FILE]


# --- --set overrides that work -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "get", "expected"),
    [
        pytest.param("heal=none", lambda s: s.heal, "none", id="heal"),
        pytest.param("seed=42", lambda s: s.seed, 42, id="int"),
        pytest.param(
            "storage.pools.swa.put_fail_prob=0.25",
            lambda s: s.storage_pool("swa").put_fail_prob,
            0.25,
            id="float-at-depth",
        ),
        pytest.param(
            "storage.pools.swa.capacity_gb=200",
            lambda s: s.storage_pool("swa").capacity_gb,
            200.0,
            id="capacity",
        ),
        pytest.param(
            "storage.pools.swa.capacity_gb=null",
            lambda s: s.storage_pool("swa").capacity_gb,
            None,
            id="yaml-null",
        ),
        pytest.param(
            "storage.pools.swa.put_outage_s=[10, 20]",
            lambda s: s.storage_pool("swa").put_outage_s,
            (10.0, 20.0),
            id="flow-list",
        ),
        pytest.param(
            "existence_cache.entries=1000",
            lambda s: s.existence_cache.entries,
            1000,
            id="creates-missing-mapping",
        ),
        pytest.param("host={mode: cache, pages: 100}", lambda s: s.host.pages, 100, id="flow-map"),
        pytest.param("name=other-name", lambda s: s.name, "other-name", id="string"),
    ],
)
def test_set_override_values_are_yaml(
    tmp_path: Path, override: str, get: Callable[[Any], Any], expected: Any
):
    path = write_scenario(tmp_path, doc_text())
    before = path.read_text()
    scenario = load_scenario(path, [override])
    assert get(scenario) == expected
    assert path.read_text() == before, "an override must not touch the file"


def test_set_override_last_one_wins_and_dict_form(tmp_path: Path):
    path = write_scenario(tmp_path, doc_text())
    assert load_scenario(path, ["heal=none", "heal=exact"]).heal == "exact"
    assert load_scenario(path, {"heal": "drop_chain", "seed": 3}).seed == 3
    assert load_scenario(path).heal == "keep_pages"


def test_cli_validate_with_set_changes_heal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_scenario(tmp_path, doc_text())
    result, _ = invoke_in(tmp_path, monkeypatch, ["validate", SCENARIO_FILE, "--set", "heal=none"])
    assert result.exit_code == 0, result.stderr
    assert "heal=none" in result.stdout
    result, _ = invoke_in(tmp_path, monkeypatch, ["validate", SCENARIO_FILE])
    assert "heal=keep_pages" in result.stdout


def test_cli_run_with_set_writes_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text = doc_text(duration_s=30, **{"workload.requests": 20})
    workdir = tmp_path / "work"
    write_scenario(workdir, text)
    out = tmp_path / "out"
    args = ["run", SCENARIO_FILE, "--out", str(out), "--set", "heal=none", "--seed", "9"]
    result, _ = invoke_in(workdir, monkeypatch, args)
    assert result.exit_code == 0, result.stderr
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["heal"] == "none"
    assert resolved["seed"] == 9
    assert json.loads((out / "meta.json").read_text())["seed"] == 9


# --- relative paths: the YAML's against its folder, --set's against the current directory ----


def trace_text(requests: int) -> str:
    line = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}
    return "".join(json.dumps({**line, "timestamp": i}) + "\n" for i in range(requests))


@pytest.fixture
def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    """`scenarios/` holds the YAML (its path: trace.jsonl, 2 requests) and `work/` is the cwd;
    each folder has a trace.jsonl and an other.jsonl of its own, so a path resolved against the
    wrong folder reads a different request count."""
    scen, work = tmp_path / "scenarios", tmp_path / "work"
    for folder, base in ((scen, 2), (work, 5)):
        folder.mkdir()
        (folder / "trace.jsonl").write_text(trace_text(base), encoding="utf-8")
        (folder / "other.jsonl").write_text(trace_text(base + 1), encoding="utf-8")
    write_scenario(scen, mooncake_text("trace.jsonl"))
    return scen, work


def test_relative_yaml_path_is_relative_to_the_yaml_folder(
    two_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
):
    scen, work = two_folders
    monkeypatch.chdir(work)
    for overrides in (None, ["seed=3"], {"heal": "none"}):
        scenario = load_scenario(Path("..") / "scenarios" / SCENARIO_FILE, overrides)
        assert scenario.trace_path() == (scen / "trace.jsonl").resolve()
    result = CliRunner().invoke(cli, ["validate", f"../scenarios/{SCENARIO_FILE}"])
    assert result.exit_code == 0, result.stderr
    assert "(2 requests)" in result.stdout


@pytest.mark.parametrize(
    "override",
    [
        "workload.path=other.jsonl",
        "workload={kind: mooncake, path: other.jsonl, block_tokens: 512}",
        {"workload.path": "other.jsonl"},
    ],
    ids=["set-path", "set-mapping", "dict"],
)
def test_relative_set_path_is_relative_to_the_current_directory(
    two_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, override: Any
):
    scen, work = two_folders
    monkeypatch.chdir(work)
    overrides = override if isinstance(override, dict) else [override]
    scenario = load_scenario(scen / SCENARIO_FILE, overrides)
    assert scenario.trace_path() == work.resolve() / "other.jsonl"


def test_cli_set_relative_path_from_another_directory(
    two_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
):
    _, work = two_folders
    args = ["validate", f"../scenarios/{SCENARIO_FILE}", "--set", "workload.path=other.jsonl"]
    result, _ = invoke_in(work, monkeypatch, args)
    assert result.exit_code == 0, result.stderr
    assert "(6 requests)" in result.stdout  # work/other.jsonl, not scenarios/other.jsonl
    result, _ = invoke_in(work, monkeypatch, [*args[:-1], "workload.path=absent.jsonl"])
    assert_bad_input(result, "workload.path", str(work.resolve() / "absent.jsonl"))


def test_absolute_set_path_is_kept(two_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch):
    scen, work = two_folders
    monkeypatch.chdir(work)
    target = scen / "other.jsonl"
    scenario = load_scenario(scen / SCENARIO_FILE, [f"workload.path={target}"])
    assert scenario.trace_path() == target


# --- validate and schema -------------------------------------------------------------------------

SCENARIO_FILES = sorted(REPO.glob("scenarios/**/*.yaml"))


def test_scenarios_directory_is_not_empty():
    assert SCENARIO_FILES, "no scenarios/**/*.yaml found"


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(REPO))) for p in SCENARIO_FILES]
)
def test_validate_every_shipped_scenario(path: Path):
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "valid" in result.stdout
    made_up = [line for line in result.stderr.splitlines() if "made-up default" in line]
    assert result.stderr == "".join(f"{line}\n" for line in made_up)


def test_validate_bad_scenario_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_scenario(tmp_path, doc_text(**{"model.kv.extra": 1}))
    result, left = invoke_in(tmp_path, monkeypatch, ["validate", SCENARIO_FILE])
    assert_bad_input(result, SCENARIO_FILE, "model.kv.extra")
    assert left == [SCENARIO_FILE]


def test_validate_missing_trace_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_scenario(tmp_path, mooncake_text("absent.jsonl"))
    result, _ = invoke_in(tmp_path, monkeypatch, ["validate", SCENARIO_FILE])
    assert_bad_input(result, SCENARIO_FILE, "workload.path", "absent.jsonl")


def test_schema_is_json_with_storage():
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert "properties" in schema
    for key in ("storage", "model", "device", "workload", "heal"):
        assert key in schema["properties"], key
    assert set(schema.get("required", [])) >= {"name", "model", "device", "host", "workload"}
