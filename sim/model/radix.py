"""The radix tree of cached prefixes, with the device pools that hang off its nodes.

A `Node` holds a run of page keys. Its KV pages live on the device (`on_device`) and, in `cache`
host mode, possibly on the host (`on_host`). Aux state is per node: the SWA values of its pages
(`swa_resident`, dropped — "tombstoned" — under SWA pool pressure while the KV stays) and the
Mamba state at its end (`mamba_resident`). A prefix can be resumed on the device only at a point
where every aux pool has its state, so aux holes shorten device matches as they do in SGLang.

Splitting a node keeps the pages' SWA residency in both halves but leaves the upper half without
a Mamba state (the state exists only at the original end): the "aux hole at the cut".

Eviction is LRU over lazily invalidated heaps, one per resource, so no operation scans the tree.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar


class Node:
    """A run of pages in the tree (SGLang: TreeNode)."""

    __slots__ = (
        "alive",
        "backed_up",
        "children",
        "host_aux",
        "last_access_s",
        "lock_ref",
        "mamba_resident",
        "nid",
        "on_device",
        "on_host",
        "pages",
        "parent",
        "start",
        "swa_resident",
    )

    def __init__(self, nid: int, pages: list[int], parent: Node | None, start: int) -> None:
        self.nid = nid
        self.pages = pages
        self.parent = parent
        self.start = start
        self.children: dict[int, Node] = {}
        self.lock_ref = 0
        self.last_access_s = 0.0
        self.on_device = False
        self.on_host = False
        self.host_aux = False
        self.swa_resident = False
        self.mamba_resident = False
        self.backed_up = False
        self.alive = True

    @property
    def end(self) -> int:
        """Absolute page index just past this node's last page."""
        return self.start + len(self.pages)

    @property
    def last_page(self) -> int:
        return self.pages[-1]

    def __repr__(self) -> str:
        return f"Node({self.nid}, [{self.start}:{self.end}), dev={self.on_device})"


@dataclass(frozen=True)
class Match:
    """Result of matching a chain: legal resume points on the device and on the host."""

    device_pages: int
    host_pages: int
    device_node: Node
    host_node: Node


_Candidate = Callable[[Node], bool]


class RadixTree:
    """Radix tree plus device (and, in cache mode, host) capacity accounting."""

    def __init__(
        self,
        *,
        kv_pages: int,
        swa_pages: int | None,
        mamba_slots: int | None,
        host_cache_pages: int | None,
    ) -> None:
        self.kv_capacity = kv_pages
        self.swa_capacity = swa_pages
        self.mamba_capacity = mamba_slots
        self.host_capacity = host_cache_pages
        self._ids = itertools.count(1)
        self.root = Node(0, [], None, 0)
        self.root.on_device = self.root.on_host = True
        self.root.swa_resident = self.root.mamba_resident = self.root.host_aux = True
        self.root.lock_ref = 1
        self.nodes = 0
        self.kv_used = 0
        self.kv_reserved = 0
        self.swa_used = 0
        self.mamba_used = 0
        self.mamba_reserved = 0
        self.host_used = 0
        self.swa_tombstoned_pages = 0
        self.device_evicted_pages = 0
        self._heaps: dict[str, list[tuple[float, int, Node]]] = {
            "kv": [],
            "swa": [],
            "mamba": [],
            "host": [],
        }
        has = {
            "kv": True,
            "swa": self.has_swa,
            "mamba": self.has_mamba,
            "host": host_cache_pages is not None,
        }
        self._pushed = [
            (heap, self._EVICTABLE[resource], resource)
            for resource, heap in self._heaps.items()
            if has[resource]
        ]
        """The heaps a node is pushed onto: only those of resources this tree has. Heaps are
        compacted in place, so these references and an eviction's own stay current."""

    @property
    def has_swa(self) -> bool:
        return self.swa_capacity is not None

    @property
    def has_mamba(self) -> bool:
        return self.mamba_capacity is not None

    # ---------------------------------------------------------------- matching

    def match(self, pages: Sequence[int]) -> Match:
        """Longest legal device resume point, then how far the host extends it (cache mode)."""
        node = self.root
        pos = 0
        dev_pages, dev_node = 0, node
        host_pages, host_node = 0, node
        on_device_path = True
        while pos < len(pages):
            child = node.children.get(pages[pos])
            if child is None:
                break
            n = _common_prefix(child.pages, pages, pos)
            whole = n == len(child.pages)
            on_device_path = on_device_path and child.on_device
            if on_device_path and self._device_resumable(child, whole):
                dev_pages, dev_node = pos + n, child
            if child.on_host and self._host_resumable(child, whole):
                host_pages, host_node = pos + n, child
            elif not on_device_path:
                break
            if not whole:
                break
            pos += n
            node = child
        host_pages = max(host_pages, dev_pages)
        if host_pages == dev_pages:
            host_node = dev_node
        return Match(dev_pages, host_pages, dev_node, host_node)

    def _device_resumable(self, node: Node, whole: bool) -> bool:
        if self.has_swa and not node.swa_resident:
            return False
        if self.has_mamba:
            return whole and node.mamba_resident
        return True

    def _host_resumable(self, node: Node, whole: bool) -> bool:
        if not (self.has_swa or self.has_mamba):
            return True
        return whole and node.host_aux

    def touch(self, node: Node, now_s: float) -> None:
        """Mark a node and its ancestors used now (LRU recency)."""
        while node is not self.root and node is not None:
            node.last_access_s = now_s
            self._push(node)
            node = node.parent  # type: ignore[assignment]

    def lock(self, node: Node) -> None:
        while node is not None:
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: Node) -> None:
        while node is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._push(node)
            node = node.parent  # type: ignore[assignment]

    # ---------------------------------------------------------------- insertion

    def insert(
        self,
        pages: Sequence[int],
        now_s: float,
        *,
        backed_up: bool = False,
        host_copy: bool = False,
    ) -> tuple[Node, list[Node]]:
        """Put `pages` on the device; returns the node ending at len(pages) and the new nodes.

        Existing nodes on the path become device-resident again (a host hit loaded back). New
        nodes get SWA values if the SWA pool can make room and the last one gets the Mamba
        state if a slot can be freed; otherwise they are born tombstoned. `backed_up` marks pages
        that came from storage; `host_copy` marks a write-through copy on the host (cache mode).
        """
        node = self.root
        pos = 0
        new_nodes: list[Node] = []
        while pos < len(pages):
            child = node.children.get(pages[pos])
            if child is None:
                child = self._new_leaf(node, list(pages[pos:]), pos, backed_up)
                new_nodes.append(child)
            else:
                n = _common_prefix(child.pages, pages, pos)
                if n < len(child.pages):
                    child = self._split(child, n)
                if not child.on_device:
                    self._to_device(child)
            node = child
            pos = node.end
        wants_state = node is not self.root and self.has_mamba and not node.mamba_resident
        if wants_state and self._make_room("mamba", 1):
            node.mamba_resident = True
            self.mamba_used += 1
        for fresh in new_nodes:
            if host_copy:
                self.copy_to_host(fresh, with_aux=True)
        self.touch(node, now_s)
        return node, new_nodes

    def _new_leaf(self, parent: Node, pages: list[int], start: int, backed_up: bool) -> Node:
        node = Node(next(self._ids), pages, parent, start)
        parent.children[pages[0]] = node
        node.backed_up = backed_up
        self.nodes += 1
        self._to_device(node)
        return node

    def _to_device(self, node: Node) -> None:
        node.on_device = True
        self.kv_used += len(node.pages)
        if self.has_swa and self._make_room("swa", len(node.pages)):
            node.swa_resident = True
            self.swa_used += len(node.pages)

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` pages; returns the new upper node (no Mamba state at the cut)."""
        parent = node.parent
        assert parent is not None
        upper = Node(next(self._ids), node.pages[:at], parent, node.start)
        upper.children[node.pages[at]] = node
        parent.children[upper.pages[0]] = upper
        for attr in ("on_device", "on_host", "swa_resident", "backed_up", "last_access_s"):
            setattr(upper, attr, getattr(node, attr))
        upper.lock_ref = node.lock_ref
        node.pages = node.pages[at:]
        node.start = upper.end
        node.parent = upper
        self.nodes += 1
        self._push(upper)
        return upper

    # ---------------------------------------------------------------- host copies (cache mode)

    def copy_to_host(self, node: Node, *, with_aux: bool) -> bool:
        if self.host_capacity is None or node.on_host:
            return node.on_host
        if not self._make_room("host", len(node.pages)):
            return False
        node.on_host = True
        node.host_aux = with_aux and (not self.has_swa or node.swa_resident)
        node.host_aux = node.host_aux and (not self.has_mamba or node.mamba_resident)
        self.host_used += len(node.pages)
        return True

    # ---------------------------------------------------------------- capacity

    def kv_free(self) -> int:
        return self.kv_capacity - self.kv_used - self.kv_reserved

    def reserve(self, kv_pages: int, mamba_slots: int) -> bool:
        """Reserve room for a running request, evicting LRU unreferenced state if needed."""
        if not self._make_room("kv", kv_pages):
            return False
        if mamba_slots and self.has_mamba and not self._make_room("mamba", mamba_slots):
            return False
        self.kv_reserved += kv_pages
        if self.has_mamba:
            self.mamba_reserved += mamba_slots
        return True

    def release(self, kv_pages: int, mamba_slots: int) -> None:
        self.kv_reserved -= kv_pages
        if self.has_mamba:
            self.mamba_reserved -= mamba_slots

    def _free(self, resource: str) -> int:
        if resource == "kv":
            return self.kv_free()
        if resource == "swa":
            return (self.swa_capacity or 0) - self.swa_used
        if resource == "mamba":
            return (self.mamba_capacity or 0) - self.mamba_used - self.mamba_reserved
        return (self.host_capacity or 0) - self.host_used

    def _make_room(self, resource: str, amount: int) -> bool:
        """Evict LRU candidates of `resource` until `amount` fits; False if it cannot."""
        heap = self._heaps[resource]
        evictable = self._EVICTABLE[resource]
        evict = self._EVICT[resource]
        while self._free(resource) < amount:
            while heap:
                access, _, node = heapq.heappop(heap)
                if access == node.last_access_s and evictable(node):
                    evict(self, node)
                    break
            else:
                return False
        return True

    def _push(self, node: Node) -> None:
        entry = (node.last_access_s, node.nid, node)
        for heap, evictable, resource in self._pushed:
            if evictable(node):
                heapq.heappush(heap, entry)
                if len(heap) > 4 * self.nodes + 1024:
                    self._compact(resource)

    def _compact(self, resource: str) -> None:
        ok = self._EVICTABLE[resource]
        heap = self._heaps[resource]
        live = {(n.last_access_s, n.nid): n for _, _, n in heap if ok(n)}
        heap[:] = [(a, nid, n) for (a, nid), n in live.items() if a == n.last_access_s]
        heapq.heapify(heap)

    # ---------------------------------------------------------------- eviction

    @staticmethod
    def _kv_evictable(node: Node) -> bool:
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

    @staticmethod
    def _swa_evictable(node: Node) -> bool:
        return node.alive and node.swa_resident and node.on_device and node.lock_ref == 0

    @staticmethod
    def _mamba_evictable(node: Node) -> bool:
        return node.alive and node.mamba_resident and node.lock_ref == 0

    @staticmethod
    def _host_evictable(node: Node) -> bool:
        return node.alive and node.on_host and not node.on_device and not node.children

    def _evict_device(self, node: Node) -> None:
        node.on_device = False
        self.kv_used -= len(node.pages)
        self.device_evicted_pages += len(node.pages)
        self._drop_swa(node)
        self._drop_mamba(node)
        if node.on_host:
            self._push(node)
            if node.parent is not self.root and node.parent is not None:
                self._push(node.parent)
        else:
            self._drop_host_subtree(node)
            self._remove(node)

    def _drop_host_subtree(self, node: Node) -> None:
        """Free host-only descendants of a node that leaves the tree: nothing could reach them."""
        stack = list(node.children.values())
        while stack:
            child = stack.pop()
            stack.extend(child.children.values())
            if child.on_host:
                self.host_used -= len(child.pages)
            child.on_host = child.host_aux = False
            child.alive = False
            self.nodes -= 1
        node.children.clear()

    def _tombstone(self, node: Node) -> None:
        self.swa_tombstoned_pages += len(node.pages)
        self._drop_swa(node)

    def _drop_swa(self, node: Node) -> None:
        if node.swa_resident:
            node.swa_resident = False
            self.swa_used -= len(node.pages)

    def _drop_mamba(self, node: Node) -> None:
        if node.mamba_resident:
            node.mamba_resident = False
            self.mamba_used -= 1

    def _evict_host(self, node: Node) -> None:
        node.on_host = False
        node.host_aux = False
        self.host_used -= len(node.pages)
        self._remove(node)

    def _remove(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.pages[0]]
        node.alive = False
        self.nodes -= 1
        if parent is not self.root:
            self._push(parent)

    _EVICTABLE: ClassVar[dict[str, _Candidate]] = {
        "kv": _kv_evictable,
        "swa": _swa_evictable,
        "mamba": _mamba_evictable,
        "host": _host_evictable,
    }
    _EVICT: ClassVar[dict[str, Callable[[RadixTree, Node], None]]] = {
        "kv": _evict_device,
        "swa": _tombstone,
        "mamba": _drop_mamba,
        "host": _evict_host,
    }

    # ---------------------------------------------------------------- inspection

    def iter_nodes(self) -> list[Node]:
        out: list[Node] = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out


def _common_prefix(node_pages: list[int], pages: Sequence[int], pos: int) -> int:
    if pages[pos : pos + len(node_pages)] == node_pages:
        return len(node_pages)
    n = min(len(node_pages), len(pages) - pos)
    i = 0
    while i < n and node_pages[i] == pages[pos + i]:
        i += 1
    return i
