"""One server of the cluster as SimPy processes: prefetch IO, scheduling, prefill, decode, backup.

One process per concern, named by what it does, each concern in its own module: the state they
share (`sim.engine.server_base`), the prefetch IO (`sim.engine.prefetch_io`), the backup writes
(`sim.engine.write_back`) and the scheduler's passes (`sim.engine.scheduler`); this module is
the server the cluster sees, which admits requests and reports. Page work is batched: a
prefetch advances in 128-page storage batches, a backup in one write per node, a request in one
prefill per chunk and one decode step, so the event count grows with requests and batches,
never with pages. Every decision is the model's (`sim.model`); a process only waits, in order,
for what it costs. Arrivals, the router and the storage backend's eviction sources belong to
the cluster (`sim.engine.simulation`), which hands each request to a server's `arrive`.
"""

from __future__ import annotations

from sim.engine.job import Job
from sim.engine.rows import Sample
from sim.engine.scheduler import Scheduler
from sim.workload.kinds import Request


class Server(Scheduler):
    """One server's model in time: it admits what the cluster hands it and reports each request
    that leaves (finished or rejected) to `left`."""

    def start(self) -> None:
        """Register the server's own processes (the scheduler and, in buffer_only mode, the
        flusher; the writer is callbacks)."""
        self.env.process(self.scheduling())
        if self.model.buffer_only:
            self.env.process(self.flushing())

    def finish(self) -> None:
        """Record the requests still waiting or running at the horizon as unfinished, and count
        those that arrived too late to finish even alone on the server."""
        horizon, timing = self.env.now, self.model.timing
        for job in [*self.waiting, *self.running.values()]:
            self._record_request(job, "unfinished")
            req = job.req
            if req.arrival_s >= self.warmup_s and req.arrival_s + timing.alone_s(req) > horizon:
                self.unfinished_late += 1

    def counters(self) -> dict[str, int]:
        """This server's whole-run counters for the summary (docs/metrics.md): its device
        tree's and its prefetcher's. The record tables hold everything else a summary needs."""
        return {
            "hit_query_dropped_beliefs": self.prefetcher.hit_query_dropped_beliefs,
            "prefetch_shrunk": self.prefetcher.shrunk_prefetches,
            "storage_io_halts": int(self.io_halted_s is not None),
            **{f"prefetch_{name}_clamps": n for name, n in self.prefetcher.clamps.items()},
            **{
                f"prefetch_{name}_clamped_tokens": pages * self.model.page_size
                for name, pages in self.prefetcher.clamped_pages.items()
            },
            "hit_query_halts": int(self.prefetcher.hit_queries_halted_s is not None),
            "requests_unfinished_late": self.unfinished_late,
            **self.tree.counters(),
        }

    @property
    def in_flight(self) -> int:
        """Requests handed to this server that have not left it (a router's load)."""
        return len(self.waiting) + len(self.running)

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
            {pool.name: tree.used(pool.name) for pool in self.storage.tail_keyed},
            {name: store.stored_bytes for name, store in stores.items()},
        )
