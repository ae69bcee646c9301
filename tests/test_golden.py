"""Every scenario in scenarios/ reproduces its golden summary (wall-clock keys aside)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden_summaries import golden_path, scenario_files, summary_of


@pytest.mark.parametrize("scenario", scenario_files(), ids=lambda p: p.stem)
def test_scenario_matches_its_golden_summary(scenario: Path) -> None:
    golden = json.loads(golden_path(scenario).read_text())
    actual = summary_of(scenario)
    assert actual.keys() == golden.keys()
    for key, expected in golden.items():
        if isinstance(expected, float):
            assert actual[key] == pytest.approx(expected, rel=1e-9, abs=1e-12), key
        else:
            assert actual[key] == expected, key


def test_every_scenario_has_a_golden_file() -> None:
    missing = [p.name for p in scenario_files() if not golden_path(p).exists()]
    assert not missing
