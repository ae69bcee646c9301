"""The write path: which nodes are backed up to storage, with which aux tail keys, and what
the server then believes storage holds.

In `buffer_only` mode the tree does not know what storage holds, so every node insert is gated
by the existence cache (SGLang's enqueue_backup_intent): the FULL check skips the whole node —
KV and every aux pool's tail — when every KV page is believed stored or in flight (with per-pool
beliefs, each pool is checked and written on its own, except that a sidecar rides on KV's write:
a sidecar page to write re-offers the node's KV pages, and a KV write carries every sidecar
page, as SGLang's `_write_intents` makes one KV intent of both); the parent-cover gate drops a
node whose parent is neither the root, believed, nor in flight. At the acknowledgement the keys
written become beliefs whether or not they were stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sim.model.existence import ExistenceCache
from sim.model.node import Node
from sim.model.pools import KV, Pool
from sim.model.storage import Storage

GateVerdict = Literal["write", "skip_covered", "drop_parent", "drop_backlog", "drop_oversize"]

DROP_VERDICTS = ("stale", "drop_parent", "drop_backlog", "drop_oversize")
"""Backup intents dropped without a write (SGLang counts each in
`hicache_backup_dropped_tokens_total`): a node that left the device before it was staged, a
parent neither written nor in flight, a full backlog, an intent larger than host staging."""


@dataclass
class BackupIntent:
    """A node queued for backup, with the page keys snapshotted when it was enqueued."""

    node: Node
    pages: tuple[int, ...]
    enqueued_s: float
    write_kv: bool = True
    aux_keys: dict[str, tuple[int, ...]] | None = None
    """Per-pool beliefs: the aux keys the offer found uncovered (and put in flight); None when
    beliefs are KV only and the node's every resident aux tail is written."""


@dataclass
class StagedWrite:
    """A backup staged on the host: the aux keys still on the device and the bytes staged
    (they cross PCIe); when the writer takes it, the bytes storage will really write (keys it
    does not report as stored; the backend skips the others)."""

    intent: BackupIntent
    aux_keys: dict[str, tuple[int, ...]]
    nbytes: int
    kv_pages: int
    """KV pages staged (0 when per-pool beliefs found the node's KV covered)."""
    write_bytes: int = 0
    kv_to_write: int = 0

    @property
    def objects(self) -> dict[str, int]:
        """Objects staged, per pool."""
        return {KV: self.kv_pages, **{name: len(keys) for name, keys in self.aux_keys.items()}}

    @property
    def staging_pages(self) -> int:
        """Host pages the write stages: its KV pages, or an aux-only write's longest tail."""
        pages = max(self.kv_pages, 0)
        for keys in self.aux_keys.values():
            if len(keys) > pages:
                pages = len(keys)
        return pages


@dataclass
class Acknowledgement:
    """What storage said to one node write."""

    kv_ok: list[bool]
    aux_ok: dict[str, list[bool]]
    rewrite_pages: int
    """Pages written again after a heal had dropped their beliefs."""
    cross_instance_objects: int = 0
    """Objects put that another server of the cluster had already stored (the backend skips
    them, but they were staged and sent)."""


class InflightPages:
    """Pages from enqueue until storage ack; they count as covered for both gates.

    A page can be in flight for two nodes at once (a split), so pages are reference counted:
    the set holds every page once, `_extra` the references beyond the first, which are rare,
    so both operations stay set operations. The pages of one call are distinct (one node's run).
    """

    def __init__(self) -> None:
        self._pages: set[int] = set()
        self._extra: dict[int, int] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._pages

    def __len__(self) -> int:
        return len(self._pages)

    def add(self, pages: Sequence[int]) -> None:
        extra = self._extra
        for key in self._pages.intersection(pages):
            extra[key] = extra.get(key, 0) + 1
        self._pages.update(pages)

    def remove(self, pages: Sequence[int]) -> None:
        extra = self._extra
        held = extra.keys() & pages if extra else ()
        if not held:
            self._pages.difference_update(pages)
            return
        for key in held:
            if extra[key] == 1:
                del extra[key]
            else:
                extra[key] -= 1
        self._pages.difference_update(set(pages).difference(held))


def gate_backup(
    existence: ExistenceCache, node: Node, inflight: InflightPages, root: Node
) -> GateVerdict:
    """The two admission checks of a backup intent, in SGLang's order (KV beliefs only)."""
    if existence.covers_all(node.pages, extra_cover=inflight):
        return "skip_covered"
    if not _parent_covered(existence, node, inflight, root):
        return "drop_parent"
    return "write"


def _parent_covered(
    existence: ExistenceCache, node: Node, inflight: InflightPages, root: Node
) -> bool:
    """The parent-cover gate: the parent is the root, or its last page is in flight or believed
    (SGLang: _backup_parent_covered)."""
    parent = node.parent
    if parent is root or parent is None:
        return True
    last = parent.last_page
    return last in inflight or existence.contains(last)


def aux_backup_keys(
    node: Node, pages: Sequence[int], aux: Sequence[Pool]
) -> dict[str, tuple[int, ...]]:
    """Aux keys a node write stores, decided at staging: only state still on the device.

    A pool held for every page of the node writes its tail at the node's end (SWA: the
    trailing min(window, node pages) pages of the node) and at each checkpoint inside it. A
    pool held at resume points writes, for each point the node still holds, the tail that point
    kept (SWA: the window before it, which may reach into the parent, as SGLang splits the tree
    where a window starts; Mamba: the state keyed by the point's last page). A node's end never
    moves (a split keeps the lower half), so `pages`, snapshotted at the offer, start at
    `node.end - len(pages)`. A sidecar rides on the KV pages: it writes one object per page.
    """
    resident = node.resident_aux
    start = node.end - len(pages)
    keys: dict[str, tuple[int, ...]] = {}
    for pool in aux:
        if pool.rides_on_kv:
            keys[pool.name] = tuple(pages)
            continue
        if pool.name not in resident:
            continue
        points = resident[pool.name]
        if points is None:
            keys[pool.name] = pool.backup_keys(pages, start)
            continue
        held = sorted(p for p in points if p > start)
        reach = 0 if not held else pool.tail_len(held[0]) - (held[0] - start)
        before = _pages_before(node, start, reach) if reach > 0 else []
        keys[pool.name] = pool.keys_at([*before, *pages], start - len(before), held)
    return keys


def _pages_before(node: Node, start: int, count: int) -> list[int]:
    """The last `count` page keys of the chain before absolute page `start` (fewer near the
    root). The node may have been split since its pages were snapshotted, so an ancestor can
    hold pages at or past `start`; only those before it count."""
    out: list[int] = []
    ancestor = node.parent
    while ancestor is not None and len(out) < count:
        below = ancestor.pages[: max(0, min(ancestor.end, start) - ancestor.start)]
        out[:0] = below[len(below) - min(len(below), count - len(out)) :]
        ancestor = ancestor.parent
    return out


class WritePath:
    """Backup offers, their gates, in-flight pages, acknowledgements, and the beliefs a heal
    drops (SGLang: HiCacheController's write-through backup and its StorageExistenceCache).

    Beliefs are kept for KV only (`per_pool=False`, the PR's design: one FULL check decides
    for every pool) or for every pool (SGLang's newer PoolExistenceBeliefs: a node is written
    pool by pool, only the pools whose keys are not believed stored or in flight).
    """

    def __init__(
        self,
        existence: ExistenceCache,
        storage: Storage,
        root: Node,
        *,
        buffer_only: bool,
        aux_beliefs: Mapping[str, ExistenceCache] | None = None,
        client: int = 0,
        host_pages: int | None = None,
        backlog_cap_pages: int | None = None,
    ):
        self.client = client
        self.host_pages = host_pages
        """buffer_only mode: an intent of more KV pages than the host pool holds is dropped
        (SGLang's `_backup_oversize`)."""
        self.backlog_cap_pages = backlog_cap_pages
        """buffer_only mode: offers are dropped while this many pages wait to be staged (SGLang's
        `write_backlog_cap`, twice the device KV pool: a leak backstop)."""
        self.queued_pages = 0
        """Pages of the intents offered and not yet staged or dropped."""
        """This server's instance number: whose writes these are, for the cross-server counts."""
        self.existence = existence
        """KV beliefs: what the parent-cover gate and the KV heals read."""
        self.storage = storage
        self.root = root
        self.buffer_only = buffer_only
        """Offers pass the existence-cache gates and stale nodes are dropped (the tree does not
        know what storage holds)."""
        self.aux_beliefs = dict(aux_beliefs or {})
        """Per-pool beliefs of the aux pools (empty unless beliefs are kept per pool)."""
        self.per_pool = bool(self.aux_beliefs)
        self.inflight = InflightPages()
        self.aux_inflight = {name: InflightPages() for name in self.aux_beliefs}
        self.inflight_nodes: set[int] = set()
        self.heal_dropped: set[int] = set()
        """KV pages whose beliefs a heal dropped and that have not been written since."""
        self.aux_heal_dropped: dict[str, set[int]] = {name: set() for name in self.aux_beliefs}

    def pending_rewrites(self) -> int:
        """Objects whose beliefs a heal dropped and that have not been written since."""
        return len(self.heal_dropped) + sum(map(len, self.aux_heal_dropped.values()))

    # ------------------------------------------------------------------ beliefs

    def believe(self, keys: Iterable[int], aux: Mapping[str, Iterable[int]] | None = None) -> None:
        """Pages (and, per pool, aux keys) known to be stored become beliefs: an accepted
        prefetch's fills, a query's evidence. A heal's drop they contradict is settled."""
        keys = list(keys)
        self.existence.add(keys)
        self.heal_dropped.difference_update(keys)
        for name, aux_keys in (aux or {}).items():
            if name in self.aux_beliefs:
                aux_keys = list(aux_keys)
                self.aux_beliefs[name].add(aux_keys)
                self.aux_heal_dropped[name].difference_update(aux_keys)

    def forget(self, keys: Iterable[int], pool: str = KV) -> list[int]:
        """Drop these beliefs of one pool (a heal's choice); returns the keys that were believed."""
        cache, dropped_set = self._beliefs(pool)
        dropped = cache.invalidate(keys)
        dropped_set.update(dropped)
        return dropped

    def forget_beyond(self, span: Sequence[int], keep_pages: int, pool: str = KV) -> list[int]:
        """Drop one pool's beliefs of span[keep_pages:] (the hit-query and transfer heals)."""
        cache, dropped_set = self._beliefs(pool)
        dropped = cache.invalidate_beyond(span, keep_pages)
        dropped_set.update(dropped)
        return dropped

    def _beliefs(self, pool: str) -> tuple[ExistenceCache, set[int]]:
        if pool == KV:
            return self.existence, self.heal_dropped
        return self.aux_beliefs[pool], self.aux_heal_dropped[pool]

    # ------------------------------------------------------------------ the write path

    def candidates(self, new_nodes: list[Node], path: list[Node] | None) -> list[Node]:
        """The nodes an insert offers for backup.

        New nodes not already in storage are always offered. With the request's `path` (the
        insert after a prefill in `buffer_only` mode) every node on it is offered, parents
        first: such a server keeps no host copies, so the tree cannot tell whether storage still
        has a node and relies on the existence cache's FULL check to skip it. That is what lets
        a heal rewrite a node the request only matched, and lets its new children pass the
        parent-cover gate.
        """
        if path is not None:
            return path
        return [node for node in new_nodes if not node.backed_up]

    def offer(self, node: Node, now_s: float) -> BackupIntent | GateVerdict | None:
        """Gate a node (SGLang: enqueue_backup_intent): an intent to queue, the verdict that
        refused it, or None when the node is already queued."""
        if node.nid in self.inflight_nodes:
            return None
        node.backed_up = True
        pages = tuple(node.pages)
        aux_keys = aux_backup_keys(node, pages, self.storage.aux) if self.per_pool else {}
        write_kv = True
        if self.buffer_only and self.per_pool:
            uncovered = {
                name
                for name, keys in aux_keys.items()
                if not self.aux_beliefs[name].covers_all(keys, self.aux_inflight[name])
            }
            riders = {pool.name for pool in self.storage.sidecars}
            write_kv = bool(uncovered & riders) or not self.existence.covers_all(
                node.pages, extra_cover=self.inflight
            )
            aux_keys = {
                name: keys
                for name, keys in aux_keys.items()
                if name in uncovered or (write_kv and name in riders)
            }
            if not write_kv and not aux_keys:
                return "skip_covered"
            if not _parent_covered(self.existence, node, self.inflight, self.root):
                return "drop_parent"
        elif self.buffer_only:
            verdict = gate_backup(self.existence, node, self.inflight, self.root)
            if verdict != "write":
                return verdict
        if self.buffer_only:
            if self.backlog_cap_pages is not None and self.queued_pages >= self.backlog_cap_pages:
                return "drop_backlog"
            if self._oversize(pages, write_kv):
                return "drop_oversize"
            self.queued_pages += len(pages)
        if write_kv:
            self.inflight.add(pages)
        for name, keys in aux_keys.items():
            self.aux_inflight[name].add(keys)
        self.inflight_nodes.add(node.nid)
        return BackupIntent(node, pages, now_s, write_kv, aux_keys if self.per_pool else None)

    def _oversize(self, pages: Sequence[int], write_kv: bool) -> bool:
        return write_kv and self.host_pages is not None and len(pages) > self.host_pages

    def head_verdict(self, intent: BackupIntent) -> GateVerdict | Literal["stale"] | None:
        """buffer_only mode: why the write queue's head must be dropped now, if it must: its
        node left the device (SGLang's stale sweep), its parent is no longer written, queued
        nor believed (a dropped parent cascades to its children), or it is oversized."""
        node = intent.node
        if not (node.alive and node.on_device):
            return "stale"
        if not _parent_covered(self.existence, node, self.inflight, self.root):
            return "drop_parent"
        if self._oversize(intent.pages, intent.write_kv):
            return "drop_oversize"
        return None

    def drop(self, intent: BackupIntent) -> None:
        """Give up a queued intent without writing it."""
        self._unqueue(intent)
        self._release(intent)

    def _unqueue(self, intent: BackupIntent) -> None:
        if self.buffer_only:
            self.queued_pages -= len(intent.pages)

    def dequeue(self, intent: BackupIntent) -> None:
        """buffer_only mode: take the queue's head off the queue as it is staged, once
        `head_verdict` passed it and its `spec` was taken (the node is on the device now)."""
        self._unqueue(intent)

    def stage(self, intent: BackupIntent) -> StagedWrite | None:
        """Take a queued write off the queue: None (and released) when, in buffer_only mode, its
        node left the device; else what `spec` gives."""
        if self.buffer_only and not (intent.node.alive and intent.node.on_device):
            self.drop(intent)
            return None
        self._unqueue(intent)
        return self.spec(intent)

    def spec(self, intent: BackupIntent) -> StagedWrite:
        """What staging the write would take now: the aux keys of the state the node still
        holds (and, per pool, only the pools the offer found uncovered) and the bytes."""
        node, pages = intent.node, intent.pages
        aux_keys = aux_backup_keys(node, pages, self.storage.aux)
        if intent.aux_keys is not None:
            aux_keys = {name: keys for name, keys in aux_keys.items() if name in intent.aux_keys}
        kv, pools = self.storage.kv, self.storage.pools
        kv_pages = len(pages) if intent.write_kv else 0
        nbytes = kv_pages * kv.object_bytes
        for name, keys in aux_keys.items():
            nbytes += len(keys) * pools[name].object_bytes
        return StagedWrite(intent, aux_keys, nbytes, kv_pages)

    def plan_put(self, staged: StagedWrite, now_s: float) -> None:
        """As the writer takes a staged write: what storage will really write of it."""
        kv, pools = self.storage.kv, self.storage.pools
        kv_pages = staged.intent.pages if staged.intent.write_kv else ()
        staged.kv_to_write, kv_shards = kv.to_write(kv_pages, now_s)
        write_bytes = kv_shards * kv.object_bytes
        for name, keys in staged.aux_keys.items():
            pool = pools[name]
            write_bytes += pool.to_write(keys, now_s)[1] * pool.object_bytes
        staged.write_bytes = write_bytes

    def acknowledge(self, staged: StagedWrite, now_s: float) -> Acknowledgement:
        """Store the objects; the keys written become beliefs whether or not each put succeeded
        (SGLang: finish_storage_write_ack, deterministic across tensor-parallel ranks)."""
        intent = staged.intent
        pages = intent.pages if intent.write_kv else ()
        pools, client = self.storage.pools, self.client
        kv = self.storage.kv
        before = kv.cross_put_hits
        kv_ok = kv.put(pages, now_s, client)
        cross = kv.cross_put_hits - before
        aux_ok = {}
        for name, keys in staged.aux_keys.items():
            pool = pools[name]
            before = pool.cross_put_hits
            aux_ok[name] = pool.put(keys, now_s, client)
            cross += pool.cross_put_hits - before
        self.existence.add(pages)
        rewrites = 0
        if self.heal_dropped:
            rewritten = self.heal_dropped.intersection(pages)
            self.heal_dropped.difference_update(rewritten)
            rewrites = len(rewritten)
        for name, keys in staged.aux_keys.items():
            if name in self.aux_beliefs:
                self.aux_beliefs[name].add(keys)
                again = self.aux_heal_dropped[name].intersection(keys)
                self.aux_heal_dropped[name].difference_update(again)
                rewrites += len(again)
        self._release(intent)
        return Acknowledgement(kv_ok, aux_ok, rewrites, cross)

    def _release(self, intent: BackupIntent) -> None:
        if intent.write_kv:
            self.inflight.remove(intent.pages)
        for name, keys in (intent.aux_keys or {}).items():
            self.aux_inflight[name].remove(keys)
        self.inflight_nodes.discard(intent.node.nid)
