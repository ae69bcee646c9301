"""Counting conformance cases and saying what disagreed.

Every property test calls `agree` once a case: the release, the property (a row of the table in
docs/fidelity.md), the SGLang function the case drove, the input, and both answers. The first
disagreement fails the test with all of that in its message; the counts of cases run and held go
into the table that `conftest.py` writes at the end of the run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

RUN: Counter[tuple[str, str]] = Counter()
"""Cases run, by (release, property)."""
HELD: Counter[tuple[str, str]] = Counter()
"""Cases whose answers agreed, by (release, property)."""


class Disagreement(AssertionError):
    """The model and a release answered one case differently."""


def agree(release: str, prop: str, function: str, case: Any, ours: Any, theirs: Any) -> None:
    """Count one case; raise naming the release, the function, the input and both answers when
    the model's answer is not SGLang's."""
    RUN[release, prop] += 1
    if ours == theirs:
        HELD[release, prop] += 1
        return
    raise Disagreement(
        f"sglang {release} {function}\n  input: {case!r}\n  sglang: {theirs!r}\n  model:  {ours!r}"
    )


def counts() -> list[list[Any]]:
    """This process's counts as plain lists (`[release, property, run, held]`), the form an
    xdist worker can hand to the controller."""
    return [[release, prop, run, HELD[release, prop]] for (release, prop), run in RUN.items()]


def add(rows: list[list[Any]]) -> None:
    """Add a worker's `counts()` to this process's."""
    for release, prop, run, held in rows:
        RUN[release, prop] += run
        HELD[release, prop] += held
