"""Pool kinds: everything that differs between KV, SWA and Mamba, said once.

A kind is its scenario spec (a `PoolSpec` subclass under `model.<name>`, which also says what one
storage object weighs and how many trailing pages an endpoint needs) plus how its state lives on
the device (`Residency`) and the index of its random streams. Every other layer iterates over
the kinds a model has, so adding a kind is one spec class and one `register_pool_kind` call.

Aux pools are tail-keyed: to resume at endpoint E a pool needs the objects of pages
[E - n, E) of the span, n = min(tail pages, E) (SWA: the window; Mamba: one state at E;
a kind with no bound, like KV, needs every page).

A sidecar (SGLang's KV-derived pools with `PoolHitPolicy.ALL_PAGES`, DeepSeek's DSA indexer
cache) needs every page too, but owns no slots: its state sits beside each KV page on the device
and on the host (`indices_from_pool=KV`), so it has no device or host capacity of its own, is
read with every KV batch, and a shortfall clamps the KV hit instead of discarding the prefetch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from pydantic import Field

from sim.core.registry import Registry
from sim.core.spec import Bytes, Strict

KV = "kv"
DEFAULT_PAGE_SIZE = 64
"""Tokens a page holds unless the model says otherwise (SGLang's HiCache page size in our
scenarios; `model.page_size`)."""
"""The full-attention pool: the chain every other pool is keyed along, and the pool whose
beliefs drive the FULL check and the parent-cover gate."""


class Residency(Enum):
    """How a pool's state lives on the device, which decides where a prefix can resume."""

    PAGE_VALUES = "pages"
    """Values for every page of a node, resident or dropped ("tombstoned") as a whole; a match
    may end inside a resident node; both halves of a split keep them (KV, SWA)."""
    END_STATE = "slots"
    """One state at a node's end; a match may end only at a whole node that holds it; the upper
    half of a split has none (the aux hole at the cut); a running request holds one working
    slot (Mamba)."""

    @property
    def unit(self) -> str:
        """What device capacity counts: pages or slots (`device.<pool>_<unit>`)."""
        return self.value

    @property
    def per_page(self) -> bool:
        return self is Residency.PAGE_VALUES

    def units(self, node_pages: int) -> int:
        """Device units a node holding this state takes."""
        return node_pages if self.per_page else 1


class PoolSpec(Strict):
    """A pool's part of `model:`. Subclasses say what an object weighs and what an endpoint
    needs, derived from their own fields."""

    layers: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = None
    """Layers holding this pool's state. SGLang's `direct` host io copies each layer's part of
    a page (K and V; a Mamba state's conv and temporal parts) separately, so with
    `host.io_backend: direct` a page costs 2 x layers copies; null counts one copy per object."""

    def host_copies(self) -> int:
        """Copies one object of this pool takes between host and device under direct io."""
        return 1 if self.layers is None else 2 * self.layers

    def object_bytes(self, page_size: int) -> int:
        raise NotImplementedError

    def tail_pages(self, page_size: int) -> int | None:
        """Trailing pages an endpoint needs; None means every page of the span."""
        return None

    def checkpoint_pages(self, page_size: int) -> int | None:
        """Every how many pages a backup also writes this pool's tail inside a node (None:
        only at the node's end)."""
        tokens = getattr(self, "checkpoint_tokens", None)
        return None if tokens is None else tokens // page_size


CheckpointTokens = Annotated[int, Field(strict=True, ge=1, le=2**24)] | None
"""Aux checkpoints (SGLang: Mamba's `mamba_track_interval` under the extra_buffer strategy, an
SWA window every N tokens in open PR #27557): a multiple of the page size, or null."""


class KVPoolSpec(PoolSpec):
    bytes_per_token: Bytes
    replicated: bool = False
    """Every tensor-parallel rank holds the same KV (MLA's shared latent), so storage keeps
    one copy of a page, written by rank 0, and so do the sidecars riding on it (SGLang's
    `backup_skip` on the other ranks; only Mamba states stay sharded)."""

    def object_bytes(self, page_size: int) -> int:
        return page_size * self.bytes_per_token


class SWAPoolSpec(PoolSpec):
    window_tokens: Annotated[int, Field(strict=True, ge=1, le=2**24)]
    bytes_per_token: Bytes
    checkpoint_tokens: CheckpointTokens = None

    def object_bytes(self, page_size: int) -> int:
        return page_size * self.bytes_per_token

    def tail_pages(self, page_size: int) -> int:
        """A request resuming at a page boundary needs ceil(window / page) pages of history."""
        return math.ceil(self.window_tokens / page_size)


class SidecarPoolSpec(PoolSpec):
    """A KV-derived ALL_PAGES sidecar: one object per KV page, `bytes_per_token` over its
    layers (DSA: `dsa_indexer_bytes_per_token_per_layer` x layers)."""

    bytes_per_token: Bytes

    def object_bytes(self, page_size: int) -> int:
        return page_size * self.bytes_per_token


class MambaPoolSpec(PoolSpec):
    state_bytes: Bytes
    checkpoint_tokens: CheckpointTokens = None

    def object_bytes(self, page_size: int) -> int:
        return self.state_bytes

    def tail_pages(self, page_size: int) -> int:
        return 1


@dataclass(frozen=True)
class PoolKind:
    """A registered kind: its spec class, its device residency and its stream index."""

    name: str
    spec: type[PoolSpec]
    residency: Residency
    stream_id: int
    """Random streams: faults use (stream_id, source) (`sim.model.faults`), backend evictions
    (EVICTION_STREAM, stream_id)."""
    stages_on_host: bool = False
    """In buffer_only mode its prefetch windows and write tails take host staging of their own
    (`host.<name>_pages`; SGLang's SWA host pool)."""
    rides_on_kv: bool = False
    """A KV-derived sidecar: its state shares the KV pages' device and host slots (no capacity
    of its own), it is read with each KV batch and clamps the KV hit (SGLang's
    `SidecarPoolSpec(indices_from_pool=KV)`)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9]*", self.name) or self.name in _TAKEN_NAMES:
            raise ValueError(
                f"pool kind {self.name!r}: a name is lower-case letters and digits, and not "
                f"one of {sorted(_TAKEN_NAMES)}"
            )

    @property
    def device_key(self) -> str | None:
        """The `device:` key that sizes this pool on the device (None: a sidecar, sized with
        the KV pages it rides on)."""
        return None if self.rides_on_kv else f"{self.name}_{self.residency.unit}"


WORKLOAD_STREAM = 0
EVICTION_STREAM = 4
ROUTER_STREAM = 5
RESERVED_STREAMS = frozenset({WORKLOAD_STREAM, EVICTION_STREAM, ROUTER_STREAM})
"""Stream indices that are not pool fault streams: the workload, evictions (4, pool), and the
cluster's router."""

_TAKEN_NAMES = frozenset({"page_size", "pools", "copy", "json", "dict", "schema"})
"""Names a pool cannot have: `model:` fields and methods a spec model already has."""

POOL_KINDS: Registry[PoolKind] = Registry("pool kind")


def register_pool_kind(kind: PoolKind) -> PoolKind:
    """Make a pool kind available to scenarios (`model.<name>`, `device.<name>_<unit>`,
    `storage.pools.<name>`)."""
    taken = {k.stream_id for k in POOL_KINDS.values()} | RESERVED_STREAMS
    if kind.stream_id in taken:
        raise ValueError(f"pool kind {kind.name!r}: stream_id {kind.stream_id} is taken")
    return POOL_KINDS.register(kind.name, kind)


register_pool_kind(PoolKind(KV, KVPoolSpec, Residency.PAGE_VALUES, stream_id=1))
register_pool_kind(
    PoolKind("swa", SWAPoolSpec, Residency.PAGE_VALUES, stream_id=2, stages_on_host=True)
)
register_pool_kind(PoolKind("mamba", MambaPoolSpec, Residency.END_STATE, stream_id=3))
register_pool_kind(
    PoolKind("indexer", SidecarPoolSpec, Residency.PAGE_VALUES, stream_id=6, rides_on_kv=True)
)


@dataclass(frozen=True)
class Pool:
    """One pool of a model: its kind resolved against the model's spec and page size."""

    kind: PoolKind
    object_bytes: int
    tail_pages: int | None
    checkpoint_pages: int | None = None
    """A backup also writes the tail at every multiple of this many pages inside a node."""

    @classmethod
    def of(cls, kind: PoolKind, spec: PoolSpec, page_size: int) -> Pool:
        return cls(
            kind,
            spec.object_bytes(page_size),
            spec.tail_pages(page_size),
            spec.checkpoint_pages(page_size),
        )

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def residency(self) -> Residency:
        return self.kind.residency

    @property
    def rides_on_kv(self) -> bool:
        return self.kind.rides_on_kv

    def tail_len(self, end: int) -> int:
        """How many pages before `end` this pool needs: min(tail pages, end)."""
        return end if self.tail_pages is None else min(self.tail_pages, end)

    def tail_keys(self, span: Sequence[int], end: int) -> tuple[int, ...]:
        """The keys this pool needs to resume at `end`: span[end - n, end)."""
        return tuple(span[end - self.tail_len(end) : end])

    def transfer_keys(
        self, hit_span: Sequence[int], span_pages: int, start_page: int, buffer_only: bool = False
    ) -> tuple[int, ...] | None:
        """Keys a prefetch asks this pool for (SGLang's _sync_trailing_keys).

        A span that starts mid-tree and is shorter than the tail this pool needs asks for the
        span's own pages in `buffer_only` mode (the device prefix holds the rest),
        and otherwise gets no transfer at all (None), which the hybrid check counts as a failure.
        """
        tail = self.tail_pages
        if tail is not None and start_page > 0 and span_pages < tail and not buffer_only:
            return None
        return self.tail_keys(hit_span, len(hit_span))

    def backup_keys(self, node_pages: Sequence[int], start: int = 0) -> tuple[int, ...]:
        """Keys a backup of a node holding this pool for every page writes: its tail at the
        node's end and, with checkpoints, at every absolute page index inside the node that is
        a multiple of the interval (`start`: the node's first page index)."""
        end = start + len(node_pages)
        every = self.checkpoint_pages
        if every is None:
            return self.keys_at(node_pages, start, (end,))
        return self.keys_at(
            node_pages, start, [*range(start + every - start % every, end, every), end]
        )

    def keys_at(
        self, node_pages: Sequence[int], start: int, points: Iterable[int]
    ) -> tuple[int, ...]:
        """This pool's tail keys at each resume point (absolute page indices inside the run of
        pages `node_pages`, the first at `start`), taken within that run."""
        return tuple(
            dict.fromkeys(k for p in points for k in self.tail_keys(node_pages, p - start))
        )
