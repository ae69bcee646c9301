"""Page chains: prefix-chained page keys.

A page key identifies a whole prefix (it is chained over its parent's key), so two prompts share
a page key exactly when they share every token up to the end of that page. Keys are small ints
handed out by a `ChainInterner` in order of first appearance, which keeps runs deterministic.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

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
