"""What a cluster run shows a reader: its plot draws every per-server series once per instance
and the shared storage once, its report page has the per-instance table and the cluster's keys,
and `run` prints the cluster's lines; a run of one server shows none of it."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.figure import Figure

from sim.core.units import size_text
from sim.outputs.console import summary_lines
from sim.outputs.plot_compare import comparison_figure
from sim.outputs.plot_run import PER_INSTANCE_LEGEND_MAX, cluster_total, run_figure
from sim.outputs.report import build_report
from tests.conftest import PNG_MAGIC, invoke, make_doc, ok, read_summary
from tests.test_report import Page, assert_self_contained, chromium, dump_dom

SMALL: dict[str, Any] = {
    "duration_s": 40,
    "workload.requests": 120,
    "device.kv_pages": 400,
    "device.swa_pages": 400,
    "host.pages": 800,
    "storage.pools.swa.capacity_gb": 0.02,
}
"""Three servers on a backend whose SWA pool is small: the servers push each other's SWA objects
out, so there are discards, loops, and loops made stale by another server."""
CLUSTER = {"cluster.instances": 3, "cluster.router.policy": "random"}
PER_SERVER_TITLES = (
    "cumulative discards (after warm-up)",
    "existence cache: beliefs (dashed: capacity)",
    "existence cache: stale among the 4,096 most recent",
    "existence cache: dropped, not yet rewritten",
    "host pages in use (dashed: capacity)",
    "device kv pages (dashed: capacity)",
    "device swa pages (dashed: capacity)",
)
STORAGE_TITLE = "shared storage occupancy (GB; dashed: capacity)"
SINGLE_TITLES = [
    "cumulative discards (after warm-up)",
    "existence cache",
    "% of prompt tokens restored from storage",
    "device and host occupancy",
    "storage occupancy (GB; dashed: capacity)",
    "storage bandwidth (GB/s, mean per bin)",
]
SINGLE_LABELS = [
    "requests",
    "prompt",
    "device hits",
    "storage (L3) loaded",
    "recomputed",
    "prefetches",
    "repeated-failure loops",
    "wasted storage reads",
    "rewritten after a heal",
    "written to storage",
    "TTFT p50 / p99",
    "wall clock",
]
"""What `run` prints for one server, in order (the README quotes it)."""


def write_scenario(path: Path, **extra: Any) -> Path:
    path.write_text(yaml.safe_dump(make_doc(**SMALL, **extra), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """A cluster run and a single-server run of the same scenario: directory and stdout."""
    root = tmp_path_factory.mktemp("cluster-outputs")
    out = {}
    for name, extra in (("cluster", CLUSTER), ("single", {})):
        scenario = write_scenario(root / f"{name}.yaml", **extra)
        result = ok(invoke("run", str(scenario), "--out", str(root / name)))
        out[name] = (root / name, result.stdout)
    return out


@pytest.fixture
def copy_of(runs: dict[str, tuple[Path, str]], tmp_path: Path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(runs[name][0], tmp_path / name))

    return copy


def by_title(fig: Figure) -> dict[str, Any]:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible() and ax.axison}


# --- plots --------------------------------------------------------------------------------------


def test_the_cluster_has_what_the_outputs_must_show(runs) -> None:
    summary = read_summary(runs["cluster"][0])
    assert summary["instances"] == 3
    assert summary["prefetch_discarded"] > 0
    assert summary["cross_instance_l3_hit_pages"] > 0
    assert summary["cross_instance_rewrite_objects"] > 0
    assert summary["loops_stale_by_other_instance"] > 0
    assert summary["load_imbalance"] > 1.0


def test_cluster_plot_draws_each_server_series_per_instance(runs) -> None:
    directory = runs["cluster"][0]
    ts = pd.read_parquet(directory / "timeseries.parquet")
    fig = run_figure(directory)
    panels = by_title(fig)
    assert set(panels) == {*PER_SERVER_TITLES, STORAGE_TITLE}
    columns = {
        PER_SERVER_TITLES[0]: "discards",
        PER_SERVER_TITLES[1]: "existence_entries",
        PER_SERVER_TITLES[5]: "device_kv_pages",
    }
    for title in PER_SERVER_TITLES:
        lines = panels[title].get_lines()
        labelled = {str(line.get_label()): line for line in lines}
        instances = {f"instance {i}" for i in range(3)}
        assert instances <= set(labelled), title
        assert len([line for line in lines if line.get_linestyle() == "-"]) == 3, title
        if title in columns:
            for i in range(3):
                own = ts[ts["instance"] == i]
                np.testing.assert_array_equal(labelled[f"instance {i}"].get_xdata(), own["t_s"])
                np.testing.assert_array_equal(
                    labelled[f"instance {i}"].get_ydata(), own[columns[title]]
                )
    discards = {
        line.get_label(): line.get_ydata()[-1] for line in panels[PER_SERVER_TITLES[0]].lines
    }
    assert len(set(discards.values())) > 1, "the servers' discards differ: drawn apart"
    storage = panels[STORAGE_TITLE].get_lines()
    drawn = [line for line in storage if line.get_linestyle() == "-"]
    assert [line.get_label() for line in drawn] == ["kv", "swa"], "each pool once"
    shared = ts[ts["instance"] == 0]
    np.testing.assert_allclose(drawn[1].get_ydata(), shared["storage_swa_bytes"] / 1e9)
    legend = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
    assert legend == ["instance 0", "instance 1", "instance 2"]
    assert "3 instances behind a random router" in fig.get_suptitle()


def test_many_instances_are_told_apart_by_a_colour_scale(copy_of) -> None:
    directory = copy_of("cluster")
    ts = pd.read_parquet(directory / "timeseries.parquet")
    first = ts[ts["instance"] == 0]
    n = PER_INSTANCE_LEGEND_MAX + 2
    many = pd.concat([first.assign(instance=i) for i in range(n)], ignore_index=True)
    many.sort_values("t_s", kind="stable").to_parquet(directory / "timeseries.parquet")
    fig = run_figure(directory)
    assert not fig.legends, "no legend of twelve entries"
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel() == "instance"] == ["instance"]
    assert len(by_title(fig)[PER_SERVER_TITLES[0]].get_lines()) == n


def test_single_server_plot_is_the_six_panel_figure(runs) -> None:
    directory = runs["single"][0]
    fig = run_figure(directory)
    assert [ax.get_title() for ax in fig.axes] == SINGLE_TITLES
    assert fig.get_suptitle() == "test: time series"
    assert not fig.legends
    existence = fig.axes[1]
    assert [t.get_text() for t in existence.get_legend().get_texts()] == [
        "beliefs",
        "stale among the 4,096 most recent",
        "dropped, not yet rewritten",
        "capacity",
    ]
    assert len(fig.axes[0].get_lines()) == 1


def test_a_run_directory_without_the_instance_column_still_plots(copy_of) -> None:
    """A directory written before clusters: the same figure as with the column."""
    directory = copy_of("single")
    with_column = run_figure(directory)
    ts = pd.read_parquet(directory / "timeseries.parquet")
    ts.drop(columns="instance").to_parquet(directory / "timeseries.parquet")
    without = run_figure(directory)
    assert [ax.get_title() for ax in without.axes] == SINGLE_TITLES
    for old, new in zip(with_column.axes, without.axes, strict=True):
        for a, b in zip(old.get_lines(), new.get_lines(), strict=True):
            np.testing.assert_array_equal(a.get_ydata(), b.get_ydata())


def test_cluster_total_sums_the_servers_at_each_time(runs) -> None:
    ts = pd.read_parquet(runs["cluster"][0] / "timeseries.parquet")
    total = cluster_total(ts, "discards")
    times = sorted(ts["t_s"].unique())
    assert total["t_s"].tolist() == times
    last = ts[ts["t_s"] == times[-1]]
    assert total["discards"].iloc[-1] == last["discards"].sum() > last["discards"].max()
    single = pd.read_parquet(runs["single"][0] / "timeseries.parquet")
    pd.testing.assert_frame_equal(cluster_total(single, "discards"), single[["t_s", "discards"]])


def test_compare_plot_draws_a_cluster_variant_as_its_total(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", **CLUSTER)
    out = tmp_path / "cmp"
    ok(invoke("compare", str(scenario), "--heal", "none,keep_pages", "--out", str(out)))
    fig = comparison_figure(out)
    [discards] = [ax for ax in fig.axes if ax.get_title().startswith("cumulative discards")]
    ts = pd.read_parquet(out / "none" / "timeseries.parquet")
    line = discards.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), sorted(ts["t_s"].unique()))
    np.testing.assert_array_equal(line.get_ydata(), ts.groupby("t_s")["discards"].sum())


# --- report -------------------------------------------------------------------------------------


def tables_of(text: str) -> dict[str, list[list[str]]]:
    """Each table's rows as cell texts, by table id."""
    out: dict[str, list[list[str]]] = {}
    for match in re.finditer(r'<table id="([^"]+)">(.*?)</table>', text, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", match.group(2), re.S)
        out[match.group(1)] = [
            [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in rows
        ]
    return out


def test_cluster_run_page_shows_instances_and_cluster_keys(runs) -> None:
    directory = runs["cluster"][0]
    text = build_report(directory)
    assert_self_contained(text)
    summary = read_summary(directory)
    page = Page(text)
    assert set(page.tables) == {"deployment", "summary", "provenance", "cluster", "instances"}
    assert len(page.images) == 1
    assert '<a href="#instances">Instances</a>' in text
    assert "3 servers behind a <code>random</code> router share one storage backend" in text
    tables = tables_of(text)
    cluster = {row[0]: row[1:] for row in tables["cluster"][1:]}
    assert cluster["instances"] == ["3", "servers"]
    assert cluster["load_imbalance"] == [f"{summary['load_imbalance']:.4g}", "ratio"]
    stale = summary["loops_stale_by_other_instance"]
    assert cluster["loops_stale_by_other_instance"] == [f"{stale:,}", "loops"]
    header, *rows = tables["instances"]
    assert header[:3] == ["instance", "requests", "l3_loaded_rate (ratio)"]
    assert "cross_instance_l3_hit_pages (pages)" in header
    assert "read_transfer_bytes (bytes)" in header
    per_server = pd.read_parquet(directory / "instances.parquet")
    assert [row[0] for row in rows] == ["0", "1", "2"]
    column = header.index("cross_instance_l3_hit_pages (pages)")
    assert [row[column] for row in rows] == [
        f"{v:,}" for v in per_server["cross_instance_l3_hit_pages"]
    ]
    assert [row[1] for row in rows] == [f"{v:,}" for v in per_server["requests"]]
    assert "3 servers shared one storage backend" in text
    assert f"{stale:,} of the {summary['loops']:,} loops missed an object" in text


def test_single_server_run_page_has_no_cluster_section(runs) -> None:
    text = build_report(runs["single"][0])
    assert set(Page(text).tables) == {"deployment", "summary", "provenance"}
    assert 'id="instances"' not in text and "servers shared" not in text
    assert "Time series: cumulative discards, existence cache" in text


def test_a_damaged_instances_table_is_bad_input(copy_of) -> None:
    directory = copy_of("cluster")
    (directory / "instances.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    result = invoke("report", str(directory))
    assert result.exit_code == 2, result.output
    assert "instances.parquet" in result.stderr and "Traceback" not in result.output


def test_cluster_run_page_decodes_in_headless_chromium(copy_of, tmp_path: Path) -> None:
    browser = chromium()
    directory = copy_of("cluster")
    ok(invoke("report", str(directory)))
    dom = Page(dump_dom(browser, directory / "report.html", tmp_path / "profile"))
    assert dom.body.get("data-report-loaded") == "true"
    [image] = dom.images
    assert int(image.get("data-decoded", "0")) > 0
    assert base64.b64decode(image["src"].removeprefix("data:image/png;base64,"))[:8] == PNG_MAGIC
    assert set(dom.tables) == {"deployment", "summary", "provenance", "cluster", "instances"}


# --- console ------------------------------------------------------------------------------------


def printed(stdout: str) -> list[tuple[str, str]]:
    """The summary lines `run` printed, as (label, text) split at the 28-character column, less
    the summary keys named in brackets at the end."""
    lines = [line for line in stdout.splitlines() if not line.startswith(("(every", "wrote"))]
    return [(line[:28].rstrip(), re.sub(r"  \[[a-z0-9_, ]+\]$", "", line[28:])) for line in lines]


def test_run_prints_the_cluster_lines(runs) -> None:
    directory, stdout = runs["cluster"]
    summary = read_summary(directory)
    lines = printed(stdout)
    labels = [label for label, _ in lines]
    assert labels[:2] == ["cluster", "load imbalance"]
    assert labels[2:12] == SINGLE_LABELS[:10]
    assert labels[12:16] == [
        "L3 read across servers",
        "cross-server rewrites",
        "loops stale by other server",
        "storage traffic",
    ]
    assert labels[16:] == SINGLE_LABELS[10:]
    text = dict(lines)
    assert text["cluster"] == "3 instances behind a random router"
    assert text["load imbalance"].startswith(f"{summary['load_imbalance']:.4g} ")
    pages = summary["cross_instance_l3_hit_pages"]
    assert text["L3 read across servers"].startswith(f"{pages:,} KV pages")
    assert text["cross-server rewrites"].startswith(
        f"{summary['cross_instance_rewrite_objects']:,}"
    )
    stale, loops = summary["loops_stale_by_other_instance"], summary["loops"]
    assert text["loops stale by other server"] == f"{stale:,} of {loops:,} loops"
    read, written = summary["read_transfer_bytes"], summary["written_bytes"]
    assert read > 0 and written > 0
    assert text["storage traffic"] == f"read {size_text(read)}, written {size_text(written)}"


def test_run_of_one_server_prints_what_it_always_did(runs) -> None:
    _, stdout = runs["single"]
    assert [label for label, _ in printed(stdout)] == SINGLE_LABELS
    summary = read_summary(runs["single"][0])
    assert summary["instances"] == 1
    assert [label for label, _ in summary_lines(summary)] == SINGLE_LABELS
    assert [label for label, _ in summary_lines(summary, "cache_aware")] == SINGLE_LABELS
