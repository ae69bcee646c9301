"""Device (and cache-mode host) memory accounting, kept apart from the tree's structure.

Each resource — KV pages, each aux pool's pages or slots, host cache pages — has a capacity, a
usage, reservations for running requests, and an LRU of eviction candidates. The LRU is a heap
of (last access, node id, node) entries invalidated lazily: a node is pushed again whenever its
recency or evictability changes, and an entry counts only if it is still current when popped,
so no operation scans the tree. Heaps are compacted in place when stale entries pile up, so
references to a heap (an eviction's own included) stay valid.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from sim.model.node import Node

Candidate = Callable[[Node], bool]


class Resource:
    """One resource's capacity, usage, reservations and eviction candidates."""

    __slots__ = ("capacity", "evict", "evictable", "heap", "name", "reserved", "used")

    def __init__(
        self,
        name: str,
        capacity: int,
        evictable: Candidate,
        evict: Callable[[Node], None],
    ) -> None:
        self.name = name
        self.capacity = capacity
        self.used = 0
        self.reserved = 0
        self.evictable = evictable
        """Can this node give up this resource now (unlocked, holding it, nothing under it)?"""
        self.evict = evict
        """Take the resource from the node, with whatever that implies for the tree."""
        self.heap: list[tuple[float, int, Node]] = []

    def free(self) -> int:
        return self.capacity - self.used - self.reserved

    def make_room(self, amount: int) -> bool:
        """Evict LRU candidates until `amount` fits; False if it cannot."""
        heap = self.heap
        evictable, evict = self.evictable, self.evict
        while self.free() < amount:
            while heap:
                access, _, node = heapq.heappop(heap)
                if access == node.last_access_s and evictable(node):
                    evict(node)
                    break
            else:
                return False
        return True

    def compact(self) -> None:
        """Keep one current entry per candidate, in place."""
        ok = self.evictable
        heap = self.heap
        live = {(n.last_access_s, n.nid): n for _, _, n in heap if ok(n)}
        heap[:] = [(a, nid, n) for (a, nid), n in live.items() if a == n.last_access_s]
        heapq.heapify(heap)

    def __repr__(self) -> str:
        return f"Resource({self.name}, {self.used}+{self.reserved}/{self.capacity})"


# ---------------------------------------------------------------- eviction candidates


def kv_evictable(node: Node) -> bool:
    """An unlocked device leaf: no child of it is on the device.

    A plain loop: it runs on every heap push and pop, and a generator costs more than the
    few children it looks at.
    """
    if not (node.alive and node.on_device and node.lock_ref == 0):
        return False
    for child in node.children.values():  # noqa: SIM110
        if child.on_device:
            return False
    return True


def aux_evictable(name: str) -> Callable[[Node], bool]:
    def evictable(node: Node) -> bool:
        return node.alive and node.on_device and node.lock_ref == 0 and name in node.resident_aux

    return evictable


def host_evictable(node: Node) -> bool:
    return node.alive and node.on_host and not node.on_device and not node.children
