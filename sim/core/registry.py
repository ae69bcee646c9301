"""Named registries, one per extension point (pool kinds, heal rules, hit queries, prefetch
policies, workload kinds).

The scenario schema takes its accepted names from the same registry the implementation is looked
up in, so registering an implementation is all it takes to make it selectable from a scenario
file: there is no second list to keep in step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar, overload

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """An ordered name -> implementation mapping that refuses to register a name twice."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}
        self.version = 0
        """Bumped on every change, so schemas built from the registry know when to rebuild."""

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, item: T) -> T: ...

    def register(self, name: str, item: T | None = None) -> T | Callable[[T], T]:
        """Add `item` under `name`; without `item`, a decorator that does so."""
        if item is None:
            return lambda found: self.register(name, found)
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._items[name] = item
        self.version += 1
        return item

    def unregister(self, name: str) -> None:
        """Remove a name (tests that register a made-up implementation clean up with this)."""
        del self._items[name]
        self.version += 1

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
