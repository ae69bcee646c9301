"""The writer's backlog and the read channel: items and grants in arrival order, one reader
at a time, whether the reader waits or finds its item ready."""

from __future__ import annotations

import simpy

from sim.engine.backlog import Backlog
from sim.engine.channel import ReadChannel


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


def test_backlog_hands_items_first_in_first_out_to_a_waiting_or_a_busy_reader() -> None:
    env = simpy.Environment()
    backlog = Backlog(env)
    taken: list[tuple[int, float]] = []

    def writer():
        while True:
            item = yield backlog.get()
            taken.append((item, env.now))
            yield env.timeout(1.0)

    def producer():
        backlog.put(1)
        backlog.put(2)
        yield env.timeout(5.0)
        backlog.put(3)

    env.process(writer())
    env.process(producer())
    env.run(until=10)
    assert taken == [(1, 0.0), (2, 1.0), (3, 5.0)]
