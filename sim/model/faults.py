"""A storage pool's fault draws: one random stream per fault source.

A pool fails reads (`get_fail_prob`), fails writes (`put_fail_prob`) and tears the shards it
stores (`torn_put_prob`). Each source draws from its own stream, so changing one source's rate,
or switching it on at a rate that never fires, never moves another source's draws (common
random numbers across variants). The streams are spawned from the run's seed with the pool's
`stream_id` and the source's index as spawn key: `(stream_id, 0)` reads, `(stream_id, 1)`
writes, `(stream_id, 2)` tears. Backend-side evictions draw from a stream of their own,
`(EVICTION_STREAM, stream_id)` (`sim.model.build`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FAULT_SOURCES = ("get", "put", "torn")
"""The fault sources of a pool, in spawn-key order: its streams are (stream_id, index)."""

FAILED_READS = ("keep", "delete", "halt", "miss_batch")
"""What a failed read (a failure draw or a torn object) does: `keep` reports it and leaves the
object, so `exists` goes on reporting it; `delete` also removes the object; `halt` raises out of
the backend, which stops the reading server's storage prefetch for the rest of the run (SGLang's
file backend to 0.5.21); `miss_batch` raises to a reader that catches it: the whole call (a KV
batch, an aux transfer) counts 0 pages, the object stays, and reading goes on with the next
prefetch (the file backend from 0.5.22, whose cache controller catches the error)."""


@dataclass
class FaultStreams:
    """The three fault streams of one pool."""

    get: np.random.Generator
    """Read failures: one draw per key (and rank) of each `get` while `get_fail_prob` > 0."""
    put: np.random.Generator
    """Write failures: one draw per key (and rank) offered to each `put` outside an outage."""
    torn: np.random.Generator
    """Torn shards: one draw per key (and rank) offered to each `put` outside an outage."""

    @classmethod
    def seeded(cls, seed: int, *spawn_key: int) -> FaultStreams:
        """The streams `(*spawn_key, i)` of `seed`, i the source's index in FAULT_SOURCES."""
        get, put, torn = (
            np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(*spawn_key, i)))
            for i in range(len(FAULT_SOURCES))
        )
        return cls(get, put, torn)


def draws(rng: np.random.Generator, n: int, prob: float, ranks: int) -> np.ndarray | None:
    """Failure draws from `rng`, one per key and rank (a vector for one rank, else n rows);
    None, taking no draw, when nothing can fail."""
    if prob <= 0.0 or n == 0:
        return None
    if ranks == 1:
        return rng.random(n) < prob
    return rng.random((n, ranks)) < prob


def shards_stored(
    shards: dict[int, int], key: int, fails: np.ndarray | None, i: int, ranks: int
) -> bool:
    """Write an absent key's shards that the `i`-th draws let through, noting in `shards` the
    ranks that hold one while some lack theirs; True once every rank holds one (one rank: the
    draw itself)."""
    if ranks == 1:
        return fails is None or not fails[i]
    mask = shards.pop(key, 0)
    if fails is None:
        return True
    for rank, failed in enumerate(fails[i]):
        if not failed:
            mask |= 1 << rank
    if mask == (1 << ranks) - 1:
        return True
    if mask:
        shards[key] = mask
    return False
