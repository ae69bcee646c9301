"""Repeated-failure loops (DESIGN 5): `sim.model.loops.LoopTracker` per its docstring.

A loop is a maximal run of consecutive discards at one endpoint page; attempts at an endpoint are
the prefetches whose hit ends there; a later successful attempt heals the loop; a loop counts as
retried once any later attempt was made (a repeat discard or a success).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.loops import Loop, LoopTracker

LoopRow = tuple[int, float, int, bool, float | None]


def rows(loops: list[Loop]) -> list[LoopRow]:
    return [
        (lp.endpoint_key, lp.first_discard_s, lp.length, lp.retried, lp.healed_s) for lp in loops
    ]


def test_first_discard_opens_a_loop_not_yet_retried() -> None:
    tracker = LoopTracker()
    tracker.on_discard(7, 1.0)
    (loop,) = tracker.all_loops()
    assert (loop.endpoint_key, loop.first_discard_s, loop.length) == (7, 1.0, 1)
    assert not loop.retried
    assert loop.healed_s is None and loop.time_to_heal_s is None
    assert set(tracker.open) == {7} and tracker.closed == []


def test_repeat_discards_lengthen_the_loop() -> None:
    tracker = LoopTracker()
    for t in (1.0, 2.0, 4.0):
        tracker.on_discard(7, t)
    (loop,) = tracker.all_loops()
    assert loop.length == 3 and loop.retried and loop.first_discard_s == 1.0
    assert loop.healed_s is None


def test_success_at_the_endpoint_heals() -> None:
    tracker = LoopTracker()
    tracker.on_discard(7, 1.0)
    tracker.on_discard(7, 2.0)
    tracker.on_success(7, 5.5)
    (loop,) = tracker.all_loops()
    assert loop.healed_s == 5.5 and loop.time_to_heal_s == 4.5
    assert loop.retried and loop.length == 2
    assert tracker.open == {} and tracker.closed == [loop]


def test_single_discard_then_success_is_retried_and_healed() -> None:
    """A success is a later attempt: the loop of length 1 counts as retried."""
    tracker = LoopTracker()
    tracker.on_discard(7, 1.0)
    tracker.on_success(7, 3.0)
    (loop,) = tracker.all_loops()
    assert loop.length == 1 and loop.retried and loop.time_to_heal_s == 2.0


def test_attempts_at_other_endpoints_do_not_touch_the_loop() -> None:
    """Loops are keyed by the exact endpoint: a success or discard elsewhere changes nothing."""
    tracker = LoopTracker()
    tracker.on_discard(7, 1.0)
    tracker.on_success(8, 2.0)
    tracker.on_discard(9, 3.0)
    loops = {lp.endpoint_key: lp for lp in tracker.all_loops()}
    assert set(loops) == {7, 9}
    assert loops[7].length == 1 and not loops[7].retried and loops[7].healed_s is None
    assert set(tracker.open) == {7, 9}


def test_success_without_an_open_loop_records_nothing() -> None:
    tracker = LoopTracker()
    tracker.on_success(7, 1.0)
    assert tracker.all_loops() == [] and tracker.open == {} and tracker.closed == []


def test_discard_after_heal_opens_a_new_loop() -> None:
    """A success ends the run; the next discard at the same endpoint starts another loop."""
    tracker = LoopTracker()
    tracker.on_discard(7, 1.0)
    tracker.on_success(7, 2.0)
    tracker.on_discard(7, 3.0)
    tracker.on_success(7, 4.0)  # heals the second loop only
    tracker.on_success(7, 5.0)  # nothing open any more
    assert rows(tracker.all_loops()) == [(7, 1.0, 1, True, 2.0), (7, 3.0, 1, True, 4.0)]


def test_all_loops_orders_healed_and_open_by_first_discard() -> None:
    tracker = LoopTracker()
    tracker.on_discard(1, 1.0)
    tracker.on_discard(2, 2.0)
    tracker.on_discard(3, 3.0)
    tracker.on_success(3, 4.0)
    tracker.on_success(1, 5.0)
    assert [lp.endpoint_key for lp in tracker.closed] == [3, 1]
    assert [lp.endpoint_key for lp in tracker.all_loops()] == [1, 2, 3]
    assert [lp.healed_s for lp in tracker.all_loops()] == [5.0, None, 4.0]


def reference_loops(events: list[tuple[bool, int]]) -> list[LoopRow]:
    """Loops from the whole stream at once: per endpoint, maximal runs of discards."""
    attempts: dict[int, list[tuple[float, bool]]] = {}
    for i, (success, endpoint) in enumerate(events):
        attempts.setdefault(endpoint, []).append((float(i), success))
    out: list[LoopRow] = []
    for endpoint, seq in attempts.items():
        i = 0
        while i < len(seq):
            if seq[i][1]:
                i += 1
                continue
            j = i
            while j < len(seq) and not seq[j][1]:
                j += 1
            healed = seq[j][0] if j < len(seq) else None
            length = j - i
            out.append((endpoint, seq[i][0], length, length > 1 or healed is not None, healed))
            i = j
    return sorted(out, key=lambda row: row[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 4)), max_size=40))
def test_tracker_matches_offline_reference(events: list[tuple[bool, int]]) -> None:
    """Online tracking of any discard/success stream equals the offline definition."""
    tracker = LoopTracker()
    for i, (success, endpoint) in enumerate(events):
        if success:
            tracker.on_success(endpoint, float(i))
        else:
            tracker.on_discard(endpoint, float(i))
    assert rows(tracker.all_loops()) == reference_loops(events)
    assert len(tracker.open) == len({lp.endpoint_key for lp in tracker.open.values()})
    assert all(lp.healed_s is None for lp in tracker.open.values())
    assert all(lp.healed_s is not None for lp in tracker.closed)
