"""The write queue of buffer_only mode (SGLang's `flush_pending_writes` and
`enqueue_backup_intent`): writes are staged on the host in order as soon as the gates let them,
so a node evicted after it is staged is still written; the live write cap holds the queue's
head; a full backlog, an oversized intent and a head whose parent was dropped are dropped, each
counted in `backup_dropped_tokens`."""

from __future__ import annotations

from sim.engine.runner import RunResult, run
from sim.model.backup import BackupIntent, WritePath
from sim.model.existence import ExistenceCache
from sim.model.host import HostPool
from tests.conftest import make_scenario
from tests.model_helpers import make_storage, make_tree

SLOW_WRITER = {
    "workload.arrival_rate_per_s": 8,
    "workload.requests": 300,
    "workload.prefixes": 100,
    "workload.prefix_tokens": 4096,
    "device.kv_pages": 600,
    "storage.write_gbps": 0.05,
}
"""Writes far slower than the device turns over: queued nodes leave the device before the
writer reaches them."""


def verdicts(result: RunResult) -> dict[str, int]:
    return result.tables["writes"]["verdict"].value_counts().to_dict()


def dropped_tokens(result: RunResult) -> int:
    writes = result.tables["writes"]
    dropped = writes["verdict"].isin(["stale", "drop_parent", "drop_backlog", "drop_oversize"])
    return int(writes.loc[dropped, "pages"].sum()) * 64


def test_a_node_evicted_after_its_write_was_staged_is_still_written() -> None:
    """The staged host copy is what storage receives: with a writer this slow, a queue staged
    only when the writer reached each node lost 145 of them to eviction (and wrote 1,728
    pages); staged at once, none is lost."""
    result = run(make_scenario(**SLOW_WRITER))
    assert verdicts(result).get("stale", 0) == 0
    assert result.summary["written_pages"] > 3000


def test_a_full_backlog_drops_new_offers_and_counts_them() -> None:
    """Host staging holds at most one 64-page node, so offers wait to be staged; past twice the
    300-page device pool they are dropped."""
    result = run(
        make_scenario(
            **{**SLOW_WRITER, "device.kv_pages": 300, "host.pages": 100, "storage.write_gbps": 0.01}
        )
    )
    counts = verdicts(result)
    assert counts.get("drop_backlog", 0) > 0
    assert result.summary["backup_dropped_tokens"] == dropped_tokens(result) > 0


def test_an_intent_larger_than_the_host_pool_is_dropped_not_staged() -> None:
    result = run(
        make_scenario(
            **{"workload.requests": 100, "workload.prefix_tokens": 4096, "host.pages": 40}
        )
    )
    counts = verdicts(result)
    assert counts.get("drop_oversize", 0) > 0, counts
    assert set(counts) <= {"drop_oversize", "drop_parent"}, "their children lose their parent"
    assert result.summary["written_pages"] == 0
    assert result.summary["backup_dropped_tokens"] == dropped_tokens(result) > 0


def test_cache_mode_drops_no_write() -> None:
    result = run(make_scenario(**{**SLOW_WRITER, "host.mode": "cache"}))
    assert result.summary["backup_dropped_tokens"] == 0
    assert verdicts(result).get("write", 0) > 0


def test_the_live_write_cap_leaves_loads_their_share_but_writes_a_fifth() -> None:
    host = HostPool(100)
    host.backup_pages = 89
    assert not host.write_staging_full(), "nothing staged for loads: 100 - 10 = 90"
    host.backup_pages = 90
    assert host.write_staging_full()
    host.prefetch_pages, host.backup_pages = 85, 19
    assert not host.write_staging_full(), "loads leave 5, but writes may always use 20"
    host.backup_pages = 20
    assert host.write_staging_full()


def test_a_dropped_parent_takes_its_queued_children_with_it() -> None:
    """A child offered while its parent was queued passes the parent-cover gate; when the
    parent is dropped at the head (its node left the device), the child is dropped in turn."""
    storage = make_storage({"kv": []})
    tree = make_tree(kv=100)
    path = WritePath(ExistenceCache(1000), storage, tree.root, buffer_only=True)
    parent, _ = tree.insert([1, 2, 3], 0.0)
    child, _ = tree.insert([1, 2, 3, 4, 5], 0.0)
    first, second = path.offer(parent, 0.0), path.offer(child, 0.0)
    assert isinstance(first, BackupIntent) and isinstance(second, BackupIntent)
    assert path.queued_pages == 5
    assert path.head_verdict(second) is None, "the parent is in flight"
    parent.alive = False
    assert path.head_verdict(first) == "stale"
    path.drop(first)
    assert path.head_verdict(second) == "drop_parent"
    path.drop(second)
    assert path.queued_pages == 0 and len(path.inflight) == 0


def test_backlog_and_oversize_gates_refuse_at_the_offer() -> None:
    storage = make_storage({"kv": []})
    tree = make_tree(kv=100)
    path = WritePath(
        ExistenceCache(1000),
        storage,
        tree.root,
        buffer_only=True,
        host_pages=4,
        backlog_cap_pages=3,
    )
    big, _ = tree.insert([1, 2, 3, 4, 5], 0.0)
    assert path.offer(big, 0.0) == "drop_oversize"
    small, _ = tree.insert([7, 8, 9], 0.0)
    assert isinstance(path.offer(small, 0.0), BackupIntent)
    other, _ = tree.insert([11], 0.0)
    assert path.offer(other, 0.0) == "drop_backlog", "three pages already wait"
