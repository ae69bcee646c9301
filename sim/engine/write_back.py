"""A server's backup writes: offered nodes gated and queued, staged on the host (buffer_only
mode) and written to storage by the one writer.

A backup is one write per node. In buffer_only mode the flusher process stages queued writes in
order as host memory allows; the writer is no process but callbacks, each transfer's end taking
the next write. What a write covers and what storage acknowledges is the write path's
(`sim.model.backup`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from sim.engine.prefetch_io import PrefetchIO
from sim.engine.rows import WriteRecord
from sim.engine.server_base import HeldWrite
from sim.model.backup import BackupIntent, StagedWrite
from sim.model.node import Node


class WriteBack(PrefetchIO):
    """The backup writes of one server; its host staging frees wake the parked prefetches
    (`PrefetchIO`)."""

    def offer_backup(self, node: Node) -> None:
        """Gate a node and queue its write (SGLang: enqueue_backup_intent)."""
        now = self.env.now
        intent = self.write_path.offer(node, now)
        if isinstance(intent, BackupIntent):
            if self.model.buffer_only:
                self.pending_writes.append(intent)
                if not self._queued.triggered:
                    self._queued.succeed()
            else:
                self._queue_write(intent)
        elif intent is not None:
            self.records.add_write(WriteRecord.skipped(now, node.nid, len(node.pages), intent))

    def flushing(self) -> Generator[simpy.Event, Any, None]:
        """buffer_only mode: stage queued writes on the host in order, each as soon as the
        gates let it, and hand them to the writer (SGLang's `flush_pending_writes`): a head
        whose node left the device, whose parent is no longer covered or that could never be
        staged is dropped; a head that does not fit the live write cap, its aux pools' margin
        or host memory blocks the queue until staging frees. The staged copy is the data, so
        a node evicted after it is staged is still written."""
        env, pending, path = self.env, self.pending_writes, self.write_path
        while True:
            if not pending:
                self._queued = env.event()
                yield self._queued
                continue
            intent = pending[0]
            verdict = path.head_verdict(intent)
            spec = path.spec(intent) if verdict is None else None
            windows = self._write_windows(spec) if spec is not None else None
            if spec is None or windows is None:
                pending.popleft()
                path.drop(intent)
                self.records.add_write(
                    WriteRecord.skipped(
                        env.now, intent.node.nid, len(intent.pages), verdict or "drop_oversize"
                    )
                )
                continue
            kv_pages = spec.staging_pages
            if self.host.write_staging_full() or not self._take_write_staging(kv_pages, windows):
                yield self._host_freed_event()
                continue
            pending.popleft()
            path.dequeue(intent)
            yield env.timeout(self.model.timing.staging_s(spec))
            self._queue_write(HeldWrite(spec, kv_pages, windows))

    def _queue_write(self, item: BackupIntent | HeldWrite) -> None:
        """Hand a write to the one storage writer: at once when it is idle, else after the
        writes queued before it."""
        if self._writing:
            self.backlog.append(item)
        else:
            self._write(item)

    def _write(self, item: BackupIntent | HeldWrite) -> None:
        """The one storage writer takes a write: as staged (buffer_only mode) or from the device
        now (cache mode, where the host holds a copy). The writer is no process: the transfer's
        end calls `_written`, which takes the next write."""
        self._writing = True
        if isinstance(item, HeldWrite):
            held: HeldWrite | None = item
            staged: StagedWrite | None = item.staged
        else:
            held, staged = None, self.write_path.stage(item)
        assert staged is not None, "cache mode never drops a queued write"
        self.write_path.plan_put(staged, self.env.now)
        done = self.write_link.start(staged.write_bytes)
        done.callbacks.append(lambda _e: self._written(held, staged))

    def _written(self, held: HeldWrite | None, staged: StagedWrite) -> None:
        """Storage acknowledged a write: store it, free its staging, record it, and take the
        next write if one waits."""
        now = self.env.now
        ack = self.write_path.acknowledge(staged, now)
        if held is not None:
            self.host.free_backup(held.host_pages)
            for name, tail_pages in held.windows.items():
                self.prefetcher.aux_staging[name].free_backup(tail_pages)
            self._poke_host_freed()
        intent = staged.intent
        self.records.add_write(
            WriteRecord.written(now, intent.node.nid, len(intent.pages), staged, ack),
            staged.aux_keys,
            ack.aux_ok,
        )
        if self.backlog:
            self._write(self.backlog.popleft())
        else:
            self._writing = False

    def _write_windows(self, spec: StagedWrite) -> dict[str, int] | None:
        """Aux staging pages a write takes, per staging pool (its tail keys); None when it
        could never be staged: more than the host pool, or a tail more than writes may ever use
        of its pool (`_backup_oversize`)."""
        staging = self.prefetcher.aux_staging
        windows = {
            name: len(keys) for name, keys in spec.aux_keys.items() if name in staging and keys
        }
        if spec.staging_pages > self.host.capacity_pages:
            return None
        for name, pages in windows.items():
            if pages > staging[name].write_limit_pages:
                return None
        return windows

    def _take_write_staging(self, kv_pages: int, windows: dict[str, int]) -> bool:
        """Stage a write: host pages for its KV, and its aux tails where each pool keeps its
        loads margin free (SGLang waits at the head of the write queue otherwise)."""
        staging = self.prefetcher.aux_staging
        for name, pages in windows.items():
            if staging[name].write_blocked(pages):
                return False
        if not self.host.alloc_backup(kv_pages):
            return False
        for name, pages in windows.items():
            staging[name].alloc_backup(pages)
        return True
