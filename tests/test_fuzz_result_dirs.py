"""Fuzzed result directories: the commands that read one (`plot`, `report`, `export-trace`)
answer a damaged or hostile directory with exit 0 or 2, never a crash (exit 1) or a traceback,
and never write outside it. The same cases are drawn on every run (HICACHE_FUZZ_EXPLORE=1
draws new ones), as in test_fuzz_inputs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import RUN_FILES, invoke

FILES = sorted(RUN_FILES - {".hicache-sim"} | {"storage_trace.parquet"})
CONTENTS = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"[]",
            b"null",
            b"- a\n- b\n",
            b"name: !!python/object:os.system {}\n",
            b'{"model": 3}',
            b"PAR1" + b"\0" * 16 + b"PAR1",
            b"\xff\xfe\xfd",
        ]
    ),
)
ACTIONS = st.sampled_from(["write", "delete", "dir"])


def _damage(target: Path, action: str, content: bytes) -> None:
    """Remove the file (or folder) at `target`, then write junk there or make it a folder."""
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    if action == "write":
        target.write_bytes(content)
    elif action == "dir":
        target.mkdir()


@settings(
    max_examples=40,
    deadline=None,
    derandomize=not os.environ.get("HICACHE_FUZZ_EXPLORE"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    damage=st.lists(st.tuples(st.sampled_from(FILES), ACTIONS, CONTENTS), min_size=1, max_size=3)
)
def test_a_damaged_run_directory_gets_exit_0_or_2(
    traced_run: Path, tmp_path_factory: pytest.TempPathFactory, damage: list[tuple[str, str, bytes]]
) -> None:
    work = tmp_path_factory.mktemp("case")
    crafted = work / "run"
    shutil.copytree(traced_run, crafted)
    for name, action, content in damage:
        _damage(crafted / name, action, content)
    for args in (
        ["plot", str(crafted)],
        ["report", str(crafted)],
        ["export-trace", str(crafted), "--pool", "kv"],
    ):
        result = invoke(*args)
        assert result.exit_code in (0, 2), (args, damage, result.output[-2000:])
        assert "Traceback" not in result.output
    assert sorted(p.name for p in work.iterdir()) == ["run"], "nothing written outside"


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small comparison, sweep and capacity directory (copy one before damaging it)."""
    import yaml

    from tests.conftest import make_doc

    base = tmp_path_factory.mktemp("studies")
    doc = make_doc(duration_s=20, **{"workload.requests": 20})
    doc["sweep"] = {"seeds": 2, "grid": {"storage.read_gbps": [5.0, 10.0]}}
    path = base / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    runs = {
        "compare": ["compare", str(path), "--heal", "none,keep_pages"],
        "sweep": ["sweep", str(path), "--executor", "serial"],
        "capacity": [
            *("capacity", str(path), "--param", "storage.read_gbps", "--seeds", "2"),
            *("--target", "requests>=1", "--values", "5,10", "--executor", "serial"),
        ],
    }
    for kind, args in runs.items():
        assert invoke(*args, "--out", str(base / kind)).exit_code == 0, kind
    return {kind: base / kind for kind in runs}


STUDY_FILES = {
    "compare": ["comparison.csv", "variants.json"],
    "sweep": ["sweep.json", "points.csv", "runs.parquet"],
    "capacity": ["capacity.json", "evaluations.csv"],
}


@settings(
    max_examples=15,
    deadline=None,
    derandomize=not os.environ.get("HICACHE_FUZZ_EXPLORE"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(sorted(STUDY_FILES)),
    damage=st.lists(st.tuples(st.integers(0, 2), ACTIONS, CONTENTS), min_size=1, max_size=2),
)
def test_a_damaged_study_directory_gets_exit_0_or_2(
    studies: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    damage: list[tuple[int, str, bytes]],
) -> None:
    """The same for a comparison, sweep or capacity directory: a file the readers refuse is bad
    input; what they do not refuse they must read without crashing."""
    work = tmp_path_factory.mktemp("study")
    crafted = work / kind
    shutil.copytree(studies[kind], crafted)
    files = STUDY_FILES[kind]
    for index, action, content in damage:
        _damage(crafted / files[index % len(files)], action, content)
    for args in (["plot", str(crafted)], ["report", str(crafted)]):
        result = invoke(*args)
        assert result.exit_code in (0, 2), (args, damage, result.output[-2000:])
        assert "Traceback" not in result.output
