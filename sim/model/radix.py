"""The radix tree of cached prefixes: matching, insertion, splits, locks and recency.

What each node holds on the device is accounted in `sim.model.device` (one `Resource` per KV,
aux pool and host cache); this module decides which resources a tree operation takes or
frees, and the rules that follow from a pool's `Residency`:

- a prefix can be resumed on the device only at a point where every aux pool has its state, so
  aux holes shorten device matches as they do in SGLang: per-page values must be resident in the
  node the match ends in, an end state requires the match to end at that node's end;
- a node brought to the device takes per-page values for all its pages if room can be made;
  the node an insert ends at takes an end state;
- splitting a node keeps per-page values in both halves but leaves the upper half without an
  end state (the state exists only at the original end): the "aux hole at the cut".
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sim.model.device import Resource
from sim.model.node import Node
from sim.model.pools import KV, Residency

__all__ = ["Match", "Node", "RadixTree"]


@dataclass(frozen=True)
class Match:
    """Result of matching a chain: legal resume points on the device and on the host."""

    device_pages: int
    host_pages: int
    device_node: Node
    host_node: Node


DEVICE_EVICTED_KEY = "device_evicted_pages"


def device_dropped_key(pool: str, residency: Residency) -> str:
    """The summary key counting what the device dropped of an aux pool, in its own unit."""
    return f"device_{pool}_dropped_{residency.unit}"


class RadixTree:
    """Radix tree plus device (and, in cache mode, host) capacity accounting."""

    def __init__(
        self,
        *,
        kv_pages: int,
        aux: Mapping[str, tuple[Residency, int]] | None = None,
        host_cache_pages: int | None = None,
    ) -> None:
        """`aux` maps each aux pool to its residency and device capacity (pages or slots)."""
        aux = dict(aux or {})
        self._ids = itertools.count(1)
        self.root = Node(0, [], None, 0)
        self.root.on_device = self.root.on_host = self.root.host_aux = True
        self.root.resident_aux = set(aux)
        self.root.lock_ref = 1
        self.nodes = 0
        self.device_evicted_pages = 0
        self.kv = Resource(KV, kv_pages, _kv_evictable, self._evict_device)
        self.aux = {
            name: Resource(name, capacity, _aux_evictable(name), self._tombstoner(name))
            for name, (_, capacity) in aux.items()
        }
        self.residency = {name: residency for name, (residency, _) in aux.items()}
        self.page_values = tuple(n for n, r in self.residency.items() if r is Residency.PAGE_VALUES)
        self.end_states = tuple(n for n, r in self.residency.items() if r is Residency.END_STATE)
        self.tombstoned = dict.fromkeys(aux, 0)
        """Units of each aux pool freed under that pool's own pressure while the node's KV
        stayed (SWA: tombstoned pages; Mamba: evicted states)."""
        self.host = (
            None
            if host_cache_pages is None
            else Resource("host", host_cache_pages, _host_evictable, self._evict_host)
        )
        resources = [self.kv, *self.aux.values(), *([self.host] if self.host else [])]
        self._pushed = [(r.heap, r.evictable, r) for r in resources]
        """The heaps a node is pushed onto: only those of resources this tree has."""

    @property
    def host_used(self) -> int:
        return 0 if self.host is None else self.host.used

    def counters(self) -> dict[str, int]:
        """Whole-run device counters for the summary: KV pages evicted, and per aux pool the
        units it dropped while the KV stayed (`device_<pool>_dropped_<unit>`)."""
        return {
            DEVICE_EVICTED_KEY: self.device_evicted_pages,
            **{
                device_dropped_key(name, self.residency[name]): count
                for name, count in self.tombstoned.items()
            },
        }

    def used(self, pool: str) -> int:
        """Device units in use for a pool: KV pages, aux pages or slots."""
        return self.kv.used if pool == KV else self.aux[pool].used

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
        if self.end_states and not whole:
            return False
        return node.resident_aux.issuperset(self.aux)

    def _host_resumable(self, node: Node, whole: bool) -> bool:
        if not self.aux:
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
        nodes get per-page aux values if their pools can make room and the last node gets its
        end states if slots can be freed; otherwise they are born tombstoned. `backed_up` marks
        pages that came from storage; `host_copy` marks a write-through copy on the host (cache
        mode).
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
        if node is not self.root:
            for name in self.end_states:
                if name not in node.resident_aux and self.aux[name].make_room(1):
                    node.resident_aux.add(name)
                    self.aux[name].used += 1
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
        size = len(node.pages)
        self.kv.used += size
        for name in self.page_values:
            resource = self.aux[name]
            if resource.make_room(size):
                node.resident_aux.add(name)
                resource.used += size

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` pages; returns the new upper node (no end states at the cut).

        The lower half stays the original node object, so a node's end — where its end states
        and its backup's aux tail sit — never moves; the write path relies on that.
        """
        parent = node.parent
        assert parent is not None
        upper = Node(next(self._ids), node.pages[:at], parent, node.start)
        upper.children[node.pages[at]] = node
        parent.children[upper.pages[0]] = upper
        upper.on_device, upper.on_host = node.on_device, node.on_host
        upper.backed_up, upper.last_access_s = node.backed_up, node.last_access_s
        upper.resident_aux = {n for n in node.resident_aux if n in self.page_values}
        upper.lock_ref = node.lock_ref
        node.pages = node.pages[at:]
        node.start = upper.end
        node.parent = upper
        self.nodes += 1
        self._push(upper)
        return upper

    # ---------------------------------------------------------------- host copies (cache mode)

    def copy_to_host(self, node: Node, *, with_aux: bool) -> bool:
        if self.host is None or node.on_host:
            return node.on_host
        if not self.host.make_room(len(node.pages)):
            return False
        node.on_host = True
        node.host_aux = with_aux and node.resident_aux.issuperset(self.aux)
        self.host.used += len(node.pages)
        return True

    # ---------------------------------------------------------------- capacity

    def reserve(self, kv_pages: int, working_slots: int) -> bool:
        """Reserve room for a running request, evicting LRU unreferenced state if needed.

        A running request holds `working_slots` of every end-state pool (its recurrent state).
        """
        if not self.kv.make_room(kv_pages):
            return False
        if working_slots:
            for name in self.end_states:
                if not self.aux[name].make_room(working_slots):
                    return False
        self.kv.reserved += kv_pages
        for name in self.end_states:
            self.aux[name].reserved += working_slots
        return True

    def release(self, kv_pages: int, working_slots: int) -> None:
        self.kv.reserved -= kv_pages
        for name in self.end_states:
            self.aux[name].reserved -= working_slots

    def _push(self, node: Node) -> None:
        entry = (node.last_access_s, node.nid, node)
        for heap, evictable, resource in self._pushed:
            if evictable(node):
                heapq.heappush(heap, entry)
                if len(heap) > 4 * self.nodes + 1024:
                    resource.compact()

    # ---------------------------------------------------------------- eviction

    def _evict_device(self, node: Node) -> None:
        node.on_device = False
        self.kv.used -= len(node.pages)
        self.device_evicted_pages += len(node.pages)
        for name in tuple(node.resident_aux):
            self._drop_aux(node, name)
        if node.on_host:
            self._push(node)
            if node.parent is not self.root and node.parent is not None:
                self._push(node.parent)
        else:
            self._drop_host_subtree(node)
            self._remove(node)

    def _tombstoner(self, name: str) -> Callable[[Node], None]:
        def tombstone(node: Node) -> None:
            self.tombstoned[name] += self._drop_aux(node, name)

        return tombstone

    def _drop_aux(self, node: Node, name: str) -> int:
        """Free a node's state of one aux pool; returns the units freed."""
        if name not in node.resident_aux:
            return 0
        node.resident_aux.discard(name)
        units = self.residency[name].units(len(node.pages))
        self.aux[name].used -= units
        return units

    def _drop_host_subtree(self, node: Node) -> None:
        """Free host-only descendants of a node that leaves the tree: nothing could reach them."""
        stack = list(node.children.values())
        while stack:
            child = stack.pop()
            stack.extend(child.children.values())
            if child.on_host and self.host is not None:
                self.host.used -= len(child.pages)
            child.on_host = child.host_aux = False
            child.alive = False
            self.nodes -= 1
        node.children.clear()

    def _evict_host(self, node: Node) -> None:
        node.on_host = False
        node.host_aux = False
        if self.host is not None:
            self.host.used -= len(node.pages)
        self._remove(node)

    def _remove(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None and not node.children
        del parent.children[node.pages[0]]
        node.alive = False
        self.nodes -= 1
        if parent is not self.root:
            self._push(parent)

    # ---------------------------------------------------------------- inspection

    def path(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to `node`, parents first."""
        out: list[Node] = []
        while node is not self.root:
            out.append(node)
            node = node.parent  # type: ignore[assignment]
        out.reverse()
        return out

    def iter_nodes(self) -> list[Node]:
        out: list[Node] = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out


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


def _aux_evictable(name: str) -> Callable[[Node], bool]:
    def evictable(node: Node) -> bool:
        return node.alive and node.on_device and node.lock_ref == 0 and name in node.resident_aux

    return evictable


def _host_evictable(node: Node) -> bool:
    return node.alive and node.on_host and not node.on_device and not node.children


def _common_prefix(node_pages: list[int], pages: Sequence[int], pos: int) -> int:
    if pages[pos : pos + len(node_pages)] == node_pages:
        return len(node_pages)
    n = min(len(node_pages), len(pages) - pos)
    i = 0
    while i < n and node_pages[i] == pages[pos + i]:
        i += 1
    return i
