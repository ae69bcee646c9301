"""The radix tree of cached prefixes: matching, insertion, splits, locks and recency.

What each node holds on the device is accounted in `sim.model.device` (one `Resource` per KV,
aux pool and host cache), which resources a node takes and how they are freed (reservations,
LRU eviction, tombstones) in `sim.model.tree_capacity`, and how each aux pool is held — for
whole nodes or at resume points — in `sim.model.components`; this module decides where a prefix
can resume on the device and which units a tree operation takes: a match may end only at a
point every aux pool allows (whole pools allow any page of a resident node).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sim.model.components import AuxDevice
from sim.model.node import Node
from sim.model.tree_capacity import TreeCapacity

__all__ = ["AuxDevice", "Match", "Node", "RadixTree"]


@dataclass(frozen=True)
class Match:
    """Result of matching a chain: legal resume points on the device and on the host."""

    device_pages: int
    host_pages: int
    device_node: Node
    host_node: Node
    device_kv_pages: int = 0
    """How far the chain's KV is on the device; beyond `device_pages` it is backed off
    (recomputed) because some aux pool holds nothing to resume there."""


class RadixTree(TreeCapacity):
    """Radix tree plus device (and, in cache mode, host) capacity accounting
    (`TreeCapacity`)."""

    # ---------------------------------------------------------------- matching

    def match(self, pages: Sequence[int]) -> Match:
        """Longest legal device resume point, then how far the host extends it (cache mode)."""
        node = self.root
        pos = 0
        dev_pages, dev_node = 0, node
        host_pages, host_node = 0, node
        kv_pages = 0
        on_device_path = True
        while pos < len(pages):
            child = node.children.get(pages[pos])
            if child is None:
                break
            n = _common_prefix(child.pages, pages, pos)
            whole = n == len(child.pages)
            on_device_path = on_device_path and child.on_device
            if on_device_path:
                kv_pages = pos + n
                point = self._resume_point(child, pos + n)
                if point:
                    dev_pages, dev_node = point, child
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
        return Match(dev_pages, host_pages, dev_node, host_node, max(kv_pages, dev_pages))

    def _resume_point(self, node: Node, end: int) -> int:
        """The last point in `node` up to `end` where every aux pool allows a resume; 0: none."""
        held = node.resident_aux
        legal: Collection[int] | None = None
        for name in self.aux:
            if name not in held:
                return 0
            points = held[name]
            if points is not None:
                legal = points if legal is None else set(points).intersection(legal)
        if legal is None or end in legal:
            return end
        return max((p for p in legal if p <= end), default=0)

    def _host_resumable(self, node: Node, whole: bool) -> bool:
        if not self.aux:
            return True
        return whole and node.host_aux

    def touch(self, node: Node, now_s: float) -> None:
        """Mark a node and its ancestors used now (LRU recency)."""
        cur: Node | None = node
        locked_stays = self._locked_stays
        while cur is not self.root and cur is not None:
            cur.last_access_s = now_s
            if not (locked_stays and cur.lock_ref):
                self._push(cur)
            cur = cur.parent

    def lock(self, node: Node) -> None:
        cur: Node | None = node
        while cur is not None:
            cur.lock_ref += 1
            cur = cur.parent

    def unlock(self, node: Node) -> None:
        cur: Node | None = node
        while cur is not None:
            cur.lock_ref -= 1
            if cur.lock_ref == 0:
                self._push(cur)
            cur = cur.parent

    # ---------------------------------------------------------------- insertion

    def insert(
        self,
        pages: Sequence[int],
        now_s: float,
        *,
        backed_up: bool = False,
        computed_from: int | None = None,
        lock: bool = False,
    ) -> tuple[Node, list[Node]]:
        """Put `pages` on the device; returns the node ending at len(pages) and the new nodes.

        Existing nodes on the path become device-resident again (a host hit loaded back). New
        nodes take whole-node values if their pools can make room; the insert's end keeps every
        pointed pool's state, and (`computed_from`: the page the request started computing
        at) the checkpoints it computed and, under window retention, the point where it left
        the tree. Whatever cannot make room is born tombstoned. `backed_up` marks pages that
        came from storage. A tree with a host cache (cache mode) copies new nodes to the host
        as they are written through. `lock` locks the path to the end node before its recency
        is refreshed: a device heap entry of a node about to be locked would only be popped and
        dropped, and the unlock pushes the node again, so the refresh pushes it nowhere.
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
                held = child.pages
                if pages[pos : pos + len(held)] != held:
                    child = self._split(child, _common_prefix(held, pages, pos))
                if not child.on_device:
                    self._to_device(child)
            node = child
            pos = node.end
        if node is not self.root:
            self._keep_points(node, computed_from, new_nodes)
        if self.host is not None:
            for fresh in new_nodes:
                self.copy_to_host(fresh, with_aux=True)
        if lock:
            self.lock(node)
        self.touch(node, now_s)
        return node, new_nodes

    def _keep_points(self, end: Node, computed_from: int | None, new_nodes: list[Node]) -> None:
        """The states an insert keeps: at its end; from `computed_from` on, at each checkpoint
        and (window retention) at the branch point where its new pages start."""
        kept = dict.fromkeys(self.window, 0)
        for name in self.pointed:
            kept[name] = self._hold(end, name, end.end)
        if computed_from is None:
            return
        for name, every in self.checkpoints.items():
            first = computed_from + every - computed_from % every
            for point in range(first, end.end, every):
                kept[name] = kept.get(name, 0) + self._hold(self._node_at(end, point), name, point)
        if self.window_retention and new_nodes:
            branch = new_nodes[0].start - new_nodes[0].start % self.grid
            if branch > computed_from:
                owner = self._node_at(end, branch)
                for name in self.pointed:
                    kept[name] = kept.get(name, 0) + self._hold(owner, name, branch)
        for name, component in self.components.items():
            if component.frees_out_of_window:
                self.freed_out_of_window[name] += max(0, end.end - computed_from - kept[name])

    def _node_at(self, node: Node, point: int) -> Node:
        """The node on the path up from `node` that holds the page before `point`."""
        while node.start >= point and node.parent is not None:
            node = node.parent
        return node

    def _hold(self, node: Node, name: str, point: int) -> int:
        """Keep a pool's state at `point` in `node` if room can be made; returns units taken."""
        held = node.resident_aux.get(name, {})
        if held is None or point in held:
            return 0
        resource = self.aux[name]
        component = self.components[name]
        units = component.point_units(held, point)
        while True:
            if not resource.make_room(units):
                return 0
            # Making room may have tombstoned this very node: its points are gone and the
            # window no longer overlaps one of them.
            again = component.point_units(node.resident_aux.get(name) or {}, point)
            if again <= units:
                break
            units = again
        points = node.resident_aux.get(name)
        if points is None:
            points = node.resident_aux[name] = {}
        points[point] = units
        resource.used += units
        freed = component.shrink_next(points, point)
        resource.used -= freed
        return units - freed

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
        for name in self.whole:
            resource = self.aux[name]
            if resource.make_room(size):
                node.resident_aux[name] = None
                resource.used += size

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` pages; returns the new upper node, which keeps whole-node
        values and the resume points at or before the cut (an end state at the node's end
        stays below: the aux hole at the cut).

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
        cut = upper.end
        for name, points in list(node.resident_aux.items()):
            if points is None:
                upper.resident_aux[name] = None
                continue
            above = {p: u for p, u in points.items() if p <= cut}
            if above:
                upper.resident_aux[name] = above
                for p in above:
                    del points[p]
                if not points:
                    del node.resident_aux[name]
        upper.lock_ref = node.lock_ref
        node.pages = node.pages[at:]
        node.start = cut
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
        node.host_aux = with_aux and self._holds_end(node)
        self.host.used += len(node.pages)
        return True

    def _holds_end(self, node: Node) -> bool:
        """Does the node hold what resuming at its end needs, for every aux pool? (A host copy
        is resumed at the node's end.)"""
        held = node.resident_aux
        for name in self.aux:
            if name not in held:
                return False
            points = held[name]
            if points is not None and node.end not in points:
                return False
        return True

    # ---------------------------------------------------------------- inspection

    def path(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to `node`, parents first."""
        out: list[Node] = []
        cur: Node | None = node
        while cur is not self.root and cur is not None:
            out.append(cur)
            cur = cur.parent
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


def _common_prefix(node_pages: list[int], pages: Sequence[int], pos: int) -> int:
    if pages[pos : pos + len(node_pages)] == node_pages:
        return len(node_pages)
    n = min(len(node_pages), len(pages) - pos)
    i = 0
    while i < n and node_pages[i] == pages[pos + i]:
        i += 1
    return i
