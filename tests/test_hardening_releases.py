"""Hostile and newcomer input on the release, compute, target and generator surfaces: each ends
in a clear error (exit 2, the file and key named, nothing written) or the right answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.outputs.overload import overload_reasons
from tests.conftest import invoke, make_doc, ok
from tests.test_deployments import deployment_doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("prefetch.heal_after_deadline", 1.0),
        ("prefetch.retry.short_spans", "yes"),
        ("prefetch.retry.deadline_cancels", 0),
        ("prefetch.retry.head_exempt", "false"),
        ("storage.write_dedup", 1),
        ("storage.failed_put_torn", "no"),
    ],
)
def test_a_boolean_key_takes_true_or_false_only(tmp_path: Path, key: str, value: Any) -> None:
    path = _write(tmp_path / "s.yaml", make_doc(**{key: value}))
    told = invoke("validate", str(path))
    assert told.exit_code == 2
    assert f"{path}: {key}: must be true or false (got {value!r}" in told.output


def test_every_key_a_release_lacks_is_told_as_a_what_if(tmp_path: Path) -> None:
    """0.5.18 has no retries at all: a key only later releases set is the scenario's own, and
    `validate` and the resolved configuration say so as for a key that differs."""
    doc = deployment_doc(
        **{
            "server.sglang": "0.5.18",
            "prefetch.retry.max_attempts": 4,
            "prefetch.retry.deadline_cancels": True,
            "prefetch.retry.short_spans": True,
        }
    )
    told = ok(invoke("validate", str(_write(tmp_path / "s.yaml", doc))))
    notes = [line for line in told.output.splitlines() if line.startswith("note: prefetch.")]
    assert "note: prefetch.retry.max_attempts = 4 is the scenario's own; sglang 0.5.18 has 0" in (
        notes
    )
    for key in ("deadline_cancels", "short_spans"):
        assert (
            f"note: prefetch.retry.{key} = true is the scenario's own; sglang 0.5.18 has no such "
            "setting (the releases from 0.5.19 on set it)"
        ) in notes
    ok(invoke("validate", str(_write(tmp_path / "t.yaml", deployment_doc()))))
    quiet = ok(invoke("validate", str(_write(tmp_path / "u.yaml", {**doc, "server": {}}))))
    assert "no such setting" not in quiet.output


@pytest.mark.parametrize("value", [1e308, 1e7])
def test_decode_speed_is_bounded_as_prefill_is(tmp_path: Path, value: float) -> None:
    path = _write(tmp_path / "s.yaml", make_doc(**{"compute.decode_ms_per_token": value}))
    told = invoke("validate", str(path))
    assert told.exit_code == 2 and f"{path}: compute.decode_ms_per_token" in told.output
    assert "less than or equal to 1000000" in told.output


def test_a_decode_bound_run_is_told_to_change_the_decode_speed() -> None:
    from sim.outputs.overload import fix_for

    summary = {"requests": 1000, "requests_unfinished": 50, "prompt_tokens": 10, "ttft_p50_s": 0.1}
    reasons = overload_reasons(summary, prefill_tokens_per_s=1000.0, window_s=600.0)
    assert len(reasons) == 1 and "decode steps of the running batch" in reasons[0]
    assert "compute.decode_step_ms" in reasons[0] and "compute.decode_step_ms" in fix_for(reasons)
    assert "compute.prefill_tokens_per_s" not in fix_for(reasons)
    queued = overload_reasons({**summary, "ttft_p50_s": 30.0}, 1000.0, 600.0)
    assert "compute.prefill_tokens_per_s" in fix_for(queued)


TP_LOAD = {
    "duration_s": 40,
    "warmup_s": 0,
    "workload.requests": 800,
    "workload.prefixes": 800,
    "workload.arrival_rate_per_s": 60,
    "workload.prefix_tokens": 4000,
}
"""58,000 prompt tokens/s to prefill: over tp 1's roofline of gpt-oss-120b on an h200 (35,186),
well under tp 8's (281,487)."""


def test_each_point_is_judged_by_its_own_prefill_rate(tmp_path: Path) -> None:
    """tp 8 re-derives the prefill rate; judged against tp 1's, its healthy run was called
    overloaded by the sweep's warning and by capacity.json."""
    doc = deployment_doc(**TP_LOAD)
    doc["sweep"] = {"grid": {"server.tp_size": [1, 8]}, "seeds": 1}
    path = _write(tmp_path / "s.yaml", doc)
    told = ok(invoke("sweep", str(path), "--executor", "serial", "--out", str(tmp_path / "s")))
    assert "1 of 2 runs of this sweep were overloaded (first at server.tp_size=1" in told.stderr
    record = json.loads(next((tmp_path / "s" / "tasks").glob("*.json")).read_text())
    assert set(record["resolved"]) >= {"compute.prefill_tokens_per_s", "duration_s"}
    ok(
        invoke(
            "capacity", str(path), "--param", "server.tp_size", "--target", "requests>=1",
            "--values", "8", "--seeds", "2", "--executor", "serial", "--out", str(tmp_path / "c"),
        )
    )  # fmt: skip
    saved = json.loads((tmp_path / "c" / "capacity.json").read_text())
    assert saved["answer"] == 8 and saved["overloaded"] is None


def test_a_plan_answer_at_tp_8_is_not_judged_by_tp_1s_prefill_rate(tmp_path: Path) -> None:
    doc = deployment_doc(**TP_LOAD)
    doc["storage"] = {"pools": {"kv": {"capacity_gb": 1.0}, "swa": {"capacity_gb": 0.1}}}
    doc["costs"] = {"gpu_hour_usd": {"h200": 3.0}, "storage_gb_month_usd": {"kv": 1, "swa": 1}}
    told = ok(
        invoke(
            "plan", str(_write(tmp_path / "p.yaml", doc)), "--axis", "server.tp_size=1,8",
            "--target", "ttft_p50_s<=1", "--seeds", "2", "--executor", "serial",
            "--out", str(tmp_path / "p"),
        )
    )  # fmt: skip
    saved = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert saved["answer"]["values"] == {"server.tp_size": 8} and saved["overloaded"] is None
    assert "2 of 4 runs of this plan were overloaded (first at server.tp_size=1" in told.stderr


def test_run_warns_as_validate_does_when_the_horizon_ends_before_the_trace(
    tmp_path: Path,
) -> None:
    records = [
        {"timestamp": ms, "input_length": 512, "output_length": 4, "hash_ids": [1]}
        for ms in (0, 1000, 90_000)
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    doc = make_doc(
        duration_s=60,
        warmup_s=0,
        workload={"kind": "mooncake", "path": str(trace), "block_tokens": 512},
    )
    path = _write(tmp_path / "s.yaml", doc)
    said = "warning: duration_s 60 ends before the trace: 1 of its 3 requests arrive after it"
    assert said in ok(invoke("validate", str(path))).stderr
    assert said in ok(invoke("run", str(path), "--out", str(tmp_path / "r"))).stderr
    compared = ok(
        invoke("compare", str(path), "--heal", "none,per_pool", "--out", str(tmp_path / "c"))
    )
    assert compared.stderr.count(said) == 1
    longer = ok(
        invoke("compare", str(path), "--vary", "duration_s=60,100", "--out", str(tmp_path / "v"))
    )
    assert longer.stderr.count(said) == 1 and "duration_s 100 ends" not in longer.stderr


def _capacity(scenario: Path, out: Path, target: str, *more: str) -> Any:
    return invoke(
        "capacity", str(scenario), "--param", "device.swa_pages", "--target", target,
        "--values", "400,800", "--seeds", "2", "--executor", "serial", "--out", str(out), *more,
    )  # fmt: skip


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    from tests.conftest import TINY_SWEEP

    return _write(tmp_path / "tiny.yaml", make_doc(**TINY_SWEEP))


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("l3_loaded_rate>=95@1000", "for 95 % write l3_loaded_rate>=95%@1000"),
        ("l3_loaded_rate=>95%@1000", "must look like METRIC>=VALUE"),
        ("l3_loaded_rate>=95%@", "names no reference point"),
        ("l3_loaded_rate>=95%@unbounded", "device.swa_pages=unbounded (null) is refused"),
        ("l3_loaded_rate>=400%@1000", "is never met; ask a smaller share"),
    ],
)
def test_a_refused_relative_target_is_one_clear_error_and_leaves_nothing(
    tiny: Path, target: str, said: str
) -> None:
    """The last is refused only once its reference is measured (4 x a rate of 0.37)."""
    out = tiny.parent / "c"
    told = _capacity(tiny, out, target)
    assert told.exit_code == 2 and said in told.output, told.output
    assert "only `hicache-sim capacity --target` runs" not in told.output
    assert len([line for line in told.output.splitlines() if "--target" in line]) == 1
    assert not out.exists(), list(out.rglob("*"))


def test_a_relative_target_within_range_still_searches(tiny: Path) -> None:
    told = ok(_capacity(tiny, tiny.parent / "c", "l3_loaded_rate>=90%@1000"))
    assert "so l3_loaded_rate>=90%@1000 is l3_loaded_rate>=0.32" in told.output
    assert (tiny.parent / "c" / "capacity.json").is_file()


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("sweep.target=foo>=1", "sweep.target: unknown metric 'foo'"),
        ("sweep.target=l3_loaded_rate>=95", "sweep.target: 'l3_loaded_rate>=95'"),
        ('sweep.grid={"nope": [1]}', "sweep.grid.nope: unknown key"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_sweep_key_set_on_the_command_line_is_told_under_set(
    tiny: Path, setting: str, key: str, command: str
) -> None:
    doc = yaml.safe_load(tiny.read_text())
    doc["sweep"] = {"grid": {"device.swa_pages": [400, 800]}}
    _write(tiny, doc)
    more = ["--out", str(tiny.parent / "s")] if command == "sweep" else []
    told = invoke(command, str(tiny), "--set", setting, *more)
    assert told.exit_code == 2 and f"--set: {key}" in told.output, told.output
    assert str(tiny) not in told.output
    assert not (tiny.parent / "s").exists()


def _table(*pages: Path) -> Any:
    import subprocess
    import sys

    from tests.conftest import REPO

    return subprocess.run(
        [sys.executable, "-m", "sim.deployment.table", *map(str, pages)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


MARKED = (
    "# page\n<!-- releases table: start -->\nSTALE ROWS\n<!-- releases table: end -->\ntail kept\n"
)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a folder"),
        (lambda p: p.write_bytes(b"\xff\xfe<!-- releases table: start -->"), "is not UTF-8 text"),
        (lambda p: p.write_text("# no markers\n"), "holds none of the table markers"),
        (
            lambda p: p.write_text("a\n<!-- releases table: start -->\nSTALE ROWS\nthe rest\n"),
            "has no '<!-- releases table: end -->'",
        ),
        (
            lambda p: p.write_text(
                MARKED.replace("start", "x").replace("end", "start").replace("x", "end")
            ),
            "end marker comes before its start marker",
        ),
        (lambda p: p.write_text(MARKED + MARKED), "appear more than once"),
    ],
    ids=["missing", "folder", "not-utf8", "no-markers", "no-end", "reversed", "twice"],
)
def test_the_table_writer_refuses_a_page_it_would_mangle(
    tmp_path: Path, make: Any, said: str
) -> None:
    page = tmp_path / "page.md"
    make(page)
    before = page.read_bytes() if page.is_file() else None
    good = tmp_path / "good.md"
    good.write_text(MARKED)
    done = _table(good, page)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and f"{page}:" in done.stderr
    assert good.read_text() == MARKED, "a page was written before every page was checked"
    assert (page.read_bytes() if page.is_file() else None) == before


def test_the_table_writer_never_writes_through_a_link_and_replaces_a_page_whole(
    tmp_path: Path,
) -> None:
    target = tmp_path / "target.md"
    target.write_text(MARKED)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    done = _table(link)
    assert done.returncode == 2 and "symbolic link" in done.stderr
    assert target.read_text() == MARKED
    page = tmp_path / "page.md"
    page.write_text(MARKED)
    page.chmod(0o640)
    inode = page.stat().st_ino
    assert _table(page).returncode == 0
    text = page.read_text()
    assert (
        "| `prefetch.policy` |" in text
        and text.endswith("tail kept\n")
        and "STALE ROWS" not in text
    )
    assert page.stat().st_ino != inode and page.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_real_sglang_venv_is_stale_when_any_pin_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.real_sglang import install

    for name in install.VENV_INPUTS:
        (tmp_path / name).write_text((install.HERE / name).read_text())
    monkeypatch.setattr(install, "HERE", tmp_path)
    stamp = tmp_path / ".installed"
    assert install.main(["venv", str(stamp)]) == 0
    assert install._state(stamp, install.venv_stamp(), write=False) == "stale"
    install._state(stamp, install.venv_stamp(), write=True)
    assert install._state(stamp, install.venv_stamp(), write=False) == "fresh"
    for name in install.VENV_INPUTS:
        before = (tmp_path / name).read_text()
        (tmp_path / name).write_text(before.replace("==", "==9", 1))
        assert install._state(stamp, install.venv_stamp(), write=False) == "stale", name
        (tmp_path / name).write_text(before)
    wheel = "x/sglang-0.5.19-py3-none-any.whl"
    install._state(stamp, install.release_stamp("0.5.19", wheel), write=True)
    assert install._state(stamp, install.release_stamp("0.5.19", wheel), False) == "fresh"
    monkeypatch.setitem(install.RELEASE_PINS, "0.5.19", ("xgrammar==9.9",))
    assert install._state(stamp, install.release_stamp("0.5.19", wheel), False) == "stale"
    other = wheel.replace("py3", "cp311")
    assert install._state(stamp, install.release_stamp("0.5.19", other), False) == "stale"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--releases", "0.5.99"], "--releases: no case runs on '0.5.99'"),
        (["-k", "no-such-case"], "-k 'no-such-case' selects no case"),
        (["--releases", "0.5.23", "-k", "no-such-case"], "selects no case of 0.5.23"),
    ],
)
def test_the_real_sglang_tier_refuses_a_selection_of_nothing_before_installing(
    args: list[str], said: str
) -> None:
    import subprocess

    from tests.conftest import REPO
    from tests.real_sglang.__main__ import main

    assert main(args) == 2
    done = subprocess.run(
        ["bash", str(REPO / "tests" / "real_sglang" / "run.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "passed" not in done.stdout
