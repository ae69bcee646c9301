"""`hicache-sim compare` over any key: `--vary KEY=A,B`, repeated `--variant LABEL:K=V;K=V`, and
`--heal A,B` as the shorthand it always was; the same seed for every variant, the label column,
safe run directories, the plot, and specs refused before anything runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import sim.results.compare
from sim.outputs.console import COMPARE_COLUMNS, format_table
from sim.outputs.plot_compare import plot_comparison
from sim.scenario.schema import ScenarioError
from sim.studies.variants import run_dir_names, split_outside_brackets, variant_set
from tests.conftest import RUN_FILES, invoke, is_png, make_doc, ok, read_summary


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny kv+swa scenario in a fresh working directory (the cwd for the test)."""
    work = tmp_path / "work"
    work.mkdir()
    path = work / "tiny.yaml"
    doc = make_doc(**{"workload.requests": 60, "duration_s": 60})
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    monkeypatch.chdir(work)
    return path


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a variant ran before every variant was checked")

    monkeypatch.setattr(sim.results.compare, "run", refuse)


def config(directory: Path) -> dict[str, Any]:
    return yaml.safe_load((directory / "config.resolved.yaml").read_text())


def test_vary_one_key(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    key = "storage.hit_query"
    result = ok(
        invoke("compare", str(tiny), "--vary", f"{key}=min_of_pools,intersect", "--out", str(out))
    )
    table = pd.read_csv(out / "comparison.csv")
    assert table.columns[0] == key, "the first column is named after the varied key"
    assert list(table[key]) == ["min_of_pools", "intersect"]
    for value in ("min_of_pools", "intersect"):
        assert set(os.listdir(out / value)) == RUN_FILES
        assert config(out / value)["storage"]["hit_query"] == value
        row = table[table[key] == value].iloc[0]
        assert row["prefetch_issued"] == read_summary(out / value)["prefetch_issued"]
    assert len({config(out / v)["seed"] for v in ("min_of_pools", "intersect")}) == 1
    assert is_png(out / "comparison.png")
    header = result.stdout.splitlines()[0].split()
    assert header[:2] == [key, "requests"], "the printed table starts with the key too"
    listing = json.loads((out / "variants.json").read_text())
    assert listing["column"] == key
    assert [v["set"] for v in listing["variants"]] == [{key: "min_of_pools"}, {key: "intersect"}]


def test_heal_is_a_shorthand_for_vary_heal(tiny: Path, tmp_path: Path):
    ok(invoke("compare", str(tiny), "--heal", "none,exact", "--out", str(tmp_path / "heal")))
    ok(invoke("compare", str(tiny), "--vary", "heal=none,exact", "--out", str(tmp_path / "vary")))
    heal, vary = (
        pd.read_csv(tmp_path / d / "comparison.csv").drop(columns=["wall_s"])
        for d in ("heal", "vary")
    )
    assert heal.columns[0] == "heal", "existing users' files keep their first column"
    pd.testing.assert_frame_equal(heal, vary)
    assert sorted(os.listdir(tmp_path / "heal")) == sorted(os.listdir(tmp_path / "vary"))


def test_without_an_option_compare_runs_none_and_keep_pages(tiny: Path, tmp_path: Path):
    ok(invoke("compare", str(tiny), "--out", str(tmp_path / "cmp")))
    table = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    assert list(table["heal"]) == ["none", "keep_pages"]


def test_variants_set_several_keys_each(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    ok(
        invoke(
            "compare",
            str(tiny),
            "--variant",
            "base:",
            "--variant",
            "fast:storage.read_gbps=40;storage.write_gbps=20",
            "--variant",
            "outage:storage.pools.swa.put_outage_s=[0, 60];heal=none",
            "--set",
            "storage.exists_latency_ms=1",
            "--seed",
            "5",
            "--out",
            str(out),
        )
    )
    table = pd.read_csv(out / "comparison.csv")
    assert table.columns[0] == "variant"
    assert list(table["variant"]) == ["base", "fast", "outage"]
    base, fast, outage = (config(out / d) for d in ("base", "fast", "outage"))
    assert (base["storage"]["read_gbps"], fast["storage"]["read_gbps"]) == (10.0, 40.0)
    assert fast["storage"]["write_gbps"] == 20.0
    assert outage["storage"]["pools"]["swa"]["put_outage_s"] == [0.0, 60.0]
    assert (base["heal"], outage["heal"]) == ("keep_pages", "none")
    assert {c["storage"]["exists_latency_ms"] for c in (base, fast, outage)} == {1.0}
    assert {c["seed"] for c in (base, fast, outage)} == {5}, "the same seed for every variant"


def test_any_label_makes_a_safe_run_directory(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    labels = ["../up", "a/b", "comparison.png", "A/B", ".hidden"]
    args = [arg for label in labels for arg in ("--variant", f"{label}:")]
    ok(invoke("compare", str(tiny), *args, "--out", str(out)))
    listing = json.loads((out / "variants.json").read_text())
    dirs = [v["dir"] for v in listing["variants"]]
    assert [v["label"] for v in listing["variants"]] == labels
    assert len({d.lower() for d in dirs}) == len(dirs)
    assert all(d and "/" not in d and not d.startswith(".") for d in dirs), dirs
    assert "comparison.png" not in dirs
    assert sorted(os.listdir(tmp_path)) == ["cmp", "work"], "nothing written outside --out"
    assert is_png(out / "comparison.png")
    for directory in dirs:
        assert set(os.listdir(out / directory)) == RUN_FILES
    assert list(pd.read_csv(out / "comparison.csv")["variant"]) == labels


def test_vary_values_that_do_not_survive_a_csv_keep_their_labels_in_the_plot(
    tiny: Path, tmp_path: Path
):
    out = tmp_path / "cmp"
    key = "storage.pools.swa.capacity_gb"
    ok(invoke("compare", str(tiny), "--vary", f"{key}=null,0.05", "--out", str(out)))
    listing = json.loads((out / "variants.json").read_text())
    assert [(v["label"], v["dir"]) for v in listing["variants"]] == [
        ("null", "null"),
        ("0.05", "0.05"),
    ]
    assert config(out / "null")["storage"]["pools"]["swa"]["capacity_gb"] is None
    assert config(out / "0.05")["storage"]["pools"]["swa"]["capacity_gb"] == 0.05
    (out / "comparison.png").unlink()
    redrawn = ok(invoke("plot", str(out)))
    assert is_png(out / "comparison.png") and "comparison.png" in redrawn.stdout


def test_plot_comparison_takes_the_label_column(tiny: Path, tmp_path: Path):
    out = tmp_path / "cmp"
    ok(
        invoke(
            "compare", str(tiny), "--vary", "storage.hit_query=intersect,kv_only", "--out", str(out)
        )
    )
    (out / "variants.json").unlink()  # as a directory written before variants.json existed
    (out / "comparison.png").unlink()
    assert plot_comparison(out, "storage.hit_query") == out / "comparison.png"
    assert is_png(out / "comparison.png")
    plot_comparison(out)  # the label column defaults to the first one
    assert is_png(out / "comparison.png")


def test_format_table_starts_with_the_label_column():
    row = {"variant": "fast", **dict.fromkeys(COMPARE_COLUMNS, 1)}
    text = format_table(pd.DataFrame([row]))
    assert text.splitlines()[0].split()[0] == "variant"
    assert text.splitlines()[1].split()[0] == "fast"


REFUSED = [
    (["--heal", "none,none"], ["--heal", "'none' is given twice"]),
    (["--heal", "none,sometimes"], ["--heal sometimes", "heal", "'keep_pages'"]),
    (["--heal", " , "], ["--heal", "no values"]),
    (["--heal", "none,,exact"], ["--heal", "empty value"]),
    (["--vary", "storage.hit_query=min_of_pools,bogus"], ["--vary storage.hit_query=bogus"]),
    (["--vary", "storage.hit_query"], ["--vary", "KEY=A,B"]),
    (["--vary", "storage.hit_query="], ["--vary", "no values"]),
    (["--vary", "storage.read_gbpz=1,2"], ["--vary", "storage.read_gbpz", "unknown key"]),
    (["--vary", "storage.read_gbps=1,1.0"], ["--vary", "1.0", "same value as '1'"]),
    (["--vary", "seed=1,2"], ["--vary", "same seed", "--seed"]),
    (["--vary", "heal=none", "--vary", "storage.hit_query=intersect"], ["--vary", "--variant"]),
    (["--heal", "none", "--vary", "storage.hit_query=intersect"], ["--vary", "--heal"]),
    (["--heal", "none", "--variant", "a:heal=exact"], ["--variant", "--heal"]),
    (["--variant", "heal=none"], ["--variant", "no label", "LABEL:KEY=VALUE"]),
    (["--variant", ":heal=none"], ["--variant", "empty label"]),
    (
        ["--variant", "a:heal=none", "--variant", "a:heal=exact"],
        ["--variant", "'a' is given twice"],
    ),
    (["--variant", "a:heal=none;heal=exact"], ["--variant a", "sets heal twice"]),
    (["--variant", "a:heal"], ["--variant a", "key=value"]),
    (["--variant", "a:seed=3"], ["--variant a", "same seed"]),
    (["--variant", "ok:", "--variant", "bad:storage.read_gbps=-1"], ["--variant bad", "read_gbps"]),
    (["--variant", "a:storage.pools.swa.put_outage_s=[0,60"], ["--variant a", "not valid YAML"]),
    (["--variant", "a:workload.path=missing.jsonl"], ["--variant a", "workload"]),
]


@pytest.mark.parametrize(("args", "fragments"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
@pytest.mark.usefixtures("no_runs")
def test_a_bad_variant_spec_exits_2_before_any_run_and_writes_nothing(
    tiny: Path, tmp_path: Path, args: list[str], fragments: list[str]
):
    result = invoke("compare", str(tiny), *args, "--out", str(tmp_path / "cmp"))
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr)
    message = result.stderr.strip()
    assert message.startswith("error: ") and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert sorted(os.listdir(tmp_path)) == ["work"]
    assert sorted(os.listdir(tiny.parent)) == ["tiny.yaml"]


def test_a_variant_replaying_another_trace_has_it_read_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    good = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}
    Path("good.jsonl").write_text(json.dumps(good) + "\n")
    Path("bad.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    doc = make_doc(workload={"kind": "mooncake", "path": "good.jsonl", "block_tokens": 512})
    Path("trace.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setattr(sim.results.compare, "run", lambda *a, **k: pytest.fail("a variant ran"))
    result = invoke("compare", "trace.yaml", "--vary", f"workload.path={tmp_path / 'bad.jsonl'}")
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "--vary workload.path=" in result.stderr and "line 2" in result.stderr
    assert not Path("results").exists()


def test_variant_set_parsing():
    found = variant_set(None, (), ())
    assert (found.option, found.column) == ("--heal", "heal")
    assert [v.label for v in found.variants] == ["none", "keep_pages"]
    found = variant_set(None, ("storage.pools.swa.put_outage_s=[0,60],null, [0, 120]",), ())
    assert found.column == "storage.pools.swa.put_outage_s"
    assert [v.label for v in found.variants] == ["[0, 60]", "null", "[0, 120]"]
    assert [v.values() for v in found.variants][1] == {"storage.pools.swa.put_outage_s": None}
    found = variant_set(None, (), ("q:workload.kind='a;b';heal=none",))
    assert found.variants[0].sets == ("workload.kind='a;b'", "heal=none")
    with pytest.raises(ScenarioError):
        variant_set("none", ("heal=exact",), ())


def test_split_outside_brackets():
    assert split_outside_brackets("a,[1,2],{x: 1, y: 2},'c,d'", ",") == [
        "a",
        "[1,2]",
        "{x: 1, y: 2}",
        "'c,d'",
    ]
    assert split_outside_brackets("", ",") == [""]


def test_run_dir_names_are_safe_and_unique():
    names = run_dir_names(
        ["none", "keep_pages", "a/b", "a_b", "..", "", "Comparison.csv", "x" * 200]
    )
    assert names[:2] == ["none", "keep_pages"], "heal rules keep their directory names"
    assert names[2:4] == ["a_b", "a_b-2"]
    assert names[4:6] == ["variant", "variant-2"], "a label with nothing safe in it"
    assert names[6] == "Comparison.csv-2", "not a file of the compare directory"
    assert len({n.lower() for n in names}) == len(names)
    assert all(not n.startswith(".") and "/" not in n and len(n) <= 90 for n in names)
    assert "comparison.csv" not in {n.lower() for n in names}
