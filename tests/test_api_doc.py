"""docs/api.md's examples run as written and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.conftest import REPO

PAGE = (REPO / "docs" / "api.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, re.S)
OUTPUTS = re.findall(r"It prints[^\n]*\n\n```\n(.*?)```", PAGE, re.S)


def test_the_page_has_examples_and_their_output() -> None:
    assert len(BLOCKS) >= 2 and len(OUTPUTS) == 1


def test_the_first_example_prints_what_the_page_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BLOCKS[0], "docs/api.md", "exec"), {})
    assert out.getvalue() == OUTPUTS[0]


@pytest.mark.parametrize("index", range(1, len(BLOCKS)))
def test_the_other_examples_run(monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    monkeypatch.chdir(REPO)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(BLOCKS[index], "docs/api.md", "exec"), {})
