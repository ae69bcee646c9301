"""The storage existence cache and the write-path gate."""

from __future__ import annotations

import random
from collections import Counter, OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.backup import InflightPages, aux_backup_keys, gate_backup
from sim.model.existence import ExistenceCache
from sim.model.pools import Pool
from sim.model.radix import Node
from tests.model_helpers import layout, make_tree


def believed(cache: ExistenceCache, universe: range = range(100)) -> set[int]:
    return {k for k in universe if k in cache}


# ---------------------------------------------------------------- ExistenceCache


def test_add_beyond_capacity_evicts_oldest() -> None:
    cache = ExistenceCache(3)
    cache.add([1, 2, 3, 4])
    assert believed(cache) == {2, 3, 4}
    assert len(cache) == 3 and cache.evictions == 1


def test_re_adding_refreshes_recency() -> None:
    cache = ExistenceCache(3)
    cache.add([1, 2, 3])
    cache.add([1])
    cache.add([4])
    assert believed(cache) == {1, 3, 4}


def test_contains_refreshes_recency_and_in_does_not() -> None:
    """`contains` is a real lookup (refreshes); `in` is a plain probe (does not)."""
    cache = ExistenceCache(3)
    cache.add([1, 2, 3])
    assert cache.contains(1)
    assert not cache.contains(9)
    assert 2 in cache
    cache.add([4])
    assert believed(cache) == {1, 3, 4}


def test_covers_all() -> None:
    """True only when every key is believed or in `extra_cover`."""
    cache = ExistenceCache(10)
    cache.add([1, 2, 3])
    assert cache.covers_all([1, 2, 3])
    assert not cache.covers_all([1, 2, 3, 4])
    assert cache.covers_all([1, 2, 3, 4], extra_cover={4})
    assert cache.covers_all([4, 5], extra_cover={4, 5})
    assert not cache.covers_all([4, 5], extra_cover={4})
    assert believed(cache) == {1, 2, 3}


def test_covers_all_refreshes_the_keys_it_passes() -> None:
    """A FULL check refreshes each believed key before the first uncovered one, whatever its
    answer (SGLang's `covered` / `covers_all` walk the keys in order and stop there)."""
    cache = ExistenceCache(3)
    cache.add([1, 2, 3])
    assert not cache.covers_all([1, 9, 2])
    cache.add([4])
    assert believed(cache) == {1, 3, 4}
    assert cache.covers_all([3])
    cache.add([5])
    assert believed(cache) == {3, 4, 5}
    assert not cache.covers_all([9, 3])
    cache.add([6])
    assert believed(cache) == {3, 5, 6}


def test_invalidate_beyond_drops_exactly_the_tail() -> None:
    """span[keep:] loses its beliefs; span[:keep] and unrelated keys keep theirs."""
    cache = ExistenceCache(100)
    span = list(range(1, 11))
    cache.add([*span, 50, 51])
    assert cache.invalidate_beyond(span, 6) == [7, 8, 9, 10]
    assert believed(cache) == {1, 2, 3, 4, 5, 6, 50, 51}


def test_invalidate_beyond_reports_only_believed_keys() -> None:
    cache = ExistenceCache(100)
    span = list(range(1, 11))
    cache.add([1, 2, 3, 8, 10, 50])
    assert cache.invalidate_beyond(span, 2) == [3, 8, 10]
    assert believed(cache) == {1, 2, 50}


def test_invalidate_beyond_edges() -> None:
    """keep 0 (or negative) drops the whole span; keep >= len drops nothing."""
    span = [1, 2, 3]
    for keep, left in ((0, set()), (-2, set()), (3, {1, 2, 3}), (7, {1, 2, 3})):
        cache = ExistenceCache(10)
        cache.add(span)
        cache.invalidate_beyond(span, keep)
        assert believed(cache) == left


def test_invalidate_exact_keys() -> None:
    cache = ExistenceCache(10)
    cache.add([1, 2, 3])
    assert cache.invalidate([3, 1, 9]) == [3, 1]
    assert believed(cache) == {2}


def test_disabled_cache_believes_nothing() -> None:
    """enabled=False (cache host mode): adds are ignored and the FULL check never passes."""
    cache = ExistenceCache(10, enabled=False)
    cache.add([1, 2, 3])
    assert len(cache) == 0
    assert not cache.contains(1)
    assert 1 not in cache
    assert not cache.covers_all([1])
    assert not cache.covers_all([1], extra_cover={1})
    assert not cache.covers_all([])


@settings(max_examples=150, deadline=None)
@given(
    entries=st.integers(0, 6),
    batches=st.lists(st.lists(st.integers(0, 12), max_size=8), max_size=15),
)
def test_lru_bound_and_order(entries: int, batches: list[list[int]]) -> None:
    """Never more than `entries` beliefs, and the survivors are exactly a reference LRU's."""
    cache = ExistenceCache(entries)
    ref: OrderedDict[int, None] = OrderedDict()
    for batch in batches:
        cache.add(batch)
        for key in batch:
            ref[key] = None
            ref.move_to_end(key)
        while len(ref) > entries:
            ref.popitem(last=False)
        assert len(cache) <= entries
        assert believed(cache, range(13)) == set(ref)


@settings(max_examples=150, deadline=None)
@given(
    beliefs=st.sets(st.integers(0, 30)),
    span=st.lists(st.integers(0, 30), unique=True, max_size=20),
    keep=st.integers(-2, 22),
)
def test_invalidate_beyond_property(beliefs: set[int], span: list[int], keep: int) -> None:
    """Exactly the believed keys of span[keep:] are dropped and returned, in span order."""
    cache = ExistenceCache(100)
    cache.add(sorted(beliefs))
    tail = span[max(0, keep) :]
    assert cache.invalidate_beyond(span, keep) == [k for k in tail if k in beliefs]
    assert believed(cache, range(31)) == beliefs - set(tail)


# ---------------------------------------------------------------- InflightPages


def test_inflight_pages_are_counted() -> None:
    """A page enqueued twice stays in flight until both acks."""
    inflight = InflightPages()
    inflight.add([1, 2])
    inflight.add([2, 3])
    inflight.remove([1, 2])
    assert 1 not in inflight and 2 in inflight and 3 in inflight
    inflight.remove([2, 3])
    assert 2 not in inflight and 3 not in inflight


def test_inflight_counts_agree_with_a_reference_count() -> None:
    """Random overlapping node writes, acknowledged in random order, against a plain Counter."""
    rng = random.Random(3)
    inflight, reference = InflightPages(), Counter[int]()
    pending: list[list[int]] = []
    for _ in range(400):
        if pending and rng.random() < 0.5:
            pages = pending.pop(rng.randrange(len(pending)))
            inflight.remove(pages)
            reference.subtract(pages)
        else:
            start = rng.randrange(20)
            pages = list(range(start, start + rng.randrange(1, 6)))
            pending.append(pages)
            inflight.add(pages)
            reference.update(pages)
        held = {key for key, count in reference.items() if count > 0}
        assert {key for key in range(30) if key in inflight} == held
        assert len(inflight) == len(held)


# ---------------------------------------------------------------- gate_backup


def chain_of_nodes() -> tuple[Node, Node, Node]:
    """root -> parent [1, 2, 3] -> child [4, 5]."""
    root = Node(0, [], None, 0)
    parent = Node(1, [1, 2, 3], root, 0)
    child = Node(2, [4, 5], parent, 3)
    root.children[1] = parent
    parent.children[4] = child
    return root, parent, child


def test_gate_skips_node_whose_pages_are_all_believed() -> None:
    root, _parent, child = chain_of_nodes()
    cache = ExistenceCache(100)
    cache.add([4, 5])
    assert gate_backup(cache, child, InflightPages(), root) == "skip_covered"


def test_gate_skips_node_covered_by_beliefs_and_inflight() -> None:
    """FULL check counts in-flight pages as covered, and it runs before the parent gate."""
    root, _parent, child = chain_of_nodes()
    cache = ExistenceCache(100)
    cache.add([4])
    inflight = InflightPages()
    inflight.add([5])
    assert gate_backup(cache, child, inflight, root) == "skip_covered"


def test_gate_drops_node_whose_parent_is_not_covered() -> None:
    """Parent's last page neither believed nor in flight, parent not the root -> drop_parent."""
    root, _parent, child = chain_of_nodes()
    cache = ExistenceCache(100)
    cache.add([1, 2, 4])  # the parent's first pages do not help: only its last page counts
    assert gate_backup(cache, child, InflightPages(), root) == "drop_parent"


def test_gate_writes_when_parent_last_page_believed() -> None:
    root, _parent, child = chain_of_nodes()
    cache = ExistenceCache(100)
    cache.add([3])
    assert gate_backup(cache, child, InflightPages(), root) == "write"


def test_gate_writes_when_parent_last_page_in_flight() -> None:
    root, _parent, child = chain_of_nodes()
    inflight = InflightPages()
    inflight.add([3])
    assert gate_backup(ExistenceCache(100), child, inflight, root) == "write"


def test_gate_writes_child_of_root() -> None:
    root, parent, _child = chain_of_nodes()
    assert gate_backup(ExistenceCache(100), parent, InflightPages(), root) == "write"


def test_gate_on_a_real_split_tree() -> None:
    """After a split the upper half is the parent: its last page is the cut page."""
    tree = make_tree(kv=100)
    tree.insert([1, 2, 3, 4], 1.0)
    leaf, new = tree.insert([1, 2, 7, 8], 2.0)
    assert [n.pages for n in new] == [[7, 8]]
    upper = leaf.parent
    assert upper is not None and upper.pages == [1, 2]
    cache = ExistenceCache(100)
    cache.add([1, 3, 4])
    assert gate_backup(cache, leaf, InflightPages(), tree.root) == "drop_parent"
    cache.add([2])
    assert gate_backup(cache, leaf, InflightPages(), tree.root) == "write"


# ---------------------------------------------------------------- aux_backup_keys


def resident_node(pages: list[int], *, swa: bool, mamba: bool) -> Node:
    node = Node(1, pages, Node(0, [], None, 0), 0)
    held = {"swa": None, "mamba": {node.end: 1}}
    node.resident_aux = {name: held[name] for name, on in (("swa", swa), ("mamba", mamba)) if on}
    return node


def aux(names: list[str], window_pages: int) -> list[Pool]:
    """The aux pool descriptions of a model with these pools and an SWA window of pages."""
    return list(layout(names, window_pages).values())


def test_aux_keys_both_resident() -> None:
    node = resident_node([1, 2, 3, 4, 5], swa=True, mamba=True)
    keys = aux_backup_keys(node, node.pages, aux(["swa", "mamba"], 2))
    assert keys == {"swa": (4, 5), "mamba": (5,)}


def test_aux_keys_window_longer_than_node() -> None:
    """SWA writes min(window, node pages) trailing pages."""
    node = resident_node([1, 2, 3], swa=True, mamba=False)
    assert aux_backup_keys(node, node.pages, aux(["swa"], 10)) == {"swa": (1, 2, 3)}


def test_aux_keys_tombstoned_swa_writes_no_swa() -> None:
    node = resident_node([1, 2, 3], swa=False, mamba=True)
    assert aux_backup_keys(node, node.pages, aux(["swa", "mamba"], 2)) == {"mamba": (3,)}


def test_aux_keys_without_mamba_state_writes_no_mamba() -> None:
    node = resident_node([1, 2, 3], swa=True, mamba=False)
    assert aux_backup_keys(node, node.pages, aux(["swa", "mamba"], 2)) == {"swa": (2, 3)}


def test_aux_keys_nothing_resident() -> None:
    node = resident_node([1, 2, 3], swa=False, mamba=False)
    assert aux_backup_keys(node, node.pages, aux(["swa", "mamba"], 2)) == {}


def test_aux_keys_only_for_the_model_pools() -> None:
    node = resident_node([1, 2, 3], swa=True, mamba=True)
    assert aux_backup_keys(node, node.pages, aux(["mamba"], 2)) == {"mamba": (3,)}
    assert aux_backup_keys(node, node.pages, aux([], 2)) == {}


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 12),
    window=st.integers(1, 6),
    swa=st.booleans(),
    mamba=st.booleans(),
)
def test_aux_keys_property(n: int, window: int, swa: bool, mamba: bool) -> None:
    """SWA: trailing min(window, n) pages iff resident; Mamba: last page iff resident."""
    pages = list(range(10, 10 + n))
    node = resident_node(pages, swa=swa, mamba=mamba)
    keys = aux_backup_keys(node, pages, aux(["swa", "mamba"], window))
    assert keys.get("swa") == (tuple(pages[n - min(window, n) :]) if swa else None)
    assert keys.get("mamba") == ((pages[-1],) if mamba else None)


def test_a_window_reaching_into_the_parent_survives_a_split_after_the_offer() -> None:
    """The backup of a node split between its offer and its staging still writes the whole
    window before its end: the pages before the snapshot, not those of the new upper half."""
    tree = make_tree(kv=100, swa=100, window=4)
    tree.insert(list(range(1, 9)), 0.0, computed_from=0)
    node, _ = tree.insert(list(range(1, 11)), 1.0, computed_from=8)
    pools = aux(["swa"], 4)
    snapshot = tuple(node.pages)
    assert aux_backup_keys(node, snapshot, pools) == {"swa": (7, 8, 9, 10)}
    tree.insert([*range(1, 10), 99], 2.0, computed_from=9)
    assert node.start == 9
    assert aux_backup_keys(node, snapshot, pools) == {"swa": (7, 8, 9, 10)}
