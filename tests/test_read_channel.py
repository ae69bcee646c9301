"""The storage read channel: grants in arrival order, one read at a time."""

from __future__ import annotations

import simpy

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
