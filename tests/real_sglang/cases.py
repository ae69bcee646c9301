"""The cases, as data: tiny scenarios replayed on real SGLang and on the simulator.

A case names its page size, its SWA window (tokens), the releases it runs on, and its steps.
A step is one request on one instance (instances share one storage backend; a new instance
starts with an empty device). Its sequence is a list of segments `[name, pages]`: the tokens
of segment `name`'s first `pages` pages, so two sequences that start with the same segments
share a prefix. Faults name a step, a pool, a page of that step's sequence and a kind
(`delete` before the hit query, `vanish` after it, `read_fail`, `write_fail`).
"""

from __future__ import annotations

from typing import Any

POOLS = ("kv", "swa", "mamba")


def tokens_of(seq: list[list[Any]], page_size: int) -> list[int]:
    """Token ids of a sequence: segment `name` page `j` token `t` is a distinct integer that
    depends on the segment, the page and the token only."""
    tokens: list[int] = []
    for name, pages in seq:
        base = 1 + sum(ord(c) * 31**i for i, c in enumerate(name)) % 997 * 100_000
        for j in range(pages):
            tokens.extend(base + j * page_size + t for t in range(page_size))
    return tokens


def _case(name: str, steps: list[tuple[str, list[list[Any]]]], **extra: Any) -> dict[str, Any]:
    case: dict[str, Any] = {
        "name": name,
        "page_size": 4,
        "window_tokens": 8,
        "releases": ["0.5.23", "0.5.19"],
        "steps": [{"instance": i, "seq": s} for i, s in steps],
    }
    case.update(extra)
    return case


A4 = [["A", 4]]
ROUND_TRIP = [("producer", A4), ("consumer", A4)]

CASES: list[dict[str, Any]] = [
    _case("round trip", ROUND_TRIP),
    _case(
        "swa tail deleted before the query",
        ROUND_TRIP,
        faults=[{"step": 1, "pool": "swa", "page": 3, "kind": "delete"}],
    ),
]
