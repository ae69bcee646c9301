"""Page chains: prefix-chained page keys and the tail keys aux pools are stored under.

A page key identifies a whole prefix (it is chained over its parent's key), so two prompts share
a page key exactly when they share every token up to the end of that page. Keys are small ints
handed out by a `ChainInterner` in order of first appearance, which keeps runs deterministic.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

ROOT_KEY = 0
"""The parent key of a chain's first page."""


class ChainInterner:
    """Turns (parent key, page content) into a stable int page key."""

    def __init__(self) -> None:
        self._keys: dict[tuple[int, Hashable], int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def extend(self, parent: int, contents: Iterable[Hashable]) -> list[int]:
        """Keys of the pages that follow `parent`, one per content item."""
        keys = self._keys
        out: list[int] = []
        for content in contents:
            edge = (parent, content)
            key = keys.get(edge)
            if key is None:
                key = keys[edge] = len(keys) + 1
            out.append(key)
            parent = key
        return out


def tail_length(window_pages: int, span_pages: int) -> int:
    """How many trailing pages of a span an aux pool needs: min(window, pages in the span)."""
    return min(window_pages, span_pages)


def tail_keys(span: Sequence[int], end: int, window_pages: int) -> tuple[int, ...]:
    """The keys an aux pool needs to resume at `end`: pages[end - n, end) of the span."""
    n = tail_length(window_pages, end)
    return tuple(span[end - n : end])
