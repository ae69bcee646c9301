"""Buffer-mode anchor pins (SGLang's `try_lock_anchor` in `mem_cache/buffer_mode/pipeline.py`).

In `buffer_only` mode a staged prefetch is spliced onto the device prefix it was planned
against, its anchor. A waiting request holds no lock on the device, so the anchor could be
evicted before the request is admitted; when the prefetch commits its reads, the anchor is
pinned, but only while all pins together stay within a share of the device KV pool
(`SGLANG_HICACHE_BUFFER_ANCHOR_LOCK_CAP`, 0.5, default on since PR #37464), so pinned anchors
never starve admissions of memory. An anchor that does not fit is not pinned.
"""

from __future__ import annotations

ANCHOR_LOCK_CAP = 0.5


class AnchorPins:
    """The pages pinned by the staged prefetches of one server, against their cap."""

    def __init__(self, cap_pages: int) -> None:
        self.cap_pages = cap_pages
        self.pinned_pages = 0

    def try_pin(self, pages: int) -> bool:
        """Pin an anchor of `pages`; False (nothing pinned) for an empty anchor or one past
        the cap."""
        if pages <= 0 or self.pinned_pages + pages > self.cap_pages:
            return False
        self.pinned_pages += pages
        return True

    def release(self, pages: int) -> None:
        self.pinned_pages -= pages
