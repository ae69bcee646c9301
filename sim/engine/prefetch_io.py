"""A server's prefetch IO: issuing a planned prefetch, its storage reads, its retries, and the
hits parked for host staging.

A prefetch advances in 128-page storage batches on the server's one read channel; every
decision (what a query finds, what a read keeps, when a miss is retried) is the prefetcher's
(`sim.model.prefetch`), and this layer only waits, in order, for what each step costs. Host
staging freed by a prefetch or a write stages the parked hits first, then wakes the writes
waiting for it (`_poke_host_freed`). The scheduler (`sim.engine.scheduler`) settles what a
prefetch read when its request is admitted.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from sim.engine.channel import run_callbacks
from sim.engine.job import Job
from sim.engine.server_base import ServerBase
from sim.model.node import Node
from sim.model.pools import KV
from sim.model.prefetch import Outcome, PrefetchOp


class PrefetchIO(ServerBase):
    """The prefetch processes of one server, over its state (`ServerBase`)."""

    def _poke_host_freed(self) -> None:
        self._stage_parked()
        if not self._host_freed.triggered:
            self._host_freed.succeed()

    def _host_freed_event(self) -> simpy.Event:
        """The event the next release of host staging triggers (shared by every waiter)."""
        if self._host_freed.triggered:
            self._host_freed = self.env.event()
        return self._host_freed

    def retrying(self, job: Job, delay_s: float) -> Generator[simpy.Event, Any, None]:
        """Seconds pacing (`prefetch.retry.interval_s`): re-issue a missed prefetch `delay_s`
        later, unless its request was admitted or heads the queue by then."""
        yield self.env.timeout(delay_s)
        if job.admitted_s is None and not (self.waiting and self.waiting[0] is job):
            self._reissue(job)

    def _poll_retries(self) -> None:
        """One pass of pass pacing: re-issue the marked requests that are due, in queue
        order (SGLang: StoragePrefetchRetries.pop_ready at the start of a scheduler pass)."""
        retries, marked = self.model.retries, self._marked
        if retries is None or not retries.pending:
            return
        ready = retries.pop_ready(
            [job.req.rid for job in self.waiting], lambda rid: marked[rid].retries
        )
        jobs = [marked[rid] for rid in ready]
        for rid in [rid for rid in marked if not retries.marked(rid)]:
            del marked[rid]
        for job in jobs:
            self._reissue(job)

    def _mark_short(self, job: Job) -> None:
        """A span too short to prefetch, marked for a paced retry where the release does so
        (`prefetch.retry.short_spans`)."""
        retries = self.model.retries
        if retries is not None and retries.mark_short(job.req.rid, job.retries):
            self._marked[job.req.rid] = job

    def _reissue(self, job: Job) -> None:
        """Re-issue a missed prefetch for a queued request, from a fresh match; a span now
        shorter than the threshold gets no prefetch (SGLang: `_retry_storage_prefetch` counts
        the attempt first, then `_prefetch_kvcache`)."""
        now, tree = self.env.now, self.tree
        prompt = job.req.pages[: job.req.prompt_pages]
        match = tree.match(prompt)
        assumed_end, job.refetch_end = job.refetch_end, None
        job.retries += 1
        op = self.prefetcher.plan(
            job.req.rid,
            match.host_pages,
            prompt[match.host_pages :],
            now,
            job.retries,
            assumed_end,
        )
        if op is None:
            self._mark_short(job)
            return
        tree.touch(match.host_node, now)
        if not self.model.buffer_only:
            self._move_lock(job, match.host_node)
        job.op = op
        self._issue(job, op)

    def _move_lock(self, job: Job, node: Node) -> None:
        self.tree.lock(node)
        self.tree.unlock(job.lock_node)
        job.lock_node = node

    def _issue(self, job: Job, op: PrefetchOp) -> None:
        """Start a planned prefetch, or forfeit it when an aux staging window does not fit."""
        if not self.prefetcher.take_windows(op):
            self._missed(job, op, Outcome.FORFEITED)
        elif op.assumed_end is None:
            run_callbacks(self.prefetching(job, op))
        else:
            self.env.process(self.prefetching(job, op))

    def prefetching(self, job: Job, op: PrefetchOp) -> Generator[simpy.Event, Any, None]:
        env, prefetcher = self.env, self.prefetcher
        if op.assumed_end is None:
            yield env.timeout(self.storage.exists_s(len(op.span)))
        outcome = prefetcher.query(op, env.now, queue_empty=not self.parked)
        if outcome == Outcome.UNANSWERED:
            op.unanswered = True
            return
        if outcome == Outcome.DECLINED and (yield from self._parked(op)):
            outcome = None
        if outcome is None and self.model.buffer_only:
            outcome = self._commit_anchor(job, op)
        if outcome is not None:
            self._missed(job, op, outcome)
            return
        kv_bytes = prefetcher.batch_page_bytes
        for batch in prefetcher.kv_batches(op):
            if self.io_halted_s is not None:
                break
            yield from self._read(op, len(batch) * kv_bytes)
            if op.terminated or self.io_halted_s is not None:
                break
            complete = prefetcher.read_kv(op, batch, env.now)
            for pool in (KV, *op.riders):
                self._halt_if_raised(pool)
            if not complete:
                break
        for transfer in prefetcher.aux_reads(op):
            if op.terminated or self.io_halted_s is not None:
                break
            nbytes = len(transfer.keys or ()) * self.storage.pools[transfer.pool].page_bytes
            yield from self._read(op, nbytes)
            if op.terminated or self.io_halted_s is not None:
                break
            prefetcher.read_aux(op, transfer, env.now)
            self._halt_if_raised(transfer.pool)
        if self.io_halted_s is not None:
            return
        op.done = True
        self.poke()

    def _halt_if_raised(self, pool: str) -> None:
        """A read that raised out of the backend ends this server's storage reads: the op
        reading never completes, nor does any after it."""
        if self.io_halted_s is None and self.prefetcher.read_raised(pool):
            self.io_halted_s = self.env.now

    def _commit_anchor(self, job: Job, op: PrefetchOp) -> Outcome | None:
        """buffer_only: as a staged op commits its reads, check the device prefix it splices
        onto and pin it within the cap (SGLang's IO commit in `_try_alloc_storage_hit`,
        `try_lock_anchor`): a lost anchor or a hit the device now holds gives the staging back."""
        prompt = job.req.pages[: job.req.prompt_pages]
        match = self.tree.match(prompt)
        lost = match.host_pages < op.start_page
        if lost or match.host_pages >= op.start_page + op.hit_pages:
            self.prefetcher.unstage(op)
            self._poke_host_freed()
            return Outcome.ANCHOR_LOST if lost else Outcome.DEVICE_COVERED
        if self.anchors.try_pin(match.host_pages):
            self._move_lock(job, match.host_node)
            job.anchor_pages = match.host_pages
        return None

    def _unpin(self, job: Job) -> None:
        """The job's anchor no longer counts against the cap (its lock is moved or released
        by the caller)."""
        self.anchors.release(job.anchor_pages)
        job.anchor_pages = 0

    def _refetch(self, job: Job) -> None:
        """buffer_only: a staged hold whose anchor shrank (evicted while unpinned) cannot be
        spliced: release it and fetch the span again at once, assuming storage still holds it
        (SGLang's `_refetch_staged`: `release_staged_hold("shrunk")`, then
        `StoragePrefetchRetries.refetch`, re-issued at the next pass even for the queue head)."""
        op = job.op
        assert op is not None
        end = op.start_page + op.hit_pages
        self._record_prefetch(job, op, Outcome.REFETCHED, ())
        job.prefetch_outcome = Outcome.REFETCHED
        self.prefetcher.release_hold(op)
        self._poke_host_freed()
        if job.anchor_pages:
            self._unpin(job)
            self._move_lock(job, self.tree.root)
        if job.retries >= self.prefetcher.retry.max_attempts:
            return
        job.refetch_end = end
        retries = self.model.retries
        if retries is None:
            self._reissue(job)
        else:
            retries.refetch(job.req.rid)
            self._marked[job.req.rid] = job

    def _parked(self, op: PrefetchOp) -> Generator[simpy.Event, Any, bool]:
        """Wait, parked behind the hits parked before it, for staging (buffer_only mode); False
        when the hit is declined instead (cache mode, a hit that can never fit, or the request
        admitted meanwhile)."""
        if not self.prefetcher.may_park(op):
            return False
        granted = self.env.event()
        self.parked.append((op, granted))
        return bool((yield granted))

    def _stage_parked(self) -> None:
        """Stage parked hits in order until one does not fit; a hit stopped by its policy
        while parked leaves unstaged."""
        parked = self.parked
        while parked:
            op, granted = parked[0]
            if not op.terminated and not self.prefetcher.stage(op):
                return
            parked.popleft()
            granted.succeed(not op.terminated)

    def _unpark(self, op: PrefetchOp) -> None:
        """A parked hit whose request was admitted gives up its place (it is declined)."""
        for i, (parked_op, granted) in enumerate(self.parked):
            if parked_op is op:
                del self.parked[i]
                granted.succeed(False)
                self._stage_parked()
                return

    def _missed(self, job: Job, op: PrefetchOp, outcome: Outcome) -> None:
        """An op that ended before reading: record it and arm a retry if one is due."""
        op.done = True
        job.prefetch_outcome = outcome
        if op.staged_windows:
            self.prefetcher.release_windows(op)
            self._poke_host_freed()
        self._record_prefetch(job, op, outcome, ())
        if job.admitted_s is None and self.prefetcher.retries_miss(op, outcome, job.retries):
            retries = self.model.retries
            if retries is None:
                delay_s = self.prefetcher.retry.interval_s
                self.env.process(self.retrying(job, delay_s or 0.0))
            else:
                retries.mark(job.req.rid)
                self._marked[job.req.rid] = job
        self.poke()

    def _read(self, op: PrefetchOp, nbytes: int) -> Generator[simpy.Event, Any, None]:
        """One storage read, after the reads queued before it on this server's channel."""
        op.transfer_bytes += nbytes
        granted = self.read_channel.acquire()
        if granted is not None:
            yield granted
        yield from self.read_link.transfer(nbytes)
        self.read_channel.release()
