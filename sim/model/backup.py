"""The write path: which nodes are backed up to storage, and with which aux tail keys.

In `buffer_only` mode the tree does not know what storage holds, so every node insert is gated
by the existence cache (SGLang's enqueue_backup_intent): the FULL check skips the whole node —
KV, SWA window and Mamba state — when every KV page is believed stored or in flight; the
parent-cover gate drops a node whose parent is neither the root, believed, nor in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sim.model.existence import ExistenceCache
from sim.model.radix import Node

GateVerdict = Literal["write", "skip_covered", "drop_parent"]


@dataclass
class BackupIntent:
    """A node queued for backup, with the page keys snapshotted when it was enqueued."""

    node: Node
    pages: tuple[int, ...]
    enqueued_s: float


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
    node: Node, pages: Sequence[int], aux_pools: Sequence[str], window_pages: int
) -> dict[str, tuple[int, ...]]:
    """Aux keys a node write stores, decided at staging: only state still on the device.

    SWA: the trailing min(window, node pages) pages before the node's end, if the node's SWA
    values were not tombstoned. Mamba: the state at the node's end, keyed by its last page.
    """
    keys: dict[str, tuple[int, ...]] = {}
    for pool in aux_pools:
        if pool == "swa" and node.swa_resident:
            keys[pool] = tuple(pages[-min(window_pages, len(pages)) :])
        elif pool == "mamba" and node.mamba_resident and node.pages[-1] == pages[-1]:
            keys[pool] = (pages[-1],)
    return keys
