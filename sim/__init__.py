"""hicache-sim: a discrete-event simulator of hybrid HiCache storage prefetch.

Public API: `load_scenario`, `run`, `RunResult`, and the contract heal function
`sim.heal.keep_pages`.
"""

from sim import heal
from sim.runner import RunResult, run
from sim.scenario import Scenario, ScenarioError, load_scenario

__all__ = ["RunResult", "Scenario", "ScenarioError", "heal", "load_scenario", "run"]
__version__ = "0.1.0"
