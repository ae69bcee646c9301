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
        target = crafted / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        if action == "write":
            target.write_bytes(content)
        elif action == "dir":
            target.mkdir()
    for args in (
        ["plot", str(crafted)],
        ["report", str(crafted)],
        ["export-trace", str(crafted), "--pool", "kv"],
    ):
        result = invoke(*args)
        assert result.exit_code in (0, 2), (args, damage, result.output[-2000:])
        assert "Traceback" not in result.output
    assert sorted(p.name for p in work.iterdir()) == ["run"], "nothing written outside"
