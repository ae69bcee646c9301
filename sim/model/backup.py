"""The write path: which nodes are backed up to storage, with which aux tail keys, and what
the server then believes storage holds.

In `buffer_only` mode the tree does not know what storage holds, so every node insert is gated
by the existence cache (SGLang's enqueue_backup_intent): the FULL check skips the whole node —
KV and every aux pool's tail — when every KV page is believed stored or in flight; the
parent-cover gate drops a node whose parent is neither the root, believed, nor in flight. At
the acknowledgement the node's KV keys become beliefs whether or not they were stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from sim.model.existence import ExistenceCache
from sim.model.node import Node
from sim.model.pools import Pool
from sim.model.storage import Storage

GateVerdict = Literal["write", "skip_covered", "drop_parent"]


@dataclass
class BackupIntent:
    """A node queued for backup, with the page keys snapshotted when it was enqueued."""

    node: Node
    pages: tuple[int, ...]
    enqueued_s: float


@dataclass
class StagedWrite:
    """A backup picked up by the writer: the aux keys still on the device, the bytes staged
    (they cross PCIe) and the bytes storage will really write (keys it does not report as
    stored; the backend skips the others)."""

    intent: BackupIntent
    aux_keys: dict[str, tuple[int, ...]]
    nbytes: int
    write_bytes: int
    kv_to_write: int


@dataclass
class Acknowledgement:
    """What storage said to one node write."""

    kv_ok: list[bool]
    aux_ok: dict[str, list[bool]]
    rewrite_pages: int
    """Pages written again after a heal had dropped their beliefs."""


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
    """The two admission checks of a backup intent, in SGLang's order."""
    if existence.covers_all(node.pages, extra_cover=inflight):
        return "skip_covered"
    parent = node.parent
    if parent is not root and parent is not None:
        last = parent.last_page
        if last not in inflight and not existence.contains(last):
            return "drop_parent"
    return "write"


def aux_backup_keys(
    node: Node, pages: Sequence[int], aux: Sequence[Pool]
) -> dict[str, tuple[int, ...]]:
    """Aux keys a node write stores, decided at staging: only state still on the device.

    Each aux pool whose state the node still holds writes its tail at the node's end (SWA: the
    trailing min(window, node pages) pages; Mamba: the state keyed by the last page).
    """
    resident = node.resident_aux
    return {pool.name: pool.backup_keys(pages) for pool in aux if pool.name in resident}


class WritePath:
    """Backup offers, their gates, in-flight pages, acknowledgements, and the beliefs a heal
    drops (SGLang: HiCacheController's write-through backup and its StorageExistenceCache)."""

    def __init__(self, existence: ExistenceCache, storage: Storage, root: Node, *, gated: bool):
        self.existence = existence
        self.storage = storage
        self.root = root
        self.gated = gated
        """buffer_only mode: offers pass the existence-cache gates and stale nodes are dropped."""
        self.inflight = InflightPages()
        self.inflight_nodes: set[int] = set()
        self.heal_dropped: set[int] = set()
        """Pages whose beliefs a heal dropped and that have not been written since."""

    # ------------------------------------------------------------------ beliefs

    def believe(self, keys: Iterable[int]) -> None:
        """Pages a prefetch fetched are believed stored."""
        self.existence.add(keys)

    def forget(self, keys: Iterable[int]) -> list[int]:
        """Drop these beliefs (a heal rule's choice); returns the keys that were believed."""
        dropped = self.existence.invalidate(keys)
        self.heal_dropped.update(dropped)
        return dropped

    def forget_beyond(self, span: Sequence[int], keep_pages: int) -> list[int]:
        """Drop the beliefs of span[keep_pages:] (the hit-query heal)."""
        dropped = self.existence.invalidate_beyond(span, keep_pages)
        self.heal_dropped.update(dropped)
        return dropped

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
        if self.gated:
            verdict = gate_backup(self.existence, node, self.inflight, self.root)
            if verdict != "write":
                return verdict
        pages = tuple(node.pages)
        self.inflight.add(pages)
        self.inflight_nodes.add(node.nid)
        return BackupIntent(node, pages, now_s)

    def stage(self, intent: BackupIntent, now_s: float) -> StagedWrite | None:
        """Pick up a queued write: None (and released) when a gated node left the device."""
        node, pages = intent.node, intent.pages
        if self.gated and not (node.alive and node.on_device):
            self._release(intent)
            return None
        aux_keys = aux_backup_keys(node, pages, self.storage.aux)
        kv, pools = self.storage.kv, self.storage.pools
        nbytes = len(pages) * kv.object_bytes + sum(
            len(keys) * pools[name].object_bytes for name, keys in aux_keys.items()
        )
        kv_to_write = kv.to_write(pages, now_s)
        write_bytes = kv_to_write * kv.object_bytes + sum(
            pools[name].to_write(keys, now_s) * pools[name].object_bytes
            for name, keys in aux_keys.items()
        )
        return StagedWrite(intent, aux_keys, nbytes, write_bytes, kv_to_write)

    def acknowledge(self, staged: StagedWrite, now_s: float) -> Acknowledgement:
        """Store the objects; the KV keys become beliefs whether or not each put succeeded."""
        pages = staged.intent.pages
        pools = self.storage.pools
        kv_ok = self.storage.kv.put(pages, now_s)
        aux_ok = {name: pools[name].put(keys, now_s) for name, keys in staged.aux_keys.items()}
        self.existence.add(pages)
        self._release(staged.intent)
        rewritten = self.heal_dropped.intersection(pages)
        self.heal_dropped.difference_update(rewritten)
        return Acknowledgement(kv_ok, aux_ok, len(rewritten))

    def _release(self, intent: BackupIntent) -> None:
        self.inflight.remove(intent.pages)
        self.inflight_nodes.discard(intent.node.nid)
