"""hicache-sim: a discrete-event simulator of hybrid HiCache storage prefetch.

Public API (docs/api.md): `load_scenario`, `build_scenario`, `run`, `RunResult`, `compare`,
`Comparison`, `Scenario`, `ScenarioError`, `scenario_model` (the schema for the registries as
they are), and the contract heal function `sim.heal.keep_pages`.
"""

from sim import heal
from sim.engine.runner import RunResult, run
from sim.results.compare import Comparison, compare
from sim.scenario.loading import build_scenario, load_scenario
from sim.scenario.schema import Scenario, ScenarioError, scenario_model

__all__ = [
    "Comparison",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "build_scenario",
    "compare",
    "heal",
    "load_scenario",
    "run",
    "scenario_model",
]
__version__ = "0.1.0"
