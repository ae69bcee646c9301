"""A server's scheduler: its passes, each a prefill batch of chunks or a decode step of the
running batch (`sim.engine.running_batch`), one forward at a time.

A request computes in one prefill per chunk; decode steps are timed in runs between changes of
the batch, so the event count grows with requests, chunks and wake-ups, never with pages or
tokens. Admission settles a request's prefetch
(`sim.engine.prefetch_io`) and reserves its memory; each insert offers the write path the new
nodes (`sim.engine.write_back`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from sim.engine.job import Job
from sim.engine.rows import DecodeGap
from sim.engine.write_back import WriteBack
from sim.model.prefetch import Outcome


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


class Scheduler(WriteBack):
    """The scheduler's passes and the requests' prefill and decode on one server."""

    def scheduling(self) -> Generator[simpy.Event, Any, None]:
        """SGLang's event loop: each pass polls the retries, then runs a prefill batch if it
        can form one, else a decode step of the running batch (`get_next_batch_to_run`: a
        prefill batch first, so it pauses decode). With neither it sleeps until something
        changes, unless a retry is pending: then passes go on as idle spins."""
        env, timing = self.env, self.model.timing
        while True:
            self._poll_retries()
            self._wake = env.event()
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
            if self.running_batch.size:
                yield from self._decode_steps()
                continue
            retries = self.model.retries
            if retries is not None and retries.pending:
                yield env.timeout(
                    timing.decode_step_s if self.decoding_jobs else timing.idle_pass_s
                )
                continue
            yield self._wake

    def _decode_steps(self) -> Generator[simpy.Event, Any, None]:
        """Decode steps until a request ends or the scheduler is woken (a pass may then form a
        prefill batch): the steps are timed in one go, and a wake-up ends the run at the end of
        the step it falls in. While a retry is pending each step is a pass of its own."""
        env, batch = self.env, self.running_batch
        retries = self.model.retries
        paced = retries is not None and retries.pending
        ends = batch.step_ends(env.now, 1 if paced else batch.steps_to_next_end())
        if len(ends) == 1:
            yield env.timeout(ends[0] - env.now)
        else:
            yield env.timeout(ends[-1] - env.now) | self._wake
            if env.now < ends[-1]:
                done = bisect.bisect_left(ends, env.now)
                if ends[done] > env.now:
                    yield env.timeout(ends[done] - env.now)
                del ends[done + 1 :]
        finished, gaps = batch.advance(ends)
        self.records.decode_gaps.extend(gaps)
        for job in finished:
            self._decoded(job)

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
        if not self.model.timing.batched_decode:
            decode = self.env.timeout(self.model.timing.decode_s(job.req.output_tokens))
            decode.callbacks.append(lambda _e: self._decoded_alone(job))
        elif job.req.output_tokens > 1:
            self.running_batch.join(job, self.env.now)
        else:
            self._decoded(job)

    def _resolve_prefetch(self, job: Job) -> int:
        """Settle an issued prefetch through the model; returns the loaded endpoint (pages)."""
        op = job.op
        if op is None or not op.issued:
            if op is not None and not op.done:
                self._unpark(op)
            if op is not None and op.unanswered:
                op.done = True
                self.prefetcher.release_windows(op)
                self._poke_host_freed()
                job.prefetch_outcome = Outcome.UNANSWERED
                self._record_prefetch(job, op, Outcome.UNANSWERED, ())
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

    def _decoded_alone(self, job: Job) -> None:
        """`decode: per_request`: the timer's tokens after the first, evenly spaced."""
        tokens, first_s = job.req.output_tokens - 1, job.first_token_s
        if tokens > 0 and first_s is not None:
            now = self.env.now
            self.records.decode_gaps.append(DecodeGap(now, (now - first_s) / tokens, tokens))
        self._decoded(job)

    def _decoded(self, job: Job) -> None:
        """A request's decode ended (its last step, or its timer's callback with `decode:
        per_request`): insert its output, release its memory and let it leave."""
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
