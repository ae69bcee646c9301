"""Golden summaries of every scenario in scenarios/: compute, compare, regenerate.

Regenerate after a deliberate modelling change (and say why in the commit):
    python -m tests.golden_summaries
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.engine.metrics import WALL_CLOCK_KEYS
from sim.engine.runner import run
from sim.scenario.loading import load_scenario

REPO = Path(__file__).resolve().parents[1]
GOLDEN_DIR = REPO / "tests" / "golden"


def scenario_files() -> list[Path]:
    return sorted((REPO / "scenarios").rglob("*.yaml"))


def golden_path(scenario: Path) -> Path:
    rel = scenario.relative_to(REPO / "scenarios").with_suffix("")
    return GOLDEN_DIR / (str(rel).replace("/", "__") + ".json")


def summary_of(scenario: Path) -> dict[str, Any]:
    summary = run(load_scenario(scenario)).summary
    return {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}


def main() -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    for path in scenario_files():
        target = golden_path(path)
        target.write_text(json.dumps(summary_of(path), indent=2, sort_keys=True) + "\n")
        print(f"wrote {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
