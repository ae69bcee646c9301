"""The cases, as data: tiny scenarios replayed on real SGLang and on the simulator.

A case names its page size, its SWA window (tokens) or Mamba or DSA stack, the releases it runs
on, and its steps.
A step is one request on one instance (instances share one storage backend; a new instance
starts with an empty device). Its sequence is a list of segments `[name, pages]`: the tokens
of segment `name`'s first `pages` pages, so two sequences that start with the same segments
share a prefix. Faults name a step, a pool, a page of that step's sequence and a kind
(`delete` before the hit query, `vanish` after it, `read_fail`, `write_fail`).
"""

from __future__ import annotations

from typing import Any

POOLS = ("kv", "swa", "mamba", "indexer")


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
HEAL = [("producer", A4), ("consumer", A4), ("third", A4)]
"""A discard on the consumer, its backup's rewrite, and a fresh instance's retry."""


def _fault(step: int, pool: str, page: int, kind: str) -> dict[str, Any]:
    return {"step": step, "pool": pool, "page": page, "kind": kind}


def _faulted(
    kind: str, pool: str, page: int, steps: list[Any] = ROUND_TRIP, **extra: Any
) -> dict[str, Any]:
    what = {
        "delete": "deleted before the query",
        "vanish": "vanished after the query",
        "read_fail": "read fails",
        "write_fail": "write fails",
    }[kind]
    step = 0 if kind == "write_fail" else 1
    name = f"{pool} page {page} {what}" + (" then healed" if steps is HEAL else "")
    for stack in ("mamba", "dsa"):
        if extra.get(stack):
            name = f"{stack}: {name}"
    return _case(name, steps, faults=[_fault(step, pool, page, kind)], **extra)


CASES: list[dict[str, Any]] = [
    _case("round trip", ROUND_TRIP),
    _case("round trip, one page (shorter than the window)", [("p", [["A", 1]]), ("c", [["A", 1]])]),
    _case("round trip, two pages (one window)", [("p", [["A", 2]]), ("c", [["A", 2]])]),
    _case("round trip, three pages", [("p", [["A", 3]]), ("c", [["A", 3]])]),
    _case("round trip, eight pages", [("p", [["A", 8]]), ("c", [["A", 8]])]),
    _case("round trip, window of one page", ROUND_TRIP, window_tokens=4),
    _case("round trip, window not a page multiple", ROUND_TRIP, window_tokens=6),
    _case("round trip, page of 8 tokens", ROUND_TRIP, page_size=8, window_tokens=16),
    _case("same instance again: device hit", [("p", A4), ("p", A4)]),
    *(
        _faulted(kind, pool, page)
        for kind in ("delete", "vanish", "read_fail", "write_fail")
        for pool, page in (("swa", 3), ("swa", 2), ("kv", 3), ("kv", 1))
    ),
    _faulted("vanish", "swa", 3, HEAL),
    _faulted("read_fail", "swa", 3, HEAL),
    _faulted("vanish", "kv", 2, HEAL),
    _faulted("delete", "swa", 3, HEAL),
    _case(
        "kv and swa of the last page deleted",
        ROUND_TRIP,
        faults=[_fault(1, "kv", 3, "delete"), _fault(1, "swa", 3, "delete")],
    ),
    _case("consumer extends the stored prefix", [("p", A4), ("c", [["A", 4], ["C", 2]])]),
    _case("consumer branches inside the stored node", [("p", A4), ("c", [["A", 2], ["B", 2]])]),
    _case(
        "branch inside a node on one instance, then a fresh consumer",
        [("p", A4), ("p", [["A", 2], ["B", 2]]), ("c", [["A", 2], ["B", 2]])],
    ),
    _case(
        "two requests sharing a prefix on one instance, then a fresh consumer",
        [("p", A4), ("p", [["A", 4], ["B", 2]]), ("c", [["A", 4], ["B", 2]])],
    ),
    _case(
        "existence cache full: the first sequence's beliefs evicted, then written again",
        [("p", A4), ("p", [["B", 4]]), ("c", A4), ("p", A4)],
        existence_entries=4,
    ),
]

MAMBA = {"window_tokens": None, "mamba": True, "releases": ["0.5.23"]}
"""FULL+Mamba: buffer_only Mamba is accepted from 0.5.22 (0.5.19's init_hicache refuses it)."""
CASES += [
    _case("mamba: round trip", ROUND_TRIP, **MAMBA),
    _case("mamba: round trip, one page", [("p", [["A", 1]]), ("c", [["A", 1]])], **MAMBA),
    *(
        _faulted(kind, "mamba", 3, **MAMBA)
        for kind in ("delete", "vanish", "read_fail", "write_fail")
    ),
    _faulted("vanish", "mamba", 3, HEAL, **MAMBA),
    _faulted("read_fail", "mamba", 3, HEAL, **MAMBA),
    _faulted("delete", "kv", 1, **MAMBA),
    _faulted("vanish", "kv", 2, **MAMBA),
    _case(
        "mamba: consumer extends the stored prefix",
        [("p", A4), ("c", [["A", 4], ["C", 2]])],
        **MAMBA,
    ),
    _case(
        "mamba: consumer branches inside the stored node",
        [("p", A4), ("c", [["A", 2], ["B", 2]])],
        **MAMBA,
    ),
    _case(
        "mamba: existence cache full, then written again",
        [("p", A4), ("p", [["B", 4]]), ("c", A4), ("p", A4)],
        existence_entries=4,
        **MAMBA,
    ),
    _case(
        "mamba: two requests sharing a prefix on one instance, then a fresh consumer",
        [("p", A4), ("p", [["A", 4], ["B", 2]]), ("c", [["A", 4], ["B", 2]])],
        **MAMBA,
    ),
]

DSA = {"page_size": 64, "window_tokens": None, "dsa": True, "releases": ["0.5.23"]}
"""DeepSeek DSA: MLA KV and the indexer sidecar, one object per KV page, on SGLang's 64-token
pages (`dsa.py`). 0.5.23 only: 0.5.19 refuses a sidecar storage pool in buffer_only mode."""
CASES += [
    _case("dsa: round trip", ROUND_TRIP, **DSA),
    _case("dsa: round trip, one page", [("p", [["A", 1]]), ("c", [["A", 1]])], **DSA),
    *(
        _faulted(kind, pool, page, **DSA)
        for kind in ("delete", "vanish", "read_fail", "write_fail")
        for pool, page in (("indexer", 3), ("indexer", 1), ("kv", 1))
    ),
    _faulted("vanish", "indexer", 1, HEAL, **DSA),
    _faulted("read_fail", "indexer", 2, HEAL, **DSA),
    _faulted("delete", "kv", 3, **DSA),
    _case(
        "dsa: kv page 3 and indexer page 1 deleted (the shorter run clamps)",
        ROUND_TRIP,
        faults=[_fault(1, "kv", 3, "delete"), _fault(1, "indexer", 1, "delete")],
        **DSA,
    ),
    _case(
        "dsa: indexer page 0 deleted (clamped to nothing)",
        ROUND_TRIP,
        faults=[_fault(1, "indexer", 0, "delete")],
        **DSA,
    ),
    _case(
        "dsa: consumer extends the stored prefix",
        [("p", A4), ("c", [["A", 4], ["C", 2]])],
        **DSA,
    ),
    _case(
        "dsa: existence cache full, then written again",
        [("p", A4), ("p", [["B", 4]]), ("c", A4), ("p", A4)],
        existence_entries=4,
        **DSA,
    ),
]

NODE_GRANULARITY = (
    "model mismatch: after a partial load the model's backup re-offers every KV page of the "
    "node, SGLang only the pages from the loaded span's end (the backend skips the extra ones "
    "as stored: objects, bytes stored and beliefs agree; exists/put calls and staged bytes "
    "differ)"
)
BRANCH_WINDOW = (
    "model mismatch: a branch made inside a node after the first request freed its "
    "out-of-window SWA slots: the model writes SWA objects for the branch point's pages, "
    "SGLang has none left to write"
)
FAILED_PUT_ENDS_BATCH = (
    "model mismatch: a failed KV put ends the rest of the node's KV write in SGLang (the file "
    "backend's batch_set returns at the first failed set, and the backup stops there), the "
    "model still writes the node's later KV pages; SGLang's storage lacks them until a "
    "consumer's hit query heals the beliefs and its backup rewrites them"
)
_KNOWN = {
    **{
        name: {"0.5.23": NODE_GRANULARITY}
        for name in (
            "kv page 3 deleted before the query",
            "kv page 3 vanished after the query",
            "kv page 3 read fails",
            "kv page 3 write fails",
            "kv page 2 vanished after the query then healed",
            "kv and swa of the last page deleted",
            "consumer branches inside the stored node",
        )
    },
    "dsa: kv page 1 write fails": {"0.5.23": FAILED_PUT_ENDS_BATCH},
    "branch inside a node on one instance, then a fresh consumer": {
        "0.5.23": BRANCH_WINDOW,
        "0.5.19": BRANCH_WINDOW,
    },
}
"""Per case, the releases where it must disagree and why (0.5.19 re-offers every KV page of
a partly loaded node, as the model does).

The threshold floor (from 0.5.20 a buffer_only server raises the prefetch threshold to one full
SWA window, `0.5.23: unified_cache/storage_attachment.py:resolve_prefetch_threshold`) is the
release profile's `prefetch.threshold_floor`, so a one-page span agrees on both releases."""
for _c in CASES:
    if _c["name"] in _KNOWN:
        _c["simplification"] = _KNOWN[_c["name"]]
