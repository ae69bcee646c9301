"""The radix tree of cached prefixes and its device pools."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.chain import ROOT_KEY, ChainInterner
from sim.model.radix import Node, RadixTree
from tests.model_helpers import held_units, make_tree, points, resident


def child(node: Node, first_page: int) -> Node:
    return node.children[first_page]


# ---------------------------------------------------------------- insert, match, split


def test_insert_into_empty_tree() -> None:
    tree = make_tree()
    node, new = tree.insert([1, 2, 3], 1.0)
    assert new == [node]
    assert node.pages == [1, 2, 3] and node.start == 0 and node.end == 3
    assert node.parent is tree.root and tree.root.children == {1: node}
    assert node.on_device and tree.kv.used == 3 and tree.nodes == 1
    match = tree.match([1, 2, 3, 4])
    assert match.device_pages == 3 and match.device_node is node


def test_insert_existing_prefix_adds_nothing() -> None:
    tree = make_tree()
    node, _ = tree.insert([1, 2, 3], 1.0)
    again, new = tree.insert([1, 2, 3], 2.0)
    assert again is node and new == []
    assert tree.kv.used == 3 and tree.nodes == 1


def test_insert_extending_a_leaf_adds_a_child() -> None:
    tree = make_tree()
    first, _ = tree.insert([1, 2], 1.0)
    node, new = tree.insert([1, 2, 3, 4], 2.0)
    assert new == [node] and node.parent is first
    assert node.pages == [3, 4] and node.start == 2
    assert first.children == {3: node}
    assert tree.kv.used == 4


def test_split_on_a_shared_prefix() -> None:
    """Inserting [1, 2, 3, 9, 10] into [1..6] cuts the old node after 3 pages."""
    tree = make_tree()
    old, _ = tree.insert([1, 2, 3, 4, 5, 6], 1.0)
    leaf, new = tree.insert([1, 2, 3, 9, 10], 2.0)
    upper = child(tree.root, 1)
    assert upper is not old and upper.pages == [1, 2, 3] and upper.end == 3
    assert old.pages == [4, 5, 6] and old.start == 3 and old.parent is upper
    assert new == [leaf] and leaf.pages == [9, 10] and leaf.parent is upper
    assert upper.children == {4: old, 9: leaf}
    assert tree.kv.used == 8 and tree.nodes == 3
    assert tree.match([1, 2, 3, 4, 5, 6]).device_pages == 6
    assert tree.match([1, 2, 3, 7]).device_pages == 3
    assert tree.match([1, 2]).device_pages == 2
    assert tree.match([5, 6]).device_pages == 0


def test_insert_ending_inside_a_node_splits_it() -> None:
    """The returned node ends exactly at the inserted length."""
    tree = make_tree()
    tree.insert([1, 2, 3, 4], 1.0)
    node, new = tree.insert([1, 2], 2.0)
    assert new == [] and node.pages == [1, 2] and node.end == 2
    assert [c.pages for c in node.children.values()] == [[3, 4]]
    assert tree.kv.used == 4


def test_split_keeps_swa_in_both_halves_and_no_mamba_above_the_cut() -> None:
    tree = make_tree(swa=100, mamba=10)
    old, _ = tree.insert([1, 2, 3, 4], 1.0)
    assert resident(old, "swa") and resident(old, "mamba")
    tree.insert([1, 2, 7], 2.0)
    upper = child(tree.root, 1)
    assert upper.pages == [1, 2]
    assert resident(upper, "swa") and resident(old, "swa")
    assert not resident(upper, "mamba") and resident(old, "mamba")
    assert tree.aux["swa"].used == 5
    assert tree.aux["mamba"].used == 2  # the old end and the new leaf [7]


def test_mamba_match_backs_off_to_a_node_end_with_state() -> None:
    """kv+mamba: the cut at 4 has no state, so a match there backs off to the end at 2."""
    tree = make_tree(mamba=10)
    a, _ = tree.insert([1, 2], 1.0)
    b, _ = tree.insert([1, 2, 3, 4, 5, 6], 2.0)
    leaf, _ = tree.insert([1, 2, 3, 4, 20], 3.0)
    upper = b.parent
    assert upper is not None and upper.pages == [3, 4] and not resident(upper, "mamba")
    match = tree.match([1, 2, 3, 4])
    assert match.device_pages == 2 and match.device_node is a
    assert tree.match([1, 2, 3, 4, 5]).device_pages == 2  # mid-node: no state there either
    assert tree.match([1, 2, 3, 4, 5, 6]).device_pages == 6
    assert tree.match([1, 2, 3, 4, 20]).device_node is leaf
    # Inserting exactly up to the cut gives the upper half a state of its own.
    node, _ = tree.insert([1, 2, 3, 4], 4.0)
    assert node is upper and resident(upper, "mamba")
    assert tree.match([1, 2, 3, 4]).device_pages == 4


def test_swa_match_may_end_mid_node_but_not_on_tombstoned_pages() -> None:
    """kv+swa: a partial node is a legal resume point while its SWA values are resident."""
    tree = make_tree(swa=6)
    a, _ = tree.insert([1, 2, 3], 1.0)
    assert tree.match([1, 2, 9]).device_pages == 2
    b, _ = tree.insert([11, 12, 13, 14], 2.0)  # needs 4 SWA pages: tombstones a
    assert not resident(a, "swa") and a.on_device and resident(b, "swa")
    assert tree.tombstoned["swa"] == 3 and tree.aux["swa"].used == 4
    assert tree.match([1, 2, 3]).device_pages == 0
    assert tree.match([11, 12]).device_pages == 2


def test_new_node_larger_than_swa_pool_is_born_tombstoned() -> None:
    tree = make_tree(swa=2)
    node, _ = tree.insert([1, 2, 3], 1.0)
    assert node.on_device and not resident(node, "swa") and tree.aux["swa"].used == 0


# ---------------------------------------------------------------- eviction and locks


def test_reserve_evicts_least_recently_used_leaf() -> None:
    tree = make_tree(kv=10)
    a, _ = tree.insert([1, 2, 3], 1.0)
    b, _ = tree.insert([11, 12, 13], 2.0)
    c, _ = tree.insert([21, 22, 23], 3.0)
    tree.touch(a, 4.0)
    assert tree.reserve(3, 0)
    assert not b.alive and a.alive and c.alive
    assert tree.kv.used == 6 and tree.kv.reserved == 3 and tree.kv.free() == 1
    assert tree.device_evicted_pages == 3
    assert set(tree.root.children) == {1, 21}
    tree.release(3, 0)
    assert tree.kv.reserved == 0


def test_reserve_evicts_leaves_before_their_parent() -> None:
    """An interior node becomes evictable only once its children are gone."""
    tree = make_tree(kv=6)
    tree.insert([1, 2, 3, 4], 1.0)
    tree.insert([1, 2, 5, 6], 2.0)
    upper = child(tree.root, 1)
    lower_a, lower_b = child(upper, 3), child(upper, 5)
    tree.touch(upper, 3.0)  # the parent is the most recent, yet it must go last
    assert tree.reserve(2, 0)
    assert not lower_a.alive and upper.alive and lower_b.alive
    assert tree.reserve(4, 0)
    assert not upper.alive and not lower_b.alive
    assert tree.kv.used == 0 and tree.nodes == 0 and tree.root.children == {}


def test_eviction_stays_lru_while_a_heap_is_compacted() -> None:
    """A chain's parent that becomes a leaf mid-eviction is found even if that push compacts
    the heap. The lazy heap compacts after about a thousand stale entries; the loop puts the
    compaction before, during and after the eviction. (Before the heaps were compacted in
    place, an eviction that compacted kept popping the old list and took the most recent node.)
    """
    for touches in range(1000, 1080):
        tree = make_tree(kv=16)
        chain = [tree.insert(list(range(1, 4 * n + 1)), float(n))[0] for n in (1, 2, 3)]
        recent, _ = tree.insert([100, 101, 102, 103], 4.0)
        for i in range(touches):
            tree.touch(recent, 5.0 + i)
        assert tree.reserve(12, 0), touches
        assert recent.on_device and not any(node.on_device for node in chain), touches


def test_locked_nodes_are_never_evicted() -> None:
    tree = make_tree(kv=10)
    a, _ = tree.insert([1, 2, 3, 4], 1.0)
    tree.insert([1, 2, 9], 1.5)  # split: a's upper half is an interior node
    upper = a.parent
    assert upper is not None and upper is not tree.root
    b, _ = tree.insert([11, 12, 13], 2.0)
    tree.lock(a)
    assert upper.lock_ref == 1 and tree.root.lock_ref == 2
    assert not tree.reserve(8, 0)
    assert a.alive and a.on_device and upper.alive and upper.on_device
    assert not b.alive
    assert tree.kv.reserved == 0 and tree.kv.used == 4
    tree.unlock(a)
    assert a.lock_ref == 0 and upper.lock_ref == 0 and tree.root.lock_ref == 1
    assert tree.reserve(8, 0)  # 6 free: the unlocked leaf a (2 pages) is enough
    assert not a.alive and upper.alive and tree.kv.used == 2


def test_split_of_a_locked_node_keeps_the_lock_on_both_halves() -> None:
    tree = make_tree(kv=10)
    a, _ = tree.insert([1, 2, 3, 4], 1.0)
    tree.lock(a)
    tree.insert([1, 2, 7], 2.0)
    upper = a.parent
    assert upper is not None and upper.lock_ref == 1 and a.lock_ref == 1
    tree.unlock(a)
    assert upper.lock_ref == 0 and tree.root.lock_ref == 1


def test_locked_mamba_state_is_kept() -> None:
    tree = make_tree(mamba=1)
    a, _ = tree.insert([1, 2], 1.0)
    tree.lock(a)
    b, _ = tree.insert([5, 6], 2.0)
    assert resident(a, "mamba") and not resident(b, "mamba")
    assert not tree.reserve(0, 1)
    tree.unlock(a)
    assert tree.reserve(0, 1)
    assert (
        not resident(a, "mamba") and tree.aux["mamba"].used == 0 and tree.aux["mamba"].reserved == 1
    )


def test_cache_mode_parent_evicted_while_child_lives_on_host() -> None:
    """Cache mode: a device parent without a host copy whose only child is host-resident.

    P = [1, 2] gets no host copy (host full of X at the time); its child C = [3, 4] gets one
    after X left the host. Device pressure evicts C (kept on the host), then P, which has no host
    copy. Evicting P must not corrupt the tree: C must stay reachable (or go with P), and the
    accounting must stay exact.
    """
    tree = make_tree(kv=6, host=2)
    x, _ = tree.insert([9, 10], 1.0)
    p, _ = tree.insert([1, 2], 2.0)
    assert x.on_host and not p.on_host
    assert tree.reserve(4, 0)  # evicts X from the device; X stays on the host
    tree.release(4, 0)
    c, _ = tree.insert([1, 2, 3, 4], 3.0)  # host room made by dropping X
    assert c.on_host and not x.alive and c.parent is p
    tree.reserve(6, 0)
    assert tree.kv.used + tree.kv.reserved <= tree.kv.capacity
    for node in tree.iter_nodes():
        assert node.alive and node.parent is not None
        assert node.parent.children[node.pages[0]] is node
    assert tree.kv.used == sum(len(n.pages) for n in tree.iter_nodes() if n.on_device)
    assert tree.host_used == sum(len(n.pages) for n in tree.iter_nodes() if n.on_host)


# ---------------------------------------------------------------- random operation sequences


def _build_chains() -> list[list[int]]:
    """Chains drawn from a few shared prefixes: (trunk pages, branch id, branch pages)."""
    interner = ChainInterner()
    trunk = [("t", i) for i in range(6)]
    specs = [(6, 0, 0), (3, 1, 3), (3, 2, 2), (4, 3, 4), (1, 4, 2), (0, 5, 5), (0, 6, 2)]
    return [
        interner.extend(ROOT_KEY, trunk[:t] + [("b", b, j) for j in range(n)]) for t, b, n in specs
    ]


CHAINS = _build_chains()

Op = tuple[str, int, int]


@dataclass
class Driver:
    """Drives a tree the way the engine does and remembers what the invariants need."""

    tree: RadixTree
    inserted: list[list[int]] = field(default_factory=list)
    held: list[Node] = field(default_factory=list)
    reservations: list[tuple[int, int]] = field(default_factory=list)
    now: float = 0.0

    def insert(self, chain: list[int]) -> None:
        """Match, lock the match, reserve the rest, insert, hold a lock on the new end."""
        tree = self.tree
        self.now += 1.0
        match = tree.match(chain)
        tree.lock(match.device_node)
        need = len(chain) - match.device_pages
        slots = 1 if ("mamba" in tree.aux) else 0
        if tree.reserve(need, slots):
            node, _ = tree.insert(chain, self.now, computed_from=match.device_pages)
            self.inserted.append(chain)
            tree.release(need, slots)
            tree.lock(node)
            self.held.append(node)
        else:
            self.check_stuck(need, slots)
        tree.unlock(match.device_node)

    def reserve(self, kv: int, slots: int) -> None:
        if self.tree.reserve(kv, slots):
            self.reservations.append((kv, slots if ("mamba" in self.tree.aux) else 0))
        else:
            self.check_stuck(kv, slots)

    def check_stuck(self, kv: int, slots: int) -> None:
        """A failed reserve means nothing evictable was left for the short resource."""
        tree = self.tree
        nodes = tree.iter_nodes()
        kv_short = tree.kv.free() < kv and not any(
            n.on_device and n.lock_ref == 0 and not any(c.on_device for c in n.children.values())
            for n in nodes
        )
        mamba_free = tree.aux["mamba"].free() if "mamba" in tree.aux else 0
        mamba_short = (
            ("mamba" in tree.aux)
            and mamba_free < slots
            and not any(resident(n, "mamba") and n.lock_ref == 0 for n in nodes)
        )
        assert kv_short or mamba_short, "reserve failed although evictable state was left"

    def apply(self, op: Op) -> None:
        kind, a, b = op
        if kind == "insert":
            chain = CHAINS[a % len(CHAINS)]
            self.insert(chain[: 1 + b % len(chain)])
        elif kind == "unlock" and self.held:
            self.tree.unlock(self.held.pop(a % len(self.held)))
        elif kind == "reserve":
            self.reserve(a, b % 2)
        elif kind == "release" and self.reservations:
            kv, slots = self.reservations.pop(a % len(self.reservations))
            self.tree.release(kv, slots)
        elif kind == "touch" and self.held:
            self.now += 1.0
            self.tree.touch(self.held[a % len(self.held)], self.now)

    def check(self) -> None:
        tree = self.tree
        nodes = tree.iter_nodes()
        assert tree.nodes == len(nodes)
        assert tree.kv.used + tree.kv.reserved <= tree.kv.capacity
        assert tree.kv.used == sum(len(n.pages) for n in nodes if n.on_device)
        assert tree.kv.reserved == sum(kv for kv, _ in self.reservations)
        if "swa" in tree.aux:
            assert tree.aux["swa"].used <= tree.aux["swa"].capacity
            assert tree.aux["swa"].used == sum(held_units(n, "swa") for n in nodes)
        if "mamba" in tree.aux:
            assert tree.aux["mamba"].used + tree.aux["mamba"].reserved <= tree.aux["mamba"].capacity
            assert tree.aux["mamba"].used == sum(held_units(n, "mamba") for n in nodes)
            assert tree.aux["mamba"].reserved == sum(s for _, s in self.reservations)
        for node in nodes:
            for name, held in node.resident_aux.items():
                assert held is None or held, "a held pool has at least one point"
                for point, units in (held or {}).items():
                    assert node.start < point <= node.end
                    assert 1 <= units <= (tree.window.get(name) or 1)

        prefix: dict[int, list[int]] = {id(tree.root): []}
        stack = [tree.root]
        while stack:
            parent = stack.pop()
            for first, node in parent.children.items():
                assert node.alive and node.pages and node.pages[0] == first
                assert node.parent is parent and node.start == parent.end
                path = prefix[id(parent)] + node.pages
                assert any(c[: len(path)] == path for c in self.inserted), path
                assert node.on_device  # device-only tree: every live node is on the device
                prefix[id(node)] = path
                stack.append(node)

        for node in self.held:
            assert node.alive and node.on_device
        subtree_locks: dict[int, int] = {}
        for node in self.held:
            walk: Node | None = node
            while walk is not None:
                subtree_locks[id(walk)] = subtree_locks.get(id(walk), 0) + 1
                walk = walk.parent
        for node in nodes:
            assert node.lock_ref == subtree_locks.get(id(node), 0)
        assert tree.root.lock_ref == 1 + len(self.held)


op_strategy = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("insert"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("unlock"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("reserve"), st.integers(0, 12), st.integers(0, 1)),
    st.tuples(st.just("release"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("touch"), st.integers(0, 50), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(
    kv=st.integers(4, 30),
    swa=st.one_of(st.none(), st.integers(2, 20)),
    mamba=st.one_of(st.none(), st.integers(1, 4)),
    window=st.one_of(st.none(), st.integers(1, 4)),
    checkpoint=st.one_of(st.none(), st.integers(1, 5)),
    ops=st.lists(op_strategy, max_size=40),
)
def test_random_operation_sequences_keep_invariants(
    kv: int,
    swa: int | None,
    mamba: int | None,
    window: int | None,
    checkpoint: int | None,
    ops: list[Op],
) -> None:
    """Capacity, accounting, structure and lock invariants hold after every step, under both
    retentions and with checkpoints."""
    tree = make_tree(
        kv=kv,
        swa=swa,
        mamba=mamba,
        window=window,
        swa_checkpoint=checkpoint,
        mamba_checkpoint=checkpoint,
    )
    driver = Driver(tree)
    driver.check()
    for op in ops:
        driver.apply(op)
        driver.check()


# ---------------------------------------------------------------- window retention


def test_window_retention_keeps_only_the_window_before_the_insert_end() -> None:
    """A 10-page prompt computed from scratch keeps SWA for its last 2 pages; 8 are freed."""
    tree = make_tree(swa=50, window=2)
    node, _ = tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    assert points(node, "swa") == [10] and held_units(node, "swa") == 2
    assert tree.aux["swa"].used == 2
    assert tree.counters()["device_swa_freed_out_of_window_pages"] == 8


def test_a_match_resumes_only_where_a_window_is_held_and_reports_the_backoff() -> None:
    tree = make_tree(swa=50, window=2)
    tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    at_end = tree.match(list(range(1, 13)))
    assert (at_end.device_pages, at_end.device_kv_pages) == (10, 10)
    inside = tree.match([*range(1, 7), 99])
    assert (inside.device_pages, inside.device_kv_pages) == (0, 6)


def test_whole_node_retention_resumes_anywhere_in_a_resident_node() -> None:
    tree = make_tree(swa=50)
    tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    inside = tree.match([*range(1, 7), 99])
    assert (inside.device_pages, inside.device_kv_pages) == (6, 6)


def test_a_branch_point_keeps_the_window_where_the_request_left_the_tree() -> None:
    """[1..10] then [1..6, 20, 21] computed from 0: the split at 6 keeps a window there, so a
    third request sharing [1..6] resumes at 6 (SGLang's branching-point caching)."""
    tree = make_tree(swa=50, window=2)
    tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    leaf, _ = tree.insert([*range(1, 7), 20, 21], 2.0, computed_from=0)
    upper = leaf.parent
    assert upper is not None and upper.end == 6 and points(upper, "swa") == [6]
    assert tree.match([*range(1, 7), 30]).device_pages == 6


def test_no_branch_window_where_the_request_did_not_compute() -> None:
    """A request that resumed past the branch point (loaded it) keeps no window there."""
    tree = make_tree(swa=50, window=2)
    tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    leaf, _ = tree.insert([*range(1, 7), 20, 21], 2.0, computed_from=7)
    assert leaf.parent is not None and points(leaf.parent, "swa") == []


def test_mamba_keeps_a_state_at_the_branch_point_under_window_retention_only() -> None:
    for window, expected in ((2, [6]), (None, [])):
        tree = make_tree(swa=50, mamba=8, window=window)
        tree.insert(list(range(1, 11)), 1.0, computed_from=0)
        leaf, _ = tree.insert([*range(1, 7), 20, 21], 2.0, computed_from=0)
        assert leaf.parent is not None and points(leaf.parent, "mamba") == expected


def test_checkpoints_keep_a_state_at_every_multiple_the_request_computed() -> None:
    tree = make_tree(swa=50, mamba=8, window=2, swa_checkpoint=4, mamba_checkpoint=4)
    node, _ = tree.insert(list(range(1, 11)), 1.0, computed_from=2)
    assert points(node, "swa") == [4, 8, 10] and points(node, "mamba") == [4, 8, 10]
    assert tree.aux["mamba"].used == 3
    assert tree.match([*range(1, 10), 99]).device_pages == 8


def test_overlapping_windows_count_each_page_once() -> None:
    """Per-page checkpoints with a 2-page window: every page is held exactly once."""
    tree = make_tree(swa=50, window=2, swa_checkpoint=1)
    node, _ = tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    assert points(node, "swa") == list(range(1, 11))
    assert held_units(node, "swa") == 10 == tree.aux["swa"].used


def test_a_split_moves_the_points_above_the_cut_to_the_upper_node() -> None:
    tree = make_tree(swa=50, mamba=8, window=2, swa_checkpoint=4, mamba_checkpoint=4)
    node, _ = tree.insert(list(range(1, 11)), 1.0, computed_from=0)
    tree.insert([*range(1, 6), 50], 2.0, computed_from=5)
    upper = node.parent
    assert upper is not None and upper.end == 5
    assert points(upper, "swa") == [4] and points(node, "swa") == [8, 10]
    assert held_units(upper, "swa") + held_units(node, "swa") == 6
    assert tree.aux["swa"].used == 8, "the new leaf's window at 6 reaches into the upper node"


def test_a_point_added_while_room_is_made_from_its_own_node_holds_its_whole_window() -> None:
    """Making room for a window can tombstone the node it is added to; the new point then
    overlaps nothing and must count its whole window (it once kept the shortened gap)."""
    tree = make_tree(kv=100, swa=8, window=4, swa_checkpoint=4)
    tree.insert(list(range(1, 9)), 0.0, computed_from=0)
    tree.insert([*range(1, 7), 50], 1.0, computed_from=6)
    upper, _ = tree.insert(list(range(1, 7)), 2.0, computed_from=4)
    assert points(upper, "swa") == [6] and held_units(upper, "swa") == 4
    nodes = tree.iter_nodes()
    assert tree.aux["swa"].used == sum(held_units(n, "swa") for n in nodes)


def test_a_host_copy_resumes_only_where_the_device_kept_the_end_window() -> None:
    """A node holding only a checkpoint window below its end has nothing to resume at its end,
    so its host copy is not resumable there."""
    tree = make_tree(kv=100, swa=2, host=100, window=4, swa_checkpoint=2)
    node, _ = tree.insert(list(range(1, 9)), 0.0, computed_from=0)
    assert node.end not in points(node, "swa") and not node.host_aux
    tree.kv.make_room(100)
    assert not node.on_device and tree.match(list(range(1, 9))).host_pages == 0
