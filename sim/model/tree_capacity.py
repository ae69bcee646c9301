"""What a radix tree's nodes hold of the device (and, in cache mode, host) resources, and how
it is freed: reservations for running requests, the LRU heaps, eviction and tombstoning.

The tree's structure — matching, insertion, splits, locks, host copies — is `RadixTree`
(`sim.model.radix`), a subclass of `TreeCapacity`: every resource and heap is made here, and a
structural operation takes or frees units through it. What each resource accounts is in
`sim.model.device`; how each aux pool is held, in `sim.model.components`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping

from sim.model.components import (
    DEVICE_EVICTED_KEY,
    AuxComponent,
    AuxDevice,
    device_component,
    device_dropped_key,
    device_freed_key,
)
from sim.model.device import Resource, aux_evictable, host_evictable, kv_evictable
from sim.model.node import Node
from sim.model.pools import KV, Residency


class TreeCapacity:
    """A radix tree's device (and, in cache mode, host) capacity accounting."""

    def __init__(
        self,
        *,
        kv_pages: int,
        aux: Mapping[str, AuxDevice | tuple[Residency, int]] | None = None,
        host_cache_pages: int | None = None,
        window_retention: bool = False,
    ) -> None:
        """`aux` maps each aux pool to how the device holds it; `window_retention` keeps only
        windows of per-page values (SGLang's out-of-window freeing) instead of whole nodes."""
        pools = {name: AuxDevice(*spec) for name, spec in (aux or {}).items()}
        self._ids = itertools.count(1)
        self.root = Node(0, [], None, 0)
        self.root.on_device = self.root.on_host = self.root.host_aux = True
        self.root.resident_aux = dict.fromkeys(pools)
        self.root.lock_ref = 1
        self.nodes = 0
        self.device_evicted_pages = 0
        self.window_retention = window_retention
        self.kv = Resource(KV, kv_pages, kv_evictable, self._evict_device)
        self.aux = {
            name: Resource(name, pool.capacity, aux_evictable(name), self._tombstoner(name))
            for name, pool in pools.items()
        }
        self.components: dict[str, AuxComponent] = {
            name: device_component(pool, window_retention) for name, pool in pools.items()
        }
        """How the device holds each aux pool (`sim.model.components`)."""
        self.whole = tuple(name for name, c in self.components.items() if c.whole)
        """Pools held for every page of a node."""
        self.end_states = tuple(name for name, c in self.components.items() if c.working_slot)
        """Pools a running request holds a working slot of."""
        self.pointed = tuple(name for name in pools if name not in self.whole)
        """Pools held at resume points."""
        self.window = {n: c.window_pages for n, c in self.components.items() if c.window_pages}
        """Per-page pools with a window, and the pages a resume point holds before it."""
        self.checkpoints = {
            name: c.checkpoint_pages for name, c in self.components.items() if c.checkpoint_pages
        }
        self.grid = max((self.components[name].grid for name in self.pointed), default=1)
        """Where a branch point keeps its states: the coarsest grid of the pointed pools."""
        self.tombstoned = dict.fromkeys(pools, 0)
        """Units of each aux pool freed under that pool's own pressure while the node's KV
        stayed (SWA: tombstoned pages; Mamba: evicted states)."""
        self.freed_out_of_window = dict.fromkeys(self.window, 0)
        """Pages of per-page values requests computed and freed outside every kept window
        (always 0 under whole-node retention)."""
        self.host = (
            None
            if host_cache_pages is None
            else Resource("host", host_cache_pages, host_evictable, self._evict_host)
        )
        resources = [self.kv, *self.aux.values(), *([self.host] if self.host else [])]
        self._pushed = [(r.heap, r.evictable, r) for r in resources]
        """The heaps a node is pushed onto: only those of resources this tree has."""
        self._locked_stays = self.host is None
        """A locked node is no candidate of any heap (device resources evict unlocked nodes only;
        only a host cache's candidates ignore locks), so pushing it can be skipped."""

    @property
    def host_used(self) -> int:
        return 0 if self.host is None else self.host.used

    def counters(self) -> dict[str, int]:
        """Whole-run device counters for the summary: KV pages evicted, per aux pool the units
        it dropped while the KV stayed (`device_<pool>_dropped_<unit>`), and, under window
        retention, the per-page values freed out of window."""
        return {
            DEVICE_EVICTED_KEY: self.device_evicted_pages,
            **{
                device_dropped_key(name, self.components[name].spec.residency): count
                for name, count in self.tombstoned.items()
            },
            **{device_freed_key(name): count for name, count in self.freed_out_of_window.items()},
        }

    def used(self, pool: str) -> int:
        """Device units in use for a pool: KV pages, aux pages or slots."""
        return self.kv.used if pool == KV else self.aux[pool].used

    # ---------------------------------------------------------------- capacity

    def can_ever_hold(self, kv_pages: int, working_slots: int) -> bool:
        """Could a request of this size run on an empty device? (Otherwise it is rejected, not
        left waiting forever: a device with no Mamba slot can run nothing.)"""
        return kv_pages <= self.kv.capacity and all(
            working_slots <= self.aux[name].capacity for name in self.end_states
        )

    def reserve(self, kv_pages: int, working_slots: int) -> bool:
        """Reserve room for a running request, evicting LRU unreferenced state if needed.

        A running request holds `working_slots` of every end-state pool (its recurrent state).
        """
        if not self.kv.make_room(kv_pages):
            return False
        end_states = self.end_states
        if working_slots:
            for name in end_states:
                if not self.aux[name].make_room(working_slots):
                    return False
        self.kv.reserved += kv_pages
        for name in end_states:
            self.aux[name].reserved += working_slots
        return True

    def release(self, kv_pages: int, working_slots: int) -> None:
        self.kv.reserved -= kv_pages
        for name in self.end_states:
            self.aux[name].reserved -= working_slots

    def _push(self, node: Node) -> None:
        if node.lock_ref and self._locked_stays:
            return
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
        points = node.resident_aux.pop(name)
        units = len(node.pages) if points is None else sum(points.values())
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
