"""How the device holds one aux pool: one class per way of holding it, as SGLang keeps one cache
component per pool kind (`unified_cache/components/swa.py`, `mamba.py`).

A component says whether the pool is held for whole nodes or at resume points, how many device
units a resume point takes, what a new point below a held one frees, whether a running request
holds a working unit of it, and on which grid a branch point can keep its state. The radix tree
asks these questions and never tells the kinds apart itself, so a new way of holding aux state
is one class here and one line in `DEVICE_COMPONENTS`.

An aux pool's state in a node is either **whole** (values for every page, as KV: SWA under
`whole_node` retention) or a set of **resume points** (absolute page indices inside the node
where the pool holds what resuming there needs: an SWA window before the point, a Mamba state
at it). A match may end only at a point every aux pool allows; whole pools allow any page of a
resident node. Which points an insert keeps follows SGLang:

- `whole_node` retention (the model before out-of-window freeing): per-page pools take every
  page of a node brought to the device; end-state pools keep a state at the insert's end; a
  split leaves the upper half without one (the "aux hole at the cut").
- `window` retention (SGLang today: out-of-window SWA freeing, branching-point caching): a node
  is born without SWA values; an insert keeps a window before its end, before the point where
  the request left the tree (a branch point) when it computed through it, and at each aux
  checkpoint it computed; every other value the request computed is freed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sim.model.node import Points
from sim.model.pools import Residency

DEVICE_EVICTED_KEY = "device_evicted_pages"


def device_dropped_key(pool: str, residency: Residency) -> str:
    """The summary key counting what the device dropped of an aux pool, in its own unit."""
    return f"device_{pool}_dropped_{residency.unit}"


def device_freed_key(pool: str) -> str:
    """The summary key counting the per-page values of a windowed pool freed out of window."""
    return f"device_{pool}_freed_out_of_window_pages"


class AuxDevice(NamedTuple):
    """An aux pool as the device holds it."""

    residency: Residency
    capacity: int
    """Device units: pages (per-page values) or slots (end states)."""
    window_pages: int | None = None
    """Pages of values a per-page pool needs before a resume point (SWA's window); None: every
    page, so such a pool is always held for whole nodes."""
    checkpoint_pages: int | None = None
    """Aux checkpoints: the device also keeps the pool's state at every multiple it computes."""


class AuxComponent:
    """An aux pool held at resume points, one device unit each (the base of the kinds)."""

    whole = False
    """Held for every page of a device node (a match may end anywhere in it)."""
    working_slot = False
    """A running request holds one unit of this pool (its recurrent state)."""
    frees_out_of_window = False
    """An insert frees what it computed outside the points it keeps (counted per pool)."""

    def __init__(self, spec: AuxDevice) -> None:
        self.spec = spec

    @property
    def window_pages(self) -> int | None:
        """Pages of per-page values a resume point needs before it (None: not windowed)."""
        return self.spec.window_pages if self.spec.residency is Residency.PAGE_VALUES else None

    @property
    def checkpoint_pages(self) -> int | None:
        """Keep a state at every multiple of this many pages an insert computes."""
        return None if self.whole else self.spec.checkpoint_pages

    @property
    def grid(self) -> int:
        """Where a branch point can keep this pool's state: multiples of this many pages."""
        return 1

    def point_units(self, held: Points, point: int) -> int:
        """Device units a new resume point at `point` takes, given the points `held`."""
        return 1

    def shrink_next(self, points: Points, point: int) -> int:
        """A point added below a held one may overlap it: shrink that one; returns units freed."""
        return 0


class WholeNodeValues(AuxComponent):
    """Per-page values held for every page of a node (SWA before out-of-window freeing)."""

    whole = True


class WindowValues(AuxComponent):
    """Per-page values kept only in the window before each resume point (SWA today: the window
    before an insert's end, its branch point and its checkpoints; the rest is freed)."""

    frees_out_of_window = True

    def point_units(self, held: Points, point: int) -> int:
        """The window's pages not already held by a nearer point below it in the node."""
        window = self.spec.window_pages or 1
        units = min(window, point)
        for gap in range(1, units):
            if point - gap in held:
                return gap
        return units

    def shrink_next(self, points: Points, point: int) -> int:
        for gap in range(1, self.spec.window_pages or 1):
            units = points.get(point + gap)
            if units is not None:
                if units <= gap:
                    return 0
                points[point + gap] = gap
                return units - gap
        return 0


class EndStates(AuxComponent):
    """One state per resume point, at the point itself (Mamba), and a working state for every
    running request."""

    working_slot = True

    @property
    def grid(self) -> int:
        """SGLang tracks Mamba states on its checkpoint grid, so a branch point is aligned down
        to it."""
        return self.spec.checkpoint_pages or 1


def _per_page(spec: AuxDevice, window_retention: bool) -> AuxComponent:
    windowed = spec.window_pages is not None and window_retention
    return WindowValues(spec) if windowed else WholeNodeValues(spec)


DEVICE_COMPONENTS: dict[Residency, Callable[[AuxDevice, bool], AuxComponent]] = {
    Residency.PAGE_VALUES: _per_page,
    Residency.END_STATE: lambda spec, window_retention: EndStates(spec),
}
"""The component of each residency, given the device's retention (`window` or whole nodes)."""


def device_component(spec: AuxDevice, window_retention: bool) -> AuxComponent:
    return DEVICE_COMPONENTS[spec.residency](spec, window_retention)
