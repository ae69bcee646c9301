"""CPU seconds of `Simulation.run` for one scenario, in a fresh process, for before/after pairs.

    python bench/cpu_run.py REPO SCENARIO [KEY=VALUE ...]

Imports the simulator from REPO (a checkout of either commit of a pair, so one interpreter
times both) and prints the CPU seconds of the simulation alone (no table building), the
`events` summary key and the peak RSS in MiB. CPU time rather than wall time, because on a
shared machine a neighbour's load stretches the wall time far more than the CPU time; run the
two commits alternately, swapping their order every round, and compare medians of the rounds'
ratios.
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any


def main() -> None:
    repo, scenario, *overrides = sys.argv[1:]
    sys.path.insert(0, repo)
    import sim.engine.simulation as simulation
    from sim.runner import run
    from sim.scenario import load_scenario

    if not simulation.__file__ or not simulation.__file__.startswith(repo):
        sys.exit(f"imported the simulator from {simulation.__file__}, not from {repo}")
    original = simulation.Simulation.run
    cpu: dict[str, float] = {}

    def timed(self: Any) -> Any:
        started = time.process_time()
        result = original(self)
        cpu["s"] = time.process_time() - started
        return result

    simulation.Simulation.run = timed  # type: ignore[method-assign]
    result = run(load_scenario(f"{repo}/{scenario}", overrides))
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{cpu['s']:.3f} {result.summary['events']} {peak_mib}")


if __name__ == "__main__":
    main()
