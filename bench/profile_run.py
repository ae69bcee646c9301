"""Where a run's time goes: the top functions by own time, Python calls per request, and SimPy
events per request by kind.

    python bench/profile_run.py SCENARIO [--set KEY=VALUE ...] [--top 25] [--no-profile]

The events are classified as they are processed: the event's type and the process it resumes
(a generator's name) or the callback it runs. Counting costs a little time of its own, so the
wall time printed with `--no-profile` (the event census only) or under cProfile is not the
benchmark's; `bench/run.py` times runs.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import Counter
from pathlib import Path
from typing import Any

import simpy

from sim.engine import simulation
from sim.engine.runner import run
from sim.scenario.loading import load_scenario


def event_kind(event: simpy.Event) -> str:
    """The event's type and what it wakes: a process's generator or a callback's name."""
    names = []
    for callback in event.callbacks or ():
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, simpy.Process):
            names.append(owner._generator.__name__)
        else:
            names.append(getattr(callback, "__qualname__", type(callback).__name__))
    return f"{type(event).__name__} -> {', '.join(names) or 'nothing'}"


def census() -> Counter[str]:
    """Patch the environment to classify every event it processes."""
    kinds: Counter[str] = Counter()
    step = simpy.Environment.step

    def counting_step(env: Any) -> None:
        if env._queue:
            kinds[event_kind(env._queue[0][3])] += 1
        step(env)

    simulation.CountingEnvironment.step = counting_step  # type: ignore[method-assign]
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="the event census only")
    parser.add_argument("--no-census", action="store_true", help="the profile only")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, args.overrides)
    kinds = Counter[str]() if args.no_census else census()
    profiler = None if args.no_profile else cProfile.Profile()
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = run(scenario)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - started
    requests = len(result.tables["requests"])
    events = result.summary["events"] or sum(kinds.values())
    print(f"{args.scenario}: {requests:,} requests, {events:,} events, {wall:.2f} s here")
    print(f"events per request: {events / requests:.1f}")
    if kinds:
        print("\n| event -> wakes | per request | share |\n| --- | --- | --- |")
        total = sum(kinds.values())
        for kind, count in kinds.most_common(15):
            print(f"| {kind} | {count / requests:.2f} | {count / total:.0%} |")
    if profiler is not None:
        stats = pstats.Stats(profiler)
        calls = sum(row[1] for row in stats.stats.values())  # type: ignore[attr-defined]
        own = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
        print(f"\nPython calls: {calls:,} ({calls / requests:,.0f} per request)")
        print("\n| function | own s | share | calls per request |\n| --- | --- | --- | --- |")
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])  # type: ignore[attr-defined]
        for (file, line, name), (_, ncalls, tottime, _, _) in rows[: args.top]:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            print(
                f"| `{name}` ({where}) | {tottime:.2f} | {tottime / own:.1%} | "
                f"{ncalls / requests:.1f} |"
            )


if __name__ == "__main__":
    main()
