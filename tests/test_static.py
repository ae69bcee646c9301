"""Lint with ruff and type-check sim/ with mypy, as part of the one test command."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_ruff_check_is_clean() -> None:
    result = _run("ruff", "check", "sim", "tests", "bench", "notebooks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run("ruff", "format", "--check", "sim", "tests", "bench", "notebooks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_sim_is_clean() -> None:
    result = _run("mypy", "sim")
    assert result.returncode == 0, result.stdout + result.stderr
