"""Repeated-failure loops: `sim.model.loops.LoopTracker` per its docstring.

A loop is a maximal run of consecutive discards at one endpoint page; an attempt reaches an
endpoint when its hit span holds that page; a later successful attempt that reaches it heals the
loop; a loop counts as retried once any later attempt reached it.

Spans here are prefixes of one chain of page keys 0, 1, 2, ... (`upto(e)` ends at page e), plus
an unrelated chain from 100.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.loops import Loop, LoopTracker

LoopRow = tuple[int, float, int, bool, float | None]


def upto(endpoint: int, start: int = 0) -> tuple[int, ...]:
    return tuple(range(start, endpoint + 1))


def rows(loops: list[Loop]) -> list[LoopRow]:
    return [
        (lp.endpoint_key, lp.first_discard_s, lp.length, lp.retried, lp.healed_s) for lp in loops
    ]


def test_first_discard_opens_a_loop_not_yet_retried() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    (loop,) = tracker.all_loops()
    assert (loop.endpoint_key, loop.first_discard_s, loop.length) == (7, 1.0, 1)
    assert not loop.retried
    assert loop.healed_s is None and loop.time_to_heal_s is None
    assert set(tracker.open) == {7} and tracker.closed == []


def test_repeat_discards_lengthen_the_loop() -> None:
    tracker = LoopTracker()
    for t in (1.0, 2.0, 4.0):
        tracker.on_discard(upto(7), t)
    (loop,) = tracker.all_loops()
    assert loop.length == 3 and loop.retried and loop.first_discard_s == 1.0
    assert loop.healed_s is None


def test_success_at_the_endpoint_heals() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_discard(upto(7), 2.0)
    tracker.on_success(upto(7), len(upto(7)), 5.5)
    (loop,) = tracker.all_loops()
    assert loop.healed_s == 5.5 and loop.time_to_heal_s == 4.5
    assert loop.retried and loop.length == 2
    assert tracker.open == {} and tracker.closed == [loop]


def test_a_longer_success_of_the_same_prefix_heals() -> None:
    """The next turn of a conversation loads past the endpoint: it reached it, so it heals."""
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_success(upto(12), len(upto(12)), 2.0)
    (loop,) = tracker.all_loops()
    assert loop.healed_s == 2.0 and loop.retried


def test_a_success_that_stops_short_of_the_endpoint_does_not_heal() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_success(upto(6), len(upto(6)), 2.0)
    (loop,) = tracker.all_loops()
    assert loop.healed_s is None and not loop.retried


def test_a_partial_success_heals_what_it_loaded_and_retries_the_rest() -> None:
    """A KV-only model keeps a partial read: loops past what it loaded were reached, not
    healed."""
    tracker = LoopTracker()
    tracker.on_discard(upto(3), 1.0)
    tracker.on_discard(upto(7), 2.0)
    tracker.on_success(upto(7), 5, 3.0)
    loops = {lp.endpoint_key: lp for lp in tracker.all_loops()}
    assert loops[3].healed_s == 3.0
    assert loops[7].healed_s is None and loops[7].retried


def test_a_longer_discard_retries_the_loop_without_lengthening_it() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_discard(upto(9), 2.0)
    loops = {lp.endpoint_key: lp for lp in tracker.all_loops()}
    assert loops[7].length == 1 and loops[7].retried and loops[7].healed_s is None
    assert loops[9].length == 1 and not loops[9].retried


def test_single_discard_then_success_is_retried_and_healed() -> None:
    """A success is a later attempt: the loop of length 1 counts as retried."""
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_success(upto(7), len(upto(7)), 3.0)
    (loop,) = tracker.all_loops()
    assert loop.length == 1 and loop.retried and loop.time_to_heal_s == 2.0


def test_attempts_of_other_prefixes_do_not_touch_the_loop() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_success(upto(108, 100), len(upto(108, 100)), 2.0)
    tracker.on_discard(upto(109, 100), 3.0)
    loops = {lp.endpoint_key: lp for lp in tracker.all_loops()}
    assert set(loops) == {7, 109}
    assert loops[7].length == 1 and not loops[7].retried and loops[7].healed_s is None
    assert set(tracker.open) == {7, 109}


def test_success_without_an_open_loop_records_nothing() -> None:
    tracker = LoopTracker()
    tracker.on_success(upto(7), len(upto(7)), 1.0)
    assert tracker.all_loops() == [] and tracker.open == {} and tracker.closed == []


def test_discard_after_heal_opens_a_new_loop() -> None:
    """A success ends the run; the next discard at the same endpoint starts another loop."""
    tracker = LoopTracker()
    tracker.on_discard(upto(7), 1.0)
    tracker.on_success(upto(7), len(upto(7)), 2.0)
    tracker.on_discard(upto(7), 3.0)
    tracker.on_success(upto(7), len(upto(7)), 4.0)  # heals the second loop only
    tracker.on_success(upto(7), len(upto(7)), 5.0)  # nothing open any more
    assert rows(tracker.all_loops()) == [(7, 1.0, 1, True, 2.0), (7, 3.0, 1, True, 4.0)]


def test_all_loops_orders_healed_and_open_by_first_discard() -> None:
    tracker = LoopTracker()
    tracker.on_discard(upto(101, 100), 1.0)
    tracker.on_discard(upto(2), 2.0)
    tracker.on_discard(upto(203, 200), 3.0)
    tracker.on_success(upto(203, 200), len(upto(203, 200)), 4.0)
    tracker.on_success(upto(101, 100), len(upto(101, 100)), 5.0)
    assert [lp.endpoint_key for lp in tracker.closed] == [203, 101]
    assert [lp.endpoint_key for lp in tracker.all_loops()] == [101, 2, 203]
    assert [lp.healed_s for lp in tracker.all_loops()] == [5.0, None, 4.0]


def reference_loops(events: list[tuple[bool, int]]) -> list[LoopRow]:
    """Loops from the whole stream at once: per endpoint e, walk the attempts that reach it
    (those ending at or after e); discards ending at e start or lengthen a loop, any later
    attempt reaching e retries it, a success reaching e heals it."""
    out: list[LoopRow] = []
    for e in {end for success, end in events if not success}:
        loop: list | None = None
        for i, (success, end) in enumerate(events):
            if end < e:
                continue
            if loop is None:
                if not success and end == e:
                    loop = [e, float(i), 1, False, None]
                continue
            loop[3] = True
            if success:
                loop[4] = float(i)
                out.append(tuple(loop))  # type: ignore[arg-type]
                loop = None
            elif end == e:
                loop[2] += 1
        if loop is not None:
            out.append(tuple(loop))  # type: ignore[arg-type]
    return sorted(out, key=lambda row: row[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40))
def test_tracker_matches_offline_reference(events: list[tuple[bool, int]]) -> None:
    """Online tracking of any discard/success stream equals the offline definition."""
    tracker = LoopTracker()
    for i, (success, end) in enumerate(events):
        if success:
            tracker.on_success(upto(end), len(upto(end)), float(i))
        else:
            tracker.on_discard(upto(end), float(i))
    assert rows(tracker.all_loops()) == reference_loops(events)
    assert all(lp.healed_s is None for lp in tracker.open.values())
    assert all(lp.healed_s is not None for lp in tracker.closed)
