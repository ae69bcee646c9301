"""CPU seconds of `Simulation.run` for one scenario, in a fresh process, for before/after pairs.

    python bench/cpu_run.py REPO SCENARIO [KEY=VALUE ...]
    python bench/cpu_run.py build/compiled scenarios/demo.yaml   # the compiled copy

Imports the simulator from REPO (a checkout of either commit of a pair, so one interpreter
times both, or the compiled copy `bench/compile.py` builds; SCENARIO is looked up in REPO, then
from here) and prints the CPU seconds of the simulation alone (the SimPy environment's run: no
trace reading before it, no table building after it), the
`events` summary key and the peak RSS in MiB. CPU time rather than wall time, because on a
shared machine a neighbour's load stretches the wall time far more than the CPU time; run the
two commits alternately, swapping their order every round, and compare medians of the rounds'
ratios.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    repo, scenario, *overrides = sys.argv[1:]
    root = str(Path(repo).resolve())
    sys.path.insert(0, root)
    import sim.engine.simulation as simulation
    from sim.engine.runner import run
    from sim.scenario.loading import load_scenario

    if not simulation.__file__ or not simulation.__file__.startswith(root):
        sys.exit(f"imported the simulator from {simulation.__file__}, not from {repo}")
    # The environment is a subclass of SimPy's, a Python class in either build: patchable.
    original = simulation.CountingEnvironment.run
    cpu: dict[str, float] = {}

    def timed(self: Any, until: Any = None) -> Any:
        started = time.process_time()
        result = original(self, until)
        cpu["s"] = time.process_time() - started
        return result

    simulation.CountingEnvironment.run = timed  # type: ignore[method-assign]
    path = Path(repo) / scenario
    result = run(load_scenario(path if path.exists() else Path(scenario), overrides))
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{cpu['s']:.3f} {result.summary['events']} {peak_mib}")


if __name__ == "__main__":
    main()
