"""One server of the cluster as SimPy processes: prefetch IO, scheduling, prefill, decode, backup.

One process per concern, named by what it does. Page work is batched: a prefetch advances in
128-page storage batches, a backup in one write per node, a request in one prefill per chunk and
one decode step, so the event count grows with requests and batches, never with pages. Every
decision is the model's (`sim.model`); a process only waits, in order, for what it costs.
Arrivals, the router and the storage backend's eviction sources belong to the cluster
(`sim.engine.simulation`), which hands each request to a server's `arrive`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from sim.engine.channel import ReadChannel, run_callbacks
from sim.engine.job import Job
from sim.engine.links import Link
from sim.engine.records import Records
from sim.engine.rows import PrefetchRecord, Sample, WriteRecord
from sim.model.backup import BackupIntent, StagedWrite
from sim.model.build import ServerModel
from sim.model.node import Node
from sim.model.pools import KV
from sim.model.prefetch import Outcome, PrefetchOp
from sim.workload.kinds import Request


@dataclass(frozen=True)
class Chunk:
    """A request's share of one prefill pass: tokens computed up to `end_token`, pages loaded
    from the host first (its first chunk only)."""

    job: Job
    end_token: int
    tokens: int
    loaded_pages: int
    finishes: bool
    """The chunk ends the prompt (the request's first token)."""


@dataclass(frozen=True)
class HeldWrite:
    """A staged write and the host staging it holds until storage acknowledges it."""

    staged: StagedWrite
    host_pages: int
    windows: dict[str, int]


class Server:
    """One server's model in time: it admits what the cluster hands it and reports each request
    that leaves (finished or rejected) to `left`."""

    def __init__(
        self,
        env: simpy.Environment,
        model: ServerModel,
        *,
        read_link: Link,
        write_link: Link,
        warmup_s: float,
        left: Callable[[Server, Request, str], None],
    ) -> None:
        self.env = env
        self.model = model
        self.instance = model.instance
        self.warmup_s = warmup_s
        self.read_link, self.write_link = read_link, write_link
        """Where this server's storage reads and writes go (its own bandwidth or a share)."""
        self.left = left
        self.load_changed: Callable[[Server], None] | None = None
        """Told when the loads a router reads change inside the server: a prefill batch
        admitted and a batch's prefill done (a delayed router notes them then)."""
        m = model
        self.tree, self.host, self.storage = m.tree, m.host, m.storage
        self.prefetcher, self.write_path = m.prefetcher, m.write_path
        self.records = Records(list(m.pools.values()))
        self.waiting: list[Job] = []
        self.running: dict[int, Job] = {}
        self.pending_writes: deque[BackupIntent] = deque()
        """buffer_only mode: offered writes waiting to be staged, in order."""
        self.backlog: deque[BackupIntent | HeldWrite] = deque()
        """Writes waiting for the storage writer: staged ones (buffer_only) or intents (cache
        mode)."""
        self._writing = False
        """The writer has a write in flight (it takes the backlog's head when that ends)."""
        self.read_channel = ReadChannel(self.env)
        """Prefetches share one storage read channel; the one writer needs no channel."""
        self._wake = self.env.event()
        self._host_freed = self.env.event()
        self._queued = self.env.event()
        self.parked: deque[tuple[PrefetchOp, simpy.Event]] = deque()
        """Rate-limited hits waiting for staging, first come first staged (buffer_only)."""
        self._cum_discards = 0
        self.chunked: Job | None = None
        """The request whose prefill continues next pass (at most one, as SGLang's chunked_req)."""
        self.decoding_jobs = 0
        self._marked: dict[int, Job] = {}
        """Requests marked for a pass-paced retry."""
        self.io_halted_s: float | None = None
        """When a read raised out of the backend and ended this server's storage reads (SGLang's
        prefetch IO worker dies and is never restarted): later prefetches are queried and staged
        but never complete, so each ends by its termination policy."""
        self.anchors = model.anchors
        self.load_tokens = 0
        """Prompt tokens of the requests waiting or running here (what `/get_load` reports)."""

    def start(self) -> None:
        """Register the server's own processes (the scheduler and, in buffer_only mode, the
        flusher; the writer is callbacks)."""
        self.env.process(self.scheduling())
        if self.model.buffer_only:
            self.env.process(self.flushing())

    def finish(self) -> None:
        """Record the requests still waiting or running at the horizon as unfinished."""
        for job in [*self.waiting, *self.running.values()]:
            self._record_request(job, "unfinished")

    def counters(self) -> dict[str, int]:
        """This server's whole-run counters for the summary (docs/metrics.md): its device
        tree's and its prefetcher's. The record tables hold everything else a summary needs."""
        return {
            "hit_query_dropped_beliefs": self.prefetcher.hit_query_dropped_beliefs,
            "prefetch_shrunk": self.prefetcher.shrunk_prefetches,
            "storage_io_halts": int(self.io_halted_s is not None),
            **self.tree.counters(),
        }

    @property
    def in_flight(self) -> int:
        """Requests handed to this server that have not left it (a router's load)."""
        return len(self.waiting) + len(self.running)

    def poke(self) -> None:
        """Wake the scheduler: something it waits on may have changed."""
        if not self._wake.triggered:
            self._wake.succeed()

    def _poke_host_freed(self) -> None:
        self._stage_parked()
        if not self._host_freed.triggered:
            self._host_freed.succeed()

    def _host_freed_event(self) -> simpy.Event:
        """The event the next release of host staging triggers (shared by every waiter)."""
        if self._host_freed.triggered:
            self._host_freed = self.env.event()
        return self._host_freed

    # ------------------------------------------------------------------ admission

    def arrive(self, req: Request) -> None:
        now = self.env.now
        prompt = req.pages[: req.prompt_pages]
        match = self.tree.match(prompt)
        lock = self.tree.root if self.model.buffer_only else match.host_node
        job = Job(req, lock, match.device_pages, match.host_pages)
        job.backoff_pages = match.device_kv_pages - match.device_pages
        if not self.tree.can_ever_hold(len(req.pages) + 1, working_slots=1):
            self._record_request(job, "rejected")
            self.left(self, req, "rejected")
            return
        self.load_tokens += req.prompt_tokens
        self.tree.lock(lock)
        self.tree.touch(match.host_node, now)
        job.op = self.prefetcher.plan(req.rid, match.host_pages, prompt[match.host_pages :], now)
        self.waiting.append(job)
        if job.op is not None:
            self._issue(job, job.op)
        else:
            self._mark_short(job)
        self.poke()

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

    # ------------------------------------------------------------------ prefetch IO

    def prefetching(self, job: Job, op: PrefetchOp) -> Generator[simpy.Event, Any, None]:
        env, prefetcher = self.env, self.prefetcher
        if op.assumed_end is None:
            yield env.timeout(self.storage.exists_s(len(op.span)))
        outcome = prefetcher.query(op, env.now, queue_empty=not self.parked)
        if outcome == Outcome.DECLINED and (yield from self._parked(op)):
            outcome = None
        if outcome is None and self.model.buffer_only:
            outcome = self._commit_anchor(job, op)
        if outcome is not None:
            self._missed(job, op, outcome)
            return
        kv_bytes = self.storage.kv.page_bytes
        for batch in prefetcher.kv_batches(op):
            if self.io_halted_s is not None:
                break
            yield from self._read(op, len(batch) * kv_bytes)
            if op.terminated or self.io_halted_s is not None:
                break
            complete = prefetcher.read_kv(op, batch, env.now)
            self._halt_if_raised(KV)
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

    # ------------------------------------------------------------------ scheduler

    def scheduling(self) -> Generator[simpy.Event, Any, None]:
        """The scheduler's passes: each polls the retries, then runs a prefill batch if it can
        form one. With no batch it sleeps until something changes, unless a retry is pending:
        then passes go on, a decode step each while requests decode, else an idle spin."""
        env, timing = self.env, self.model.timing
        while True:
            self._poll_retries()
            batch = self._prefill_batch()
            if batch:
                if self.load_changed is not None:
                    self.load_changed(self)
                yield env.timeout(sum(timing.prefill_s(c.tokens, c.loaded_pages) for c in batch))
                for chunk in batch:
                    self._chunk_done(chunk)
                if self.load_changed is not None:
                    self.load_changed(self)
                continue
            retries = self.model.retries
            if retries is not None and retries.pending:
                yield env.timeout(
                    timing.decode_step_s if self.decoding_jobs else timing.idle_pass_s
                )
                continue
            self._wake = env.event()
            yield self._wake

    def _prefill_batch(self) -> list[Chunk]:
        """One pass's prefill: the chunked request's next chunk first, then waiting requests
        while the pass's chunk budget lasts (SGLang's PrefillAdder: `rem_chunk_tokens` is shared
        by the batch, each request takes its extend rounded up to a page, and the one that does
        not fit is cut at a page and continues next pass). With `chunk_budget: request` or no
        chunking, a pass holds one request."""
        timing, page = self.model.timing, self.model.page_size
        budget = timing.chunk_tokens
        shared = budget is not None and timing.shared_chunk_budget
        batch: list[Chunk] = []
        if self.chunked is not None:
            batch.append(self._next_chunk(self.chunked, budget, page_cut=False))
        while not batch or (shared and batch[-1].finishes):
            if budget is not None:
                budget -= sum(-(-c.tokens // page) * page for c in batch[-1:])
                if budget < page:
                    break
            job = self._next_admissible()
            if job is None:
                break
            self._admit(job)
            batch.append(self._next_chunk(job, budget, page_cut=bool(batch)))
        return batch

    def _next_chunk(self, job: Job, budget: int | None, *, page_cut: bool) -> Chunk:
        """The job's next chunk within `budget` tokens; a request joining a batch is cut at a
        page boundary."""
        left = job.req.prompt_tokens - job.next_token
        take = left if budget is None else min(left, budget)
        if page_cut and take < left:
            take -= take % self.model.page_size
        loaded, job.load_pages = job.load_pages, 0
        return Chunk(job, job.next_token + take, take, loaded, take == left)

    def _next_admissible(self) -> Job | None:
        """First waiting job whose prefetch may stop now and whose memory can be reserved."""
        now, tree = self.env.now, self.tree
        for i, job in enumerate(self.waiting):
            if not self._prefetch_settled(job, now):
                continue
            prompt = job.req.pages[: job.req.prompt_pages]
            match = tree.match(prompt)
            op = job.op
            if (
                self.model.buffer_only
                and op is not None
                and op.issued
                and match.host_pages < op.start_page
            ):
                self._refetch(job)
                continue
            need = len(job.req.pages) - match.device_pages
            tree.lock(match.host_node)
            reserved = tree.reserve(need, 1)
            tree.unlock(match.host_node)
            if not reserved:
                return None
            job.reserved_kv = need
            del self.waiting[i]
            return job
        return None

    def _prefetch_settled(self, job: Job, now: float) -> bool:
        """Has the prefetch finished, or does its termination policy let it stop now? A
        prefetch that may not stop yet keeps the request waiting, with a wake-up at the time
        the policy gives."""
        op = job.op
        if op is None or op.done:
            return True
        stop_at = self.prefetcher.may_stop_at(op)
        if now >= stop_at:
            op.terminated = True
            if self.model.retries is not None:
                self.model.retries.expire(job.req.rid)
            return True
        if math.isfinite(stop_at) and job.wake_at != stop_at:
            job.wake_at = stop_at
            self.env.timeout(stop_at - now).callbacks.append(lambda _e: self.poke())
        return False

    def _admit(self, job: Job) -> None:
        """Start a request's prefill: settle its prefetch, then insert what the device, host or
        storage holds; the rest is computed chunk by chunk."""
        tree, req, page_size = self.tree, job.req, self.model.page_size
        job.admitted_s = self.env.now
        self.running[req.rid] = job
        if self.model.retries is not None:
            self.model.retries.cancel(req.rid)
            self._marked.pop(req.rid, None)
        prompt = req.pages[: req.prompt_pages]
        loaded_end = self._resolve_prefetch(job)
        match = tree.match(prompt)
        covered = max(match.host_pages, loaded_end, match.device_pages)
        self._insert(
            job,
            prompt[:covered],
            computed_from=covered,
            backed_up=loaded_end >= covered > match.device_pages,
        )
        if job.anchor_pages:
            self._unpin(job)
        job.recomputed_tokens = req.prompt_tokens - covered * page_size
        job.device_change_pages = covered - job.host_pages - job.l3_loaded_pages
        job.load_pages = covered - match.device_pages
        job.next_token = covered * page_size
        job.computed_from = covered

    def _chunk_done(self, chunk: Chunk) -> None:
        """A chunk's end is an insert (SGLang's cache_unfinished_req); the last one, at the
        first token, inserts the prompt and starts the decode."""
        job, page_size = chunk.job, self.model.page_size
        req = job.req
        prompt = req.pages[: req.prompt_pages]
        job.next_token = chunk.end_token
        if not chunk.finishes:
            self.chunked = job
            chunk_end = chunk.end_token // page_size
            if chunk_end > job.computed_from:
                self._insert(job, prompt[:chunk_end], computed_from=job.computed_from)
                job.computed_from = chunk_end
            return
        if self.chunked is job:
            self.chunked = None
        job.first_token_s = self.env.now
        self._insert(
            job,
            prompt,
            computed_from=job.computed_from,
            backup_path=self.model.buffer_only,
        )
        self.decoding_jobs += 1
        decode = self.env.timeout(self.model.timing.decode_s(job.req.output_tokens))
        decode.callbacks.append(lambda _e: self._decoded(job))

    def _resolve_prefetch(self, job: Job) -> int:
        """Settle an issued prefetch through the model; returns the loaded endpoint (pages)."""
        op = job.op
        if op is None or not op.issued:
            if op is not None and not op.done:
                self._unpark(op)
            return 0
        now = self.env.now
        resolution = self.prefetcher.resolve(op, now)
        self._poke_host_freed()
        job.prefetch_outcome = resolution.outcome
        if resolution.outcome == Outcome.SUCCESS:
            job.l3_loaded_pages = resolution.loaded_end - op.start_page
        elif now >= self.warmup_s:
            self._cum_discards += 1
        self._record_prefetch(job, op, resolution.outcome, resolution.dropped)
        return resolution.loaded_end

    def _insert(
        self,
        job: Job,
        pages: list[int],
        *,
        computed_from: int,
        backed_up: bool = False,
        backup_path: bool = False,
    ) -> None:
        """Insert on the device against the job's reservation, move the job's lock to the new
        end, and offer the nodes the write path asks for (`backup_path`: the whole path)."""
        tree = self.tree
        before = tree.kv.used
        node, new_nodes = tree.insert(
            pages,
            self.env.now,
            backed_up=backed_up,
            computed_from=computed_from,
            lock=True,
        )
        take = min(tree.kv.used - before, job.reserved_kv)
        job.reserved_kv -= take
        tree.kv.reserved -= take
        tree.unlock(job.lock_node)
        job.lock_node = node
        path = tree.path(node) if backup_path else None
        for candidate in self.write_path.candidates(new_nodes, path):
            self.offer_backup(candidate)

    # ------------------------------------------------------------------ decode and finish

    def _decoded(self, job: Job) -> None:
        """A request's decode ended (a timer's callback: nothing waits on a decode, so it is no
        process): insert its output, release its memory and let it leave."""
        self.decoding_jobs -= 1
        self._insert(job, job.req.pages, computed_from=job.req.prompt_pages)
        self.tree.unlock(job.lock_node)
        self.tree.release(job.reserved_kv, 1)
        job.reserved_kv = 0
        del self.running[job.req.rid]
        self.load_tokens -= job.req.prompt_tokens
        self._record_request(job, "finished")
        self.left(self, job.req, "finished")
        self.poke()

    # ------------------------------------------------------------------ backup IO

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

    # ------------------------------------------------------------------ time series

    def sample(self) -> None:
        """Append a time-series row for now."""
        tree, existence, stores = self.tree, self.model.existence, self.storage.pools
        sample = Sample(
            t_s=self.env.now,
            discards=self._cum_discards,
            existence_entries=len(existence),
            stale_beliefs_recent_4096=existence.count_absent_recent(self.storage.kv.keys()),
            healed_beliefs_pending=self.write_path.pending_rewrites(),
            host_pages=self.host.used_pages,
            device_kv_pages=tree.kv.used,
        )
        self.records.add_sample(
            sample,
            {pool.name: tree.used(pool.name) for pool in self.storage.aux},
            {name: store.stored_bytes for name, store in stores.items()},
        )

    # ------------------------------------------------------------------ records

    def _record_request(self, job: Job, outcome: str) -> None:
        finish_s = self.env.now if outcome == "finished" else None
        self.records.requests.append(job.record(outcome, finish_s, self.model.page_size))

    def _record_prefetch(self, job: Job, op: PrefetchOp, outcome: str, dropped: Any) -> None:
        row = PrefetchRecord.of(
            op, job.req.rid, outcome, self.env.now, len(dropped), self.prefetcher.read_bytes(op)
        )
        self.records.add_prefetch(row, op.aux)
