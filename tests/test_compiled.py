"""The compiled copy of the simulator (`bench/compile.py`, mypyc) gives the same tables and
summaries as the pure-Python package, which stays the reference.

Builds the copy from this checkout's sources (about a minute on two cores) and fingerprints the
same scenarios with both builds, each in its own interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCENARIOS = [
    "scenarios/mooncake_conversation.yaml",
    "scenarios/demo.yaml",
    "scenarios/multiturn.yaml",
    "scenarios/heal_rules.yaml",
    "scenarios/cut_hole.yaml",
    "scenarios/layouts/kv_swa_mamba.yaml",
    "scenarios/hit_query/intersect.yaml",
    "scenarios/failures/torn_nixl.yaml",
    "scenarios/failures/delete_on_failed_read.yaml",
    "scenarios/failures/lease_expiry.yaml",
    "scenarios/deployments/0.5.19_file_buffer_only_h200_gpt_oss_120b.yaml",
    "scenarios/what_if/aux_blind_exists.yaml:workload.requests=2000,duration_s=300,warmup_s=0,"
    "cluster.instances=4,cluster.scale_arrivals=true,cluster.router.policy=cache_aware",
]
"""Both host modes, every layout, every hit query's fold, failures of each kind, retries, and
a cluster behind a router."""


def build_env(pythonpath: Path | None) -> dict[str, str]:
    """This environment, importing the simulator from `pythonpath` (None: the installed one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def fingerprint(out: Path, pythonpath: Path | None) -> str:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fingerprint.py"), str(out), *SCENARIOS],
        capture_output=True,
        text=True,
        env=build_env(pythonpath),
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()[0]


@pytest.fixture(scope="module")
def compiled_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compiled") / "copy"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compile.py"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_compiled_copy_has_extension_modules(compiled_copy: Path) -> None:
    extensions = {p.name.split(".")[0] for p in (compiled_copy / "sim").rglob("*.so")}
    assert {"server", "radix", "storage", "existence", "backup", "prefetch"} <= extensions
    assert {"server_base", "prefetch_io", "write_back", "scheduler", "tree_capacity"} <= extensions


def test_compiled_build_gives_identical_tables_and_summaries(
    compiled_copy: Path, tmp_path: Path
) -> None:
    pure, compiled = tmp_path / "python.json", tmp_path / "compiled.json"
    assert fingerprint(pure, None) == "build: python"
    assert fingerprint(compiled, compiled_copy) == "build: compiled"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "fingerprint.py"),
            str(pure),
            "--compare",
            str(compiled),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip().endswith("identical"), proc.stdout[-3000:]
    assert proc.returncode == 0


def test_a_rebuild_of_unchanged_sources_is_reused(compiled_copy: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compile.py"), "--out", str(compiled_copy)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0
    assert "up to date" in proc.stdout


def test_compiled_tables_pack_the_same_column_dtypes(compiled_copy: Path) -> None:
    """Column dtypes come from the row types' annotations, which a compiled module would read
    back wrong (`float | None` as `type`), leaving optional times unpacked and an all-None
    column `object` instead of `float64`."""
    probe = (
        "from sim.engine.records import Records\n"
        "records = Records([])\n"
        "for table in (records.requests, records.prefetches, records.writes, records.timeseries):\n"
        "    print([str(d) for d in table._dtypes])\n"
    )
    outputs = []
    for pythonpath in (None, compiled_copy):
        proc = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            env=build_env(pythonpath),
            cwd=REPO.parent,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]
    assert "float64" in outputs[0].splitlines()[0]
