"""`hicache-sim report`: one self-contained HTML page per result directory (run, compare, sweep,
capacity), built from tiny results; the page's images decode in a real headless Chromium."""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from sim.core.units import cell, metric_text, metric_unit
from sim.outputs.findings_capacity import capacity_findings
from sim.outputs.findings_compare import compare_findings
from sim.outputs.findings_run import run_findings
from sim.outputs.report import build_report
from sim.outputs.report_parts import header_comment
from tests.conftest import CONVERSATION_TRACE, PNG_MAGIC, invoke, make_doc, ok

CAP = "storage.pools.swa.capacity_gb"
TINY: dict[str, Any] = {
    "workload.requests": 80,
    "duration_s": 40,
    "workload.prefixes": 40,
    "device.kv_pages": 400,
    "device.swa_pages": 400,
    "host.pages": 800,
}
KINDS = ("run", "compare", "sweep", "capacity")
TABLES = {
    "run": {"deployment", "summary", "provenance"},
    "compare": {"deployment", "summary", "provenance"},
    "sweep": {"deployment", "grid", "summary", "provenance"},
    "capacity": {"deployment", "search", "evaluations", "at-answer"},
}
IMAGES = {"run": 1, "compare": 3, "sweep": 2, "capacity": 1}
"""A run's time series; the comparison and each of its two variants' time series; the sweep's
curves and loop CCDF (one numeric key: no heatmap); the capacity evidence."""


def write_scenario(path: Path, **extra: Any) -> Path:
    doc = make_doc(**TINY)
    doc.update(extra)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One finished result directory of each kind, made with the CLI."""
    root = tmp_path_factory.mktemp("results")
    scenario = write_scenario(root / "tiny.yaml")
    sweep = {"seeds": 2, "grid": {CAP: [0.05, 0.2], "heal": ["none", "keep_pages"]}}
    sweep_scenario = write_scenario(root / "sweep.yaml", sweep=sweep)
    trace_scenario = write_scenario(
        root / "trace.yaml",
        model={"preset": "gpt-oss-120b"},
        workload={"kind": "mooncake", "path": str(CONVERSATION_TRACE), "limit": 40},
    )
    out = {kind: root / kind for kind in KINDS}
    ok(invoke("run", str(scenario), "--out", str(out["run"])))
    ok(invoke("compare", str(scenario), "--heal", "none,keep_pages", "--out", str(out["compare"])))
    ok(invoke("sweep", str(sweep_scenario), "--executor", "serial", "--out", str(out["sweep"])))
    ok(
        invoke(
            "capacity",
            str(trace_scenario),
            "--param",
            CAP,
            "--target",
            "ttft_p99_s<=1000",
            "--values",
            "0.02,0.2",
            "--seeds",
            "2",
            "--executor",
            "serial",
            "--out",
            str(out["capacity"]),
        )
    )
    return out


@pytest.fixture
def copy_of(results: dict[str, Path], tmp_path: Path):
    """A private copy of a result directory, so a test may write into it."""

    def copy(kind: str) -> Path:
        target = tmp_path / kind
        shutil.copytree(results[kind], target, symlinks=True)
        return target

    return copy


class Page(HTMLParser):
    """What the tests need of a page: images, tables, scripts, links, and body attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.tables: list[str] = []
        self.sources: list[str] = []
        self.hrefs: list[str] = []
        self.body: dict[str, str] = {}
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.images.append(values)
        if tag == "table":
            self.tables.append(values.get("id", ""))
        if tag == "body":
            self.body = values
        if "src" in values:
            self.sources.append(values["src"])
        if "href" in values:
            self.hrefs.append(values["href"])


def report_of(directory: Path, *args: str) -> str:
    ok(invoke("report", str(directory), *args))
    return (directory / "report.html").read_text(encoding="utf-8")


def assert_self_contained(text: str) -> None:
    lower = text.lower()
    assert "http:" not in lower and "https:" not in lower, "no network address anywhere"
    assert "<link" not in lower and "url(" not in lower, "no stylesheet or CSS resource to fetch"
    page = Page(text)
    assert page.sources, "images are there"
    assert all(src.startswith("data:") for src in page.sources), page.sources[:3]
    assert all(href.startswith("#") for href in page.hrefs), page.hrefs
    for match in re.finditer(r"src\s*=\s*[\"']?([^\"'\s>]*)", text, re.IGNORECASE):
        assert match.group(1).startswith("data:"), match.group(0)[:80]


# --- each kind ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_report_of_each_kind_is_one_self_contained_page(kind: str, copy_of) -> None:
    directory = copy_of(kind)
    before = set(os.listdir(directory))
    result = ok(invoke("report", str(directory)))
    target = directory / "report.html"
    assert f"wrote {target}" in result.stdout
    assert set(os.listdir(directory)) == before | {"report.html"}, "only the page is written"
    text = target.read_text(encoding="utf-8")
    assert_self_contained(text)
    page = Page(text)
    assert set(page.tables) == TABLES[kind]
    assert len(page.images) == IMAGES[kind]
    for image in page.images:
        data = base64.b64decode(image["src"].removeprefix("data:image/png;base64,"))
        assert data.startswith(PNG_MAGIC)
        assert image["alt"]
    for section in ("scenario", "findings", "plots", "summary"):
        assert f'<section id="{section}">' in text, section
    assert "<details><summary>" in text, "the configuration or provenance, collapsed"


def test_run_report_shows_units_config_and_findings(copy_of) -> None:
    directory = copy_of("run")
    text = report_of(directory)
    assert "<title>test: run report</title>" in text
    assert "Resolved configuration (config.resolved.yaml)" in text
    assert "hit_query: kv_only" in text, "the resolved YAML, in the collapsible block"
    assert re.search(r"wasted_read_bytes</td><td class=\"num\">[^<]*B</td><td>bytes</td>", text)
    assert re.search(r"ttft_p99_s</td><td class=\"num\">[^<]*</td><td>s</td>", text)
    assert "issued prefetches" in text and "What it cost:" in text


def test_compare_report_names_the_variants_and_what_differs(copy_of) -> None:
    text = report_of(copy_of("compare"))
    assert "<title>test: comparison report</title>" in text
    assert "differ only in <code>heal</code>" in text
    assert "<h3>heal=none</h3>" in text and "<h3>heal=keep_pages</h3>" in text
    assert "<th>none</th><th>keep_<wbr>pages</th>" in text


def test_sweep_report_gives_intervals_per_point(copy_of) -> None:
    text = report_of(copy_of("sweep"))
    assert "95 % CI" in text and "at capacity_gb=" in text
    assert "under heal none and keep_pages overlap at" in text
    assert text.count('class="ci"') > 0, "each mean over seeds carries its interval"


def test_capacity_report_states_the_answer(copy_of) -> None:
    directory = copy_of("capacity")
    text = report_of(directory)
    assert "<title>test: capacity answer report</title>" in text
    assert f"The smallest {CAP} that meets ttft_p99_s&lt;=1000" in text
    assert "is 0.02 GB" in text, "the answer carries its unit"
    assert '<table id="deployment">' in text.split('<section id="scenario">')[0], "card first"
    assert "storage_swa_stored_bytes" in text and "read_transfer_bytes" in text, "at the answer"


def test_report_to_another_file_leaves_no_temporary_behind(copy_of, tmp_path: Path) -> None:
    directory = copy_of("run")
    out = tmp_path / "pages" / "run.html"
    ok(invoke("report", str(directory), "--out", str(out)))
    assert os.listdir(out.parent) == ["run.html"]
    assert not (directory / "report.html").exists()
    out.write_text("old")
    ok(invoke("report", str(directory), "--out", str(out)))
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>"), "a page is replaced"
    assert os.listdir(out.parent) == ["run.html"]


def test_comment_of_the_configuration_is_shown_escaped(copy_of) -> None:
    directory = copy_of("run")
    config = directory / "config.resolved.yaml"
    config.write_text("# Models <b>this</b> & that.\n# Second line.\n" + config.read_text())
    text = report_of(directory)
    assert "Models &lt;b&gt;this&lt;/b&gt; &amp; that.\nSecond line." in text
    assert "<b>this</b>" not in text


def test_header_comment() -> None:
    assert header_comment("# one\n#two\n\n# not this\nname: x\n") == "one\ntwo"
    assert header_comment("name: x\n# later\n") == ""
    assert header_comment(None) == ""


# --- refusals -----------------------------------------------------------------------------------


def test_not_a_result_directory_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    result = invoke("report", str(empty))
    assert result.exit_code == 2, result.output
    assert "not a result directory" in result.stderr and "Traceback" not in result.stderr
    assert os.listdir(empty) == ["notes.txt"]
    assert invoke("report", str(empty / "notes.txt")).exit_code == 2
    assert invoke("report", str(tmp_path / "missing")).exit_code == 2


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
@pytest.mark.parametrize("explicit", [False, True], ids=["default-out", "--out"])
def test_a_symlink_at_the_output_path_is_refused(
    copy_of, tmp_path: Path, dangling: bool, explicit: bool
) -> None:
    directory = copy_of("run")
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("keep me")
    link = (tmp_path / "elsewhere.html") if explicit else (directory / "report.html")
    link.symlink_to(victim)
    args = ["--out", str(link)] if explicit else []
    result = invoke("report", str(directory), *args)
    assert result.exit_code == 2, result.output
    assert "symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert link.is_symlink()
    assert victim.exists() == (not dangling)
    if not dangling:
        assert victim.read_text() == "keep me"
    assert not [p for p in link.parent.iterdir() if p.name.endswith(".tmp")]


def test_plot_draws_a_capacity_directory(copy_of) -> None:
    directory = copy_of("capacity")
    result = ok(invoke("plot", str(directory)))
    assert (directory / "capacity.png").read_bytes().startswith(PNG_MAGIC)
    assert "capacity.png" in result.stdout


# --- units and findings -------------------------------------------------------------------------


def test_units_from_key_suffixes() -> None:
    assert metric_unit("wasted_read_bytes") == "bytes"
    assert metric_unit("storage_swa_stored_bytes") == "bytes"
    assert metric_unit("l3_loaded_tokens") == "tokens"
    assert metric_unit("device_swa_resident_tokens_mean") == "tokens"
    assert metric_unit("device_mamba_resident_slots_mean") == "slots"
    assert metric_unit("ttft_p99_s") == "s"
    assert metric_unit("heal_rate") == "ratio"
    assert metric_unit("rewrite_pages") == "pages"
    assert metric_unit("written_swa_objects") == "objects"
    assert metric_unit("loop_length_max") == "discards"
    assert metric_unit("prefetch_issued") == "prefetches"
    assert metric_unit("storage_kv_get_hits") == "objects"
    assert cell("wasted_read_bytes", 12_262_440_960) == "12.26 GB"
    assert cell("wasted_read_bytes", 0) == "0 B"
    assert cell("heal_rate", None) == "–"
    assert cell("prompt_tokens", 6149120.0) == "6,149,120"
    assert metric_text("rewrite_pages", 1) == "1 page"
    assert metric_text("prefetch_issued", 1) == "1 prefetch"
    assert metric_text("ttft_p99_s", 0.23851) == "0.2385 s"


def test_run_findings_without_prefetches_or_discards() -> None:
    none = run_findings({"prefetch_issued": 0, "prompt_tokens": 0, "ttft_p99_s": None})
    assert none[0] == "No storage prefetch was issued after warm-up, so nothing could loop."
    clean = run_findings({"prefetch_issued": 10, "prefetch_discarded": 0, "loops": 0})
    assert clean[0] == "None of the 10 issued prefetches was discarded: nothing looped."


def test_run_findings_of_loops_nobody_retried() -> None:
    summary = {
        "prefetch_issued": 20,
        "prefetch_discarded": 3,
        "discard_rate": 0.15,
        "loops": 3,
        "loop_length_mean": 1.0,
        "loop_length_max": 1,
        "loops_retried": 0,
        "loops_healed": 0,
        "heal_rate": None,
        "wasted_read_bytes": 2_500_000_000,
        "rewrite_pages": 0,
        "prompt_tokens": 1000,
        "recomputed_tokens": 250,
        "ttft_p99_s": 0.5,
        "ttft_p50_s": 0.1,
    }
    sentences = run_findings(summary)
    assert sentences[0].startswith("3 of the 20 issued prefetches were discarded")
    assert "each a single discard" in sentences[0]
    assert sentences[1].startswith("No loop was retried")
    assert sentences[2] == (
        "What it cost: 2.5 GB of storage reads thrown away with the discards, 0 KV pages "
        "rewritten after heals, 250 of 1,000 prompt tokens recomputed (25.0 %) and a TTFT p99 "
        "of 0.5 s (p50 0.1 s)."
    )


def test_compare_findings_against_the_first_variant() -> None:
    table = pd.DataFrame(
        {
            "heal": ["none", "keep_pages", "drop_chain"],
            "prefetch_discarded": [10, 5, 10],
            "heal_rate": [0.5, 0.75, 0.5],
            "rewrite_pages": [100, 120, 700],
            "loop_length_max": [2, 2, 2],
        }
    )
    sentences = compare_findings(table, "heal")
    assert sentences[0] == (
        "The variants differ most in rewritten KV pages: 7× from 100 pages under none to "
        "700 pages under drop_chain."
    )
    assert "Discarded prefetches: none 10; keep_pages 5 (0.5×); drop_chain 10 (the same)." in (
        sentences
    )
    assert "Heal rate: none 0.5; keep_pages 0.75 (+0.25); drop_chain 0.5 (the same)." in sentences
    assert sentences[-1] == "The same under every variant: longest loop (2 discards)."
    assert compare_findings(table.head(1), "heal") == [
        "Only one variant (none): nothing to compare."
    ]


def test_capacity_findings_notice_a_non_monotone_search() -> None:
    evaluations = pd.DataFrame(
        {
            "value": [1.0, 2.0, 3.0],
            "n": [3, 3, 3],
            "mean": [0.9, 0.4, 0.95],
            "ci_low": [0.85, 0.3, 0.92],
            "ci_high": [0.95, 0.5, 0.98],
            "meets": [True, False, True],
            "errors": [0, 0, 0],
        }
    )
    answer = {"param": "p", "target": "heal_rate>=0.8", "seeds": 3, "answer": 1.0}
    sentences = capacity_findings(answer, evaluations)
    assert sentences[0] == (
        "The smallest p that meets heal_rate>=0.8 with 95 % confidence over 3 seeds is 1: "
        "heal_rate mean 0.9, 95 % CI [0.85, 0.95]."
    )
    assert any(
        "not monotone in p: 1 meets the target but the larger 2 does not" in s for s in sentences
    )
    none = capacity_findings({**answer, "answer": None}, evaluations.assign(meets=False))
    assert none[0].startswith("No evaluated value of p meets heal_rate>=0.8")
    assert "The closest is 3" in none[0]


def test_build_report_escapes_everything_from_the_directory(copy_of) -> None:
    directory = copy_of("compare")
    for name in ("comparison.csv", "variants.json"):
        path = directory / name
        path.write_text(path.read_text().replace("keep_pages", "keep<script>"), encoding="utf-8")
    (directory / "keep_pages").rename(directory / "keep<script>")
    text = build_report(directory)
    assert "keep&lt;script&gt;" in text
    assert text.count("<script>") == 1, "only the page's own script"


# --- a real browser -----------------------------------------------------------------------------


def chromium() -> str:
    """The browser, or a failure under CI (which must never skip this) and a skip elsewhere."""
    path = shutil.which("chromium")
    if path is None:
        message = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the browser test (.ci/run installs it)")
        pytest.skip(message)
    return path


def dump_dom(browser: str, page: Path, profile: Path) -> str:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_every_image_decodes_in_headless_chromium(kind: str, copy_of, tmp_path: Path) -> None:
    browser = chromium()
    directory = copy_of(kind)
    report_of(directory)
    dumped = dump_dom(browser, directory / "report.html", tmp_path / "profile")
    dom = Page(dumped)
    assert dom.body.get("data-report-loaded") == "true", "the load handler ran"
    assert len(dom.images) == IMAGES[kind]
    widths = [int(image.get("data-decoded", "0")) for image in dom.images]
    assert all(width > 0 for width in widths), widths
    assert set(dom.tables) == TABLES[kind]
    if kind == "capacity":
        shown = visible_text(dumped)
        for needle in ("gpt-oss-120b", CONVERSATION_TRACE.name, "1 server", "0.02 GB"):
            assert needle in shown, needle


def visible_text(dom: str) -> str:
    """The text a reader sees in a dumped page (tags, the style and the script left out)."""
    dom = re.sub(r"<(style|script)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def test_run_plot_has_restored_share_and_bandwidth_and_no_negative_axis(copy_of) -> None:
    from sim.outputs.plot_run import run_figure

    fig = run_figure(copy_of("run"))
    titles = {ax.get_title(): ax for ax in fig.axes}
    share = titles["% of prompt tokens restored from storage"]
    bandwidth = titles["storage bandwidth (GB/s, mean per bin)"]
    assert share.get_lines() and len(bandwidth.get_lines()) == 2
    for ax in fig.axes:
        assert ax.get_ylim()[0] >= 0, ax.get_title()


def test_compare_plot_leaves_no_empty_slot(copy_of) -> None:
    from sim.outputs.plot_compare import comparison_figure

    fig = comparison_figure(copy_of("compare"))
    assert all(ax.axison for ax in fig.axes), "every cell of the grid holds a panel"
