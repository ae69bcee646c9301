"""A server's state, and what every one of its processes uses: the wake-ups and the records.

`Server` (`sim.engine.server`) is one class built in layers, one module per concern, each a
subclass of the one below: this state, the prefetch IO (`sim.engine.prefetch_io`), the backup
writes (`sim.engine.write_back`), the scheduler's passes (`sim.engine.scheduler`), then the
server the cluster sees. A concern calls only what its own layer and those below define; the
layers are single inheritance because the compiled copy (mypyc) compiles no other. A write
held on the host (`HeldWrite`) is defined here because the state's write backlog holds them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import simpy

from sim.engine.channel import ReadChannel
from sim.engine.job import Job
from sim.engine.links import Link
from sim.engine.records import Records
from sim.engine.rows import PrefetchRecord
from sim.engine.running_batch import RunningBatch
from sim.model.backup import BackupIntent, StagedWrite
from sim.model.build import ServerModel
from sim.model.prefetch import PrefetchOp
from sim.workload.kinds import Request


@dataclass(frozen=True)
class HeldWrite:
    """A staged write and the host staging it holds until storage acknowledges it."""

    staged: StagedWrite
    host_pages: int
    windows: dict[str, int]


class ServerBase:
    """One server's model and the state its processes share. It reports each request that
    leaves (finished or rejected) to `left` and each change of the loads a router reads to
    `load_changed`, both with the server itself (typed `Any`: no layer below `Server` can name
    it)."""

    def __init__(
        self,
        env: simpy.Environment,
        model: ServerModel,
        *,
        read_link: Link,
        write_link: Link,
        warmup_s: float,
        left: Callable[[Any, Request, str], None],
    ) -> None:
        self.env = env
        self.model = model
        self.instance = model.instance
        self.warmup_s = warmup_s
        self.read_link, self.write_link = read_link, write_link
        """Where this server's storage reads and writes go (its own bandwidth or a share)."""
        self.left = left
        self.load_changed: Callable[[Any], None] | None = None
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
        self.running_batch = RunningBatch(model.timing)
        self.unfinished_late = 0
        """Requests unfinished at the horizon that arrived too late to finish even alone."""
        self._marked: dict[int, Job] = {}
        """Requests marked for a pass-paced retry."""
        self.io_halted_s: float | None = None
        """When a read raised out of the backend and ended this server's storage reads (SGLang's
        prefetch IO worker dies and is never restarted): later prefetches are queried and staged
        but never complete, so each ends by its termination policy."""
        self.anchors = model.anchors
        self.load_tokens = 0
        """Prompt tokens of the requests waiting or running here (what `/get_load` reports)."""

    def poke(self) -> None:
        """Wake the scheduler: something it waits on may have changed."""
        if not self._wake.triggered:
            self._wake.succeed()

    def _record_request(self, job: Job, outcome: str) -> None:
        finish_s = self.env.now if outcome == "finished" else None
        self.records.requests.append(job.record(outcome, finish_s, self.model.page_size))

    def _record_prefetch(self, job: Job, op: PrefetchOp, outcome: str, dropped: Any) -> None:
        row = PrefetchRecord.of(
            op, job.req.rid, outcome, self.env.now, len(dropped), self.prefetcher.read_bytes(op)
        )
        self.records.add_prefetch(row, op.aux)
