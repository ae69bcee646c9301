"""How long a storage transfer takes when its bandwidth is one server's alone or shared.

One server's reads and writes each have the backend's bandwidth to themselves (its reads take
turns on one channel, and it has one writer), so a transfer of n bytes takes n / bandwidth: a
`DedicatedLink`. Servers that share a backend share its aggregate bandwidth: a `SharedBandwidth`
serves every transfer in flight at once at an equal share, each capped by its server's own link
(processor sharing, the fluid model of TCP flows through one bottleneck), so a transfer slows
down while others run and speeds up as they finish.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import simpy


class Link(Protocol):
    """Where a transfer's bytes go; `transfer` returns when the last byte arrived."""

    requested_bytes: float

    def transfer(self, nbytes: float) -> Generator[simpy.Event, Any, None]: ...

    def start(self, nbytes: float) -> simpy.Event:
        """Begin a transfer now; the event succeeds when its last byte arrived."""
        ...


@dataclass
class DedicatedLink:
    """A bandwidth one transfer at a time uses whole (callers serialise their transfers)."""

    env: simpy.Environment
    bytes_per_s: float
    requested_bytes: float = 0.0

    def transfer(self, nbytes: float) -> Generator[simpy.Event, Any, None]:
        yield self.start(nbytes)

    def start(self, nbytes: float) -> simpy.Event:
        self.requested_bytes += nbytes
        return self.env.timeout(nbytes / self.bytes_per_s)


@dataclass(eq=False)
class _Flow:
    nbytes: float
    remaining: float
    done: simpy.Event


@dataclass
class SharedBandwidth:
    """An aggregate bandwidth shared equally by the transfers in flight, each at most
    `flow_cap_bytes_per_s` (a server's own link; None: no cap)."""

    env: simpy.Environment
    bytes_per_s: float
    flow_cap_bytes_per_s: float | None = None
    requested_bytes: float = 0.0
    served_bytes: float = 0.0
    """Bytes delivered so far, integrated from the rates: equals `requested_bytes` once idle."""
    busy_s: float = 0.0
    """Time with at least one transfer in flight."""
    peak_rate_bytes_per_s: float = 0.0
    """The highest aggregate rate ever served (never above `bytes_per_s`)."""
    _flows: list[_Flow] = field(default_factory=list)
    _rate: float = 0.0
    _updated_s: float = 0.0
    _generation: int = 0

    RELATIVE_TOLERANCE = 1e-9
    """A flow within this fraction of its size of the end is finished (rounding)."""

    def transfer(self, nbytes: float) -> Generator[simpy.Event, Any, None]:
        yield self.start(nbytes)

    def start(self, nbytes: float) -> simpy.Event:
        self.requested_bytes += nbytes
        if nbytes <= 0:
            return self.env.timeout(0.0)
        flow = _Flow(nbytes, nbytes, self.env.event())
        self._advance()
        self._flows.append(flow)
        self._reschedule()
        return flow.done

    @property
    def in_flight(self) -> int:
        return len(self._flows)

    def _advance(self) -> None:
        """Take the bytes served since the last change off every flow in flight."""
        now = self.env.now
        elapsed = now - self._updated_s
        self._updated_s = now
        if not self._flows or elapsed <= 0:
            return
        moved = self._rate * elapsed
        for flow in self._flows:
            flow.remaining -= moved
        self.served_bytes += moved * len(self._flows)
        self.busy_s += elapsed

    def _reschedule(self) -> None:
        """Set every flow's rate for the flows now in flight, and a timer for the first end."""
        self._generation += 1
        flows = self._flows
        if not flows:
            self._rate = 0.0
            return
        rate = self.bytes_per_s / len(flows)
        cap = self.flow_cap_bytes_per_s
        self._rate = rate if cap is None else min(rate, cap)
        self.peak_rate_bytes_per_s = max(self.peak_rate_bytes_per_s, self._rate * len(flows))
        first = min(flow.remaining for flow in flows)
        timer = self.env.timeout(max(0.0, first / self._rate))
        timer.callbacks.append(partial(self._on_timer, self._generation))

    def _on_timer(self, generation: int, _event: simpy.Event) -> None:
        if generation != self._generation:
            return
        self._advance()
        # The timer was set for the flow with the least left to end now; those level with it end
        # too. Deciding by the timer, not by bytes left, keeps a flow whose last bytes are below
        # the clock's resolution from being rescheduled at the same instant forever.
        first = min(flow.remaining for flow in self._flows)
        level = first + max(abs(first), 1.0) * self.RELATIVE_TOLERANCE
        finished = [
            f
            for f in self._flows
            if f.remaining <= level or f.remaining <= f.nbytes * self.RELATIVE_TOLERANCE
        ]
        for flow in finished:
            self.served_bytes += flow.remaining
            self._flows.remove(flow)
            flow.done.succeed()
        self._reschedule()
