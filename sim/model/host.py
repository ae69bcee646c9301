"""Host memory (L2): prefetch and backup staging, plus host copies in `cache` mode.

In `buffer_only` mode host memory is only staging; a prefetch hit waits (is parked) while staging
for loads would exceed HICACHE_LOAD_POOL_USAGE_FRACTION of the pool (SGLang's
prefetch_rate_limited); `cache` mode declines it. In `cache` mode host copies live in the radix
tree and share the same page budget, and a prefetch that does not fit evicts host-only copies,
least recently used first, before it gives up (SGLang's `evict_host` when the host allocation of
a prefetch fails).

In `buffer_only` mode an SWA pool also stages through a host pool of its own (`AuxStaging`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sim.model.device import Resource

LOAD_POOL_USAGE_FRACTION = 0.9
CACHE_PREFETCH_CAPACITY_FRACTION = 0.5
WRITE_STAGING_POOL_FRACTION = 0.2


@dataclass
class HostPool:
    capacity_pages: int
    cached_pages: Callable[[], int] = field(default=lambda: 0)
    cache: Resource | None = None
    """Cache mode: the tree's host copies, which a prefetch may evict to fit."""
    prefetch_pages: int = 0
    backup_pages: int = 0
    load_fraction: float = LOAD_POOL_USAGE_FRACTION
    """The share of the pool loads may stage: 0.9 in buffer_only mode
    (HICACHE_LOAD_POOL_USAGE_FRACTION), 0.5 in cache mode (the controller's
    `prefetch_capacity_limit`)."""

    @property
    def used_pages(self) -> int:
        return self.cached_pages() + self.prefetch_pages + self.backup_pages

    def stageable_pages(self) -> int:
        """Pages a load could stage now, within the load share and what is free."""
        limit = int(self.load_fraction * self.capacity_pages) - self.prefetch_pages
        return max(0, min(self.free_pages, limit))

    @property
    def free_pages(self) -> int:
        return self.capacity_pages - self.used_pages

    def prefetch_rate_limited(self, pages: int) -> bool:
        """Would staging `pages` more for loads exceed the load share of the pool?"""
        limit = self.load_fraction * self.capacity_pages
        return self.prefetch_pages + pages > limit or pages > self.free_pages

    def can_ever_stage(self, pages: int) -> bool:
        """Could a load of `pages` be staged once nothing else is?"""
        return pages <= self.load_fraction * self.capacity_pages

    def alloc_prefetch(self, pages: int) -> bool:
        if self.prefetch_rate_limited(pages) and not self._evict_for(pages):
            return False
        self.prefetch_pages += pages
        return True

    def _evict_for(self, pages: int) -> bool:
        """Cache mode: make room for staging by evicting host copies (within the load share)."""
        cache = self.cache
        if cache is None or self.prefetch_pages + pages > self.load_fraction * self.capacity_pages:
            return False
        cache.reserved = self.prefetch_pages + self.backup_pages
        try:
            return cache.make_room(pages)
        finally:
            cache.reserved = 0

    def free_prefetch(self, pages: int) -> None:
        self.prefetch_pages -= pages

    def write_staging_full(self) -> bool:
        """buffer_only mode: may no further write be staged now? Writes may use what loads
        leave, less a tenth of the pool, but always a fifth of it; only what is already staged
        counts, so the last write staged may overshoot (SGLang's `flush_pending_writes`)."""
        pool = self.capacity_pages
        live_cap = max(
            int(WRITE_STAGING_POOL_FRACTION * pool), pool - self.prefetch_pages - pool // 10
        )
        return self.backup_pages >= live_cap

    def alloc_backup(self, pages: int) -> bool:
        if pages > self.free_pages:
            return False
        self.backup_pages += pages
        return True

    def free_backup(self, pages: int) -> None:
        self.backup_pages -= pages


@dataclass
class AuxStaging:
    """An aux pool's host staging pool in `buffer_only` mode (SGLang's per-pool host pool of the
    `HostPoolGroup`; the SWA pool is the one that stages through it).

    A prefetch takes its trailing window here when it is issued, before the hit query, and
    holds it until its request is admitted (`SWAComponent.prepare_prefetch`); when the window
    does not fit, the whole fetch is forfeited. A write takes its node's tail pages, but only
    while a loads margin stays free (`_aux_budget_blocked`), so a burst of writes cannot take
    the last window a prefetch needs.
    """

    pool: str
    capacity_pages: int
    window_pages: int
    prefetch_pages: int = 0
    backup_pages: int = 0

    @property
    def free_pages(self) -> int:
        return self.capacity_pages - self.prefetch_pages - self.backup_pages

    @property
    def loads_margin_pages(self) -> int:
        """Pages writes leave to loads: one window, or a tenth of the pool if more
        (`_aux_loads_margin`)."""
        return max(self.window_pages, self.capacity_pages // 10)

    @property
    def write_limit_pages(self) -> int:
        """The most one write may stage: the pool less the loads margin (`_backup_oversize`)."""
        return self.capacity_pages - self.loads_margin_pages

    def prefetch_window(self, span_pages: int) -> int:
        """Pages a prefetch of this span takes: a window, or the whole span when shorter (in
        buffer_only mode the device prefix holds the rest of the window)."""
        return min(self.window_pages, span_pages)

    def alloc_prefetch(self, pages: int) -> bool:
        if pages > self.free_pages:
            return False
        self.prefetch_pages += pages
        return True

    def free_prefetch(self, pages: int) -> None:
        self.prefetch_pages -= pages

    def write_blocked(self, pages: int) -> bool:
        """Would staging `pages` for a write eat into the loads margin?"""
        return pages > self.free_pages - self.loads_margin_pages

    def alloc_backup(self, pages: int) -> None:
        self.backup_pages += pages

    def free_backup(self, pages: int) -> None:
        self.backup_pages -= pages
