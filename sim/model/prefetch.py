"""A storage prefetch (L3 -> host staging): planning, the hit query, and
what a settled prefetch leaves behind (the operation itself is `sim.model.operation`).

The aux transfers are explicit: each names the page keys it asks its pool for (the tail of the
hit span), so a reader can see why a prefetch was discarded. The engine only adds time: it
waits for `exists`, moves the bytes batch by batch, and asks `Prefetcher` what follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from sim.model.backup import WritePath
from sim.model.heals import PoolDrops, by_pool, query_cuts
from sim.model.host import AuxStaging, HostPool
from sim.model.loops import LoopTracker
from sim.model.operation import AuxTransfer, PrefetchOp, hybrid_check, plan_aux_transfers
from sim.model.pools import KV
from sim.model.prefetch_policies import PREFETCH_POLICIES, PrefetchTimeout
from sim.model.storage import (
    AUX_BLIND_QUERIES,
    HIT_QUERIES,
    STORAGE_BATCH_PAGES,
    HitQueryRaised,
    Storage,
)

# ---------------------------------------------------------------------- the prefetcher


@dataclass(frozen=True)
class RetryBudget:
    """Re-issues of a missed prefetch for a request still queued (SGLang's
    StoragePrefetchRetries, on by default since 0.5.20: 8 attempts, polled every 8 passes).
    `interval_s` paces them in seconds instead of passes (None: passes)."""

    max_attempts: int
    interval_passes: int
    interval_s: float | None = None

    @property
    def off(self) -> bool:
        interval = self.interval_s if self.interval_s is not None else self.interval_passes
        return self.max_attempts <= 0 or interval <= 0


class Outcome(StrEnum):
    """How a prefetch attempt ended (the prefetches table's `outcome` column)."""

    SUCCESS = "success"
    """Issued, passed the hybrid check, loaded."""
    DISCARDED = "discarded"
    """Issued, failed the hybrid check: nothing loaded, the heal rule ran."""
    REVOKED = "revoked"
    """The hit query reported less than the threshold: not issued."""
    DECLINED = "declined"
    """Host staging for loads was saturated: not issued."""
    CANCELLED = "cancelled"
    """The policy stopped the attempt before the hit query answered."""
    ANCHOR_LOST = "anchor_lost"
    """buffer_only: the device prefix the prefetch was planned against was evicted before its
    reads were committed (`declined_anchor_lost`): not issued, marked for a retry."""
    DEVICE_COVERED = "device_covered"
    """buffer_only: by the time its reads were committed the device held the whole hit
    (`declined_device_covered`): not issued, not retried."""
    REFETCHED = "refetched"
    """buffer_only: staged, but at admission its anchor had shrunk (an unpinned anchor
    evicted): the hold was released and the span re-fetched at once (`_refetch_staged`)."""
    UNANSWERED = "unanswered"
    """The hit query never answered: a backend's hit query had raised out of the controller's
    prefetch thread, which ended (through SGLang 0.5.21); the policy stopped the attempt."""
    FORFEITED = "forfeited"
    """An aux pool's host staging window could not be taken when the prefetch was issued: the
    whole fetch was given up before the hit query (`log_prefetch_aux_alloc_failed_tokens`)."""


RETRIED_OUTCOMES = frozenset(
    {Outcome.REVOKED, Outcome.DECLINED, Outcome.CANCELLED, Outcome.FORFEITED, Outcome.ANCHOR_LOST}
)
"""Misses a retry re-arms: every attempt that ended without host staging (SGLang marks the rid
in `_storage_prefetch_missed_rids` for a hit below the threshold, whose backup may not have
committed yet, a rate-limited hit, a fetch forfeited over its aux staging window, and an op its
policy stopped before staging, in `check_prefetch_progress`). A span shorter than the
threshold gets no prefetch, hence no retry, and a discard sets none. The mark is moot once the
request is admitted."""


@dataclass(frozen=True)
class Resolution:
    """What a settled prefetch leaves: its outcome, the endpoint it loaded (absolute pages, 0
    on a discard) and the beliefs a heal dropped."""

    outcome: Outcome
    loaded_end: int
    dropped: Sequence[int] = ()


class Prefetcher:
    """The decisions of a prefetch, from the hit query to the hybrid check (SGLang:
    HiCacheController's prefetch path and the scheduler's check of a finished prefetch)."""

    def __init__(
        self,
        *,
        storage: Storage,
        host: HostPool,
        write_path: WritePath,
        loops: LoopTracker,
        heal: Callable[[PrefetchOp], Sequence[int] | PoolDrops],
        hit_query: str,
        policy: str,
        timeout: PrefetchTimeout,
        threshold_pages: int,
        retry: RetryBudget,
        client: int = 0,
        aux_staging: Sequence[AuxStaging] = (),
        shrink: str = "none",
        short_span_own_pages: bool = True,
        heal_after_deadline: bool = True,
        sidecar_read: str = "with_kv_batch",
        hit_query_error: str = "stop",
    ) -> None:
        self.storage = storage
        self.client = client
        """This server's instance number: whose reads these are, for the cross-server counts."""
        self.host = host
        self.write_path = write_path
        self.loops = loops
        self.heal = heal
        """The heal rule, bound to this server: which beliefs a discarded op drops (KV keys, or
        keys by pool)."""
        self.heal_after_deadline = heal_after_deadline
        """Does an op the `timeout` policy stopped still heal beliefs (False: neither the
        hit-query heal nor the discard heal runs for it, SGLang 0.5.23's `deadline_expired`)?"""
        self.fold = hit_query
        self.hit_query = HIT_QUERIES[hit_query]
        self.aux_evidence = hit_query not in AUX_BLIND_QUERIES
        """Does the query tell per-pool beliefs where each aux pool's tails are?"""
        self.policy = PREFETCH_POLICIES[policy]
        self.deadline_policy = policy == "timeout"
        self.timeout = timeout
        self.threshold_pages = threshold_pages
        """Spans and hits shorter than this are not prefetched (SGLang: max(threshold, page))."""
        self.retry = retry
        self.buffer_only = write_path.buffer_only
        """buffer_only mode parks a rate-limited hit until staging frees (SGLang's
        pending_hit_allocs; cache mode declines it) and lets a short mid-tree span ask for its
        own tail pages."""
        self.hit_query_dropped_beliefs = 0
        self.batch_sidecars = storage.sidecars if sidecar_read == "with_kv_batch" else ()
        """Sidecars read beside each KV batch (0.5.19 on); otherwise (0.5.18) they are
        transfers read once KV completes, and clamp the usable prefix at the check."""
        self.transfer_pools = storage.tail_keyed if self.batch_sidecars else storage.aux
        self.sidecar_names = frozenset(pool.name for pool in storage.sidecars)
        self.clamps = dict.fromkeys(self.sidecar_names, 0)
        """Per sidecar: settled prefetches whose usable prefix its shortfall cut."""
        self.clamped_pages = dict.fromkeys(self.sidecar_names, 0)
        """Per sidecar: the pages of the hits those cuts left unloaded."""
        self.hit_query_error = hit_query_error
        """A hit query that raised: `stop` ends the hit queries, `miss` counts it 0 pages."""
        self.hit_queries_halted_s: float | None = None
        """When a hit query raised out of the prefetch thread (`raises`): from then on no
        prefetch gets an answer (SGLang never restarts the thread)."""
        self.aux_staging = {staging.pool: staging for staging in aux_staging}
        self.shrink = shrink
        """Cache mode: how a hit that cannot be staged whole shrinks (`none`, `page`,
        `restorable`)."""
        self.shrunk_prefetches = 0
        self.short_span_own_pages = self.buffer_only and short_span_own_pages
        """A mid-tree span shorter than an aux tail asks for its own pages (SGLang 0.5.19's
        buffer_only mode) rather than getting no transfer."""

    def plan(
        self,
        rid: int,
        start_page: int,
        span: Sequence[int],
        now_s: float,
        attempt: int = 0,
        assumed_end: int | None = None,
    ) -> PrefetchOp | None:
        """A prefetch for the unmatched span, or None when it is too short to be worth one."""
        if len(span) < self.threshold_pages:
            return None
        return PrefetchOp(rid, start_page, tuple(span), now_s, attempt, assumed_end=assumed_end)

    def take_windows(self, op: PrefetchOp) -> bool:
        """Take each staging aux pool's window for the op as it is issued; False, taking
        nothing, when one does not fit: the fetch is forfeited (SGLang's
        `prefetch_from_storage`, where `prepare_prefetch` fails the whole fetch)."""
        for name, staging in self.aux_staging.items():
            pages = staging.prefetch_window(len(op.span))
            if not staging.alloc_prefetch(pages):
                self.release_windows(op)
                return False
            op.staged_windows[name] = pages
        return True

    def release_windows(self, op: PrefetchOp) -> None:
        """Give back the op's aux staging windows (its request admitted, or the op missed)."""
        for name, pages in op.staged_windows.items():
            self.aux_staging[name].free_prefetch(pages)
        op.staged_windows.clear()

    def query(self, op: PrefetchOp, now_s: float, *, queue_empty: bool = True) -> Outcome | None:
        """Ask storage for the hit and stage it: 'cancelled' when the policy stopped the op
        while the query was in flight, 'revoked' when the hit is below the threshold,
        'declined' when staging is rate-limited or other hits wait for it (`queue_empty`
        false; the op may then park, see `may_park`), 'unanswered' when the hit queries have
        stopped (the op then waits for its policy, see `PrefetchIO`), None when reads may
        start.

        The beliefs past the reported hit are dropped here (the hit-query heal; a no-op where
        the existence cache is not used), also for a stopped op: the answer lands whether or
        not anyone still waits for it (SGLang's `_drain_and_alloc_storage_hit` flushes it for
        a gone request, and `revoke_pending_prefetch` for a terminated one), unless the op's
        deadline stopped it and `heal_after_deadline` is off.
        """
        if self.hit_queries_halted_s is not None:
            return Outcome.UNANSWERED
        if op.assumed_end is not None:
            hit = max(0, min(len(op.span), op.assumed_end - op.start_page))
        else:
            fold = self.fold
            try:
                hit = self.hit_query(self.storage, op.span, now_s)
            except HitQueryRaised:
                if op.terminated:  # a terminated op is counted 0 without asking the backend
                    return Outcome.CANCELLED
                if self.hit_query_error == "stop":
                    self.hit_queries_halted_s = now_s
                    return Outcome.UNANSWERED
                hit, fold = 0, "none"  # counted 0 pages, no pool's verdict
            self.storage.touch_queried(op.span, now_s)
            if self.heals(op):
                self.hit_query_dropped_beliefs += self._heal_from_query(op.span, hit, now_s, fold)
        if op.terminated:
            return Outcome.CANCELLED
        if hit < self.threshold_pages:
            return Outcome.REVOKED
        op.reported_pages = hit
        return None if queue_empty and self.stage(op, now_s) else Outcome.DECLINED

    def stage(self, op: PrefetchOp, now_s: float | None = None) -> bool:
        """Allocate host staging for the reported hit and plan its aux transfers; False when
        staging for loads is saturated (rate limit). In cache mode (given `now_s`) a hit that
        does not fit even after host eviction shrinks to what does, if that still meets the
        threshold (SGLang's `_try_alloc_storage_hit`): to a page (`shrink: page`, the aux
        tails then asked at an endpoint storage may not hold) or to the largest endpoint every
        aux pool can restore (`shrink: restorable`)."""
        if not self.host.alloc_prefetch(op.reported_pages):
            shrunk = self._shrunk_hit(op, now_s)
            if shrunk < self.threshold_pages or not self.host.alloc_prefetch(shrunk):
                return False
            op.reported_pages = shrunk
            self.shrunk_prefetches += 1
        op.hit_pages = op.reported_pages
        op.aux = plan_aux_transfers(self.transfer_pools, op, buffer_only=self.short_span_own_pages)
        op.riders = tuple(pool.name for pool in self.batch_sidecars)
        return True

    def _shrunk_hit(self, op: PrefetchOp, now_s: float | None) -> int:
        """The hit cache mode falls back to when the whole one cannot be staged (0: none)."""
        if self.buffer_only or now_s is None or self.shrink == "none":
            return 0
        room = min(op.reported_pages, self.host.stageable_pages())
        if self.shrink == "page" or not self.storage.aux:
            return room
        return HIT_QUERIES["intersect"](self.storage, op.span[:room], now_s)

    def unstage(self, op: PrefetchOp) -> None:
        """Give back a staged op's host staging before any read (its anchor was lost, or the
        device covers it): it is not issued."""
        self.host.free_prefetch(op.hit_pages)
        op.hit_pages, op.aux = 0, []

    def release_hold(self, op: PrefetchOp) -> None:
        """Give back everything a staged op holds, its reads abandoned (a re-fetch); the op is
        then settled, with nothing to load."""
        op.terminated = op.done = True
        self.host.free_prefetch(op.hit_pages)
        self.release_windows(op)
        op.hit_pages, op.aux = 0, []

    def may_park(self, op: PrefetchOp) -> bool:
        """Does a rate-limited hit wait for staging rather than being declined? Not when it
        could never be staged."""
        return self.buffer_only and self.host.can_ever_stage(op.reported_pages)

    def retries_miss(self, op: PrefetchOp, outcome: Outcome, attempts: int) -> bool:
        """Is a missed prefetch marked for a re-issue? Not past the attempts, not with retries
        off (as SGLang's poll interval 0), not for a hit that could never be staged (asking
        again gets the same answer)."""
        retry = self.retry
        if outcome not in RETRIED_OUTCOMES or retry.off or attempts >= retry.max_attempts:
            return False
        return outcome != Outcome.DECLINED or self.host.can_ever_stage(op.reported_pages)

    def heals(self, op: PrefetchOp) -> bool:
        """Do this op's storage verdicts heal beliefs? Not for an op its deadline stopped when
        `heal_after_deadline` is off: a deadline is no evidence that anything is missing (SGLang
        0.5.23 marks `deadline_expired` when the `timeout` policy stops an op)."""
        return self.heal_after_deadline or not (op.terminated and self.deadline_policy)

    def _heal_from_query(self, span: Sequence[int], hit: int, now_s: float, fold: str) -> int:
        """Drop the beliefs the query contradicts; returns how many.

        KV-only beliefs: those past the reported hit. Per-pool beliefs: KV's past the KV hit,
        and the KV chain up to it is believed (SGLang's `ChainPagesPolicy.heal_from_query`);
        each aux pool's past its own verdict over the whole queried chain, beyond the KV hit
        too (`TrailingWindowPolicy.heal_from_query` invalidates `chain[hit_pages:]`; a
        tail-keyed pool only learns presence from writes and fills), or past the folded hit
        where the backend's fold gave it no verdict (`query_cuts`).
        """
        path = self.write_path
        if not path.per_pool:
            return len(path.forget_beyond(span, hit))
        cuts = query_cuts(self.storage, span, hit, now_s, fold)
        kv_hit = cuts[KV]
        dropped = len(path.forget_beyond(span, kv_hit))
        path.believe(span[:kv_hit])
        if self.aux_evidence:
            for pool in self.storage.aux:
                dropped += len(path.forget_beyond(span, cuts[pool.name], pool.name))
            for pool in self.storage.sidecars:
                if cuts[pool.name] == self.storage.pool_boundary(pool, span, kv_hit, now_s):
                    path.believe((), {pool.name: span[: cuts[pool.name]]})
        return dropped

    @property
    def batch_page_bytes(self) -> int:
        """Bytes a page of a KV batch reads: KV's and those of the sidecars read beside it."""
        pools = self.storage.pools
        return pools[KV].page_bytes + sum(pools[p.name].page_bytes for p in self.batch_sidecars)

    def kv_batches(self, op: PrefetchOp) -> Iterator[tuple[int, ...]]:
        """The hit span in storage batches of STORAGE_BATCH_PAGES pages."""
        span = op.hit_span
        for lo in range(0, op.hit_pages, STORAGE_BATCH_PAGES):
            yield span[lo : lo + STORAGE_BATCH_PAGES]

    def read_kv(self, op: PrefetchOp, batch: tuple[int, ...], now_s: float) -> bool:
        """Read one batch; False when it came back short (reading stops there)."""
        kv = self.storage.kv
        before = kv.cross_get_hits
        served = kv.get(batch, now_s, self.client)
        op.cross_instance_pages += kv.cross_get_hits - before
        op.kv_read_pages += served
        credited = kv.credited(served)
        for pool in self.batch_sidecars:
            store = self.storage.pools[pool.name]
            got = store.get(batch, now_s, self.client)
            op.aux_read_bytes += got * store.page_bytes
            if store.credited(got) < credited:
                credited = store.credited(got)
                op.clamped_by = op.clamped_by or pool.name
        op.completed_pages += credited
        return credited == len(batch)

    def read_raised(self, pool: str) -> bool:
        """Whether the latest read of this pool failed in a backend whose failed reads raise
        (`failed_read: halt`), which ends the server's storage reads."""
        store = self.storage.pools[pool]
        return store.last_read_failed and store.failed_read == "halt"

    def aux_reads(self, op: PrefetchOp) -> list[AuxTransfer]:
        """Aux transfers to read: only after KV completed and the op was not stopped."""
        if op.completed_pages != op.hit_pages or op.terminated:
            return []
        return [t for t in op.aux if t.keys is not None]

    def read_aux(self, op: PrefetchOp, transfer: AuxTransfer, now_s: float) -> None:
        assert transfer.keys is not None
        pool = self.storage.pools[transfer.pool]
        served = pool.get(transfer.keys, now_s, self.client)
        transfer.hit_pages = pool.credited(served)
        transfer.read = True
        op.aux_read_bytes += served * pool.page_bytes

    def may_stop_at(self, op: PrefetchOp) -> float:
        """The termination policy: when the scheduler may stop this op."""
        return self.policy(op, self.timeout)

    def resolve(self, op: PrefetchOp, now_s: float) -> Resolution:
        """Settle an issued prefetch when its request is admitted.

        Staging is freed, then the hybrid check either loads the span, whose pages become
        beliefs (SGLang's stage_completed_prefetch), or discards it all, adds no belief, and
        lets the heal rule drop beliefs, pool by pool (none for an op its deadline stopped,
        when `heal_after_deadline` is off). A model with no aux pool loads whatever KV
        delivered, and so does a model whose only aux pools are sidecars, even nothing: a clamp
        is not a discard (no heal, no loop; SGLang's check discards only for tail-keyed pools).
        """
        op.terminated = op.terminated or not op.done
        span = op.hit_span
        self.host.free_prefetch(op.hit_pages)
        self.release_windows(op)
        loaded = self._usable_pages(op)
        if self.kept(op, loaded):
            if op.clamped_by is not None:
                self.clamps[op.clamped_by] += 1
                self.clamped_pages[op.clamped_by] += op.hit_pages - loaded
            fills: dict[str, Sequence[int]] = {t.pool: t.keys for t in op.aux if t.keys is not None}
            fills.update({name: span[:loaded] for name in (*op.riders, *self._clamping(op))})
            self.write_path.believe(span[:loaded], fills)
            self.loops.on_success(span, loaded, now_s)
            return Resolution(Outcome.SUCCESS, op.start_page + loaded)
        dropped: list[int] = []
        if self.heals(op):
            path = self.write_path
            for pool, keys in by_pool(self.heal(op)).items():
                if pool == KV or pool in path.aux_beliefs:
                    dropped += path.forget(keys, pool)
        self.loops.on_discard(span, now_s, stale_by_other=self._displaced_by_other(op))
        return Resolution(Outcome.DISCARDED, 0, dropped)

    def kept(self, op: PrefetchOp, usable_pages: int) -> bool:
        """Does the check keep the op, loading its usable pages, or discard it? Kept when it
        can load something, and by a stack whose only aux pools are sidecars even when it
        cannot: only a tail-keyed pool makes a stack all-or-nothing (SGLang leaves KV-derived
        sidecars out of the check)."""
        sidecars_only = (bool(op.riders) or bool(self._clamping(op))) and all(
            t.pool in self.sidecar_names for t in op.aux
        )
        return usable_pages > 0 or sidecars_only

    def _clamping(self, op: PrefetchOp) -> tuple[str, ...]:
        """The sidecar transfers an op read once KV completed (0.5.18), when its stack has no
        other aux pool: they clamp the usable prefix rather than gate it."""
        if op.aux and all(t.pool in self.sidecar_names for t in op.aux):
            return tuple(t.pool for t in op.aux)
        return ()

    def _usable_pages(self, op: PrefetchOp) -> int:
        """Pages the op can load: what KV (clamped by the sidecars read with it) completed,
        cut to the sidecars' runs where they were read after it (0.5.18's clamp: none read
        when KV fell short), and 0 when a tail-keyed pool's all-or-nothing check fails."""
        if self._clamping(op):
            usable = min(op.completed_pages, *(t.hit_pages for t in op.aux))
            if usable < op.completed_pages:
                op.clamped_by = op.clamped_by or next(
                    t.pool for t in op.aux if t.hit_pages == usable
                )
            return usable
        if not op.aux or hybrid_check(op):
            return op.completed_pages
        return 0

    def _displaced_by_other(self, op: PrefetchOp) -> bool:
        """Was the first object this op missed pushed out of storage by another server's write?
        (Only a cluster records who displaced what.)"""
        missed: list[tuple[str, int]] = []
        if op.completed_pages < op.hit_pages and not op.terminated:
            missed.append((KV, op.hit_span[op.completed_pages]))
        missed += [
            (t.pool, t.keys[t.hit_pages])
            for t in op.aux
            if t.read and t.keys is not None and t.hit_pages < len(t.keys)
        ]
        for name, key in missed:
            pool = self.storage.pools[name]
            by = pool.displaced_by
            if by is not None and key not in pool and by.get(key, self.client) != self.client:
                return True
        return False

    def read_bytes(self, op: PrefetchOp) -> int:
        """Bytes this op read from storage (KV and aux)."""
        return op.kv_read_pages * self.storage.kv.page_bytes + op.aux_read_bytes
