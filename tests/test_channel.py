"""The storage read channel (grants in arrival order, one read at a time) and prefetches run as
callbacks (the same steps as a process, without its start and end events)."""

from __future__ import annotations

import simpy

from sim.engine.channel import ReadChannel, run_callbacks
from sim.engine.simulation import CountingEnvironment


def test_read_channel_serves_one_read_at_a_time_in_arrival_order() -> None:
    env = simpy.Environment()
    channel = ReadChannel(env)
    spans: list[tuple[str, float, float]] = []

    def reader(name: str, start_s: float, read_s: float):
        yield env.timeout(start_s)
        granted = channel.acquire()
        if granted is not None:
            yield granted
        began = env.now
        yield env.timeout(read_s)
        channel.release()
        spans.append((name, began, env.now))

    for name, start_s in (("a", 0.0), ("b", 0.5), ("c", 0.6)):
        env.process(reader(name, start_s, 2.0))
    env.run()
    assert spans == [("a", 0.0, 2.0), ("b", 2.0, 4.0), ("c", 4.0, 6.0)]
    assert not channel.busy


def test_run_callbacks_takes_the_steps_of_a_process_without_its_start_and_end_events() -> None:
    def steps(env: simpy.Environment, seen: list[tuple[str, float]]):
        seen.append(("start", env.now))
        value = yield env.timeout(1.5, value="a")
        seen.append((value, env.now))
        value = yield env.timeout(0.5, value="b")
        seen.append((value, env.now))

    runs = {}
    for how in ("process", "callbacks"):
        env, seen = CountingEnvironment(), []
        if how == "process":
            env.process(steps(env, seen))
        else:
            run_callbacks(steps(env, seen))
            assert seen == [("start", 0.0)]
        env.run()
        runs[how] = (seen, env.events)
    assert runs["callbacks"][0] == runs["process"][0] == [("start", 0.0), ("a", 1.5), ("b", 2.0)]
    assert runs["callbacks"][1] == runs["process"][1] - 2 == 2
