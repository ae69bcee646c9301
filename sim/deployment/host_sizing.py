"""SGLang's host-memory auto-sizing (0.5.21 on): with neither `--hicache-ratio` nor
`--hicache-size` given, the default host/device ratio is lowered until every host pool of the
ranks on one machine fits a share of its free memory.

The rule, read from 0.5.23: mem_cache/hicache_auto_size.py:auto_size_hicache and
mem_cache/pool_host/base.py:host_memory_budget_bytes: a rank's budget is the host's available
memory (psutil's `available`, bounded by the cgroup limit) less a 10 GiB reserve, split evenly
over the ranks on the host, times `--hicache-host-memory-fraction` (0.8); the ratio is
min(default ratio, budget x 0.95 / the bytes of the device pools the host pools mirror), the
0.05 allowing for page rounding and allocator metadata; a ratio of 0 or less refuses to start.
The device bytes are the full-attention pool with its sidecars, the SWA pool and the Mamba
states (`_estimate_hicache_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
RESERVE_BYTES = 10 * GIB
"""`HICACHE_HOST_MEMORY_RESERVE_BYTES` (0.5.23: mem_cache/pool_host/base.py)."""
ALLOCATION_SLACK = 0.05
"""`_ALLOCATION_SLACK_FRACTION` (0.5.23: mem_cache/hicache_auto_size.py)."""


class NoHostMemory(ValueError):
    """No host memory is left for HiCache after the reserve (SGLang refuses to start)."""


@dataclass(frozen=True)
class AutoSize:
    """What the rule gave, and the figures behind it (for `validate`'s source line)."""

    ratio: float
    requested: float
    budget_bytes: float
    device_bytes: float

    def why(self, host_gib: float, ranks: int, fraction: float) -> str:
        verb = "kept" if self.ratio >= self.requested else f"lowered from {self.requested:g}"
        return (
            f"auto-sized: {verb} so the host pools fit {fraction:g} x ({host_gib:,.1f} GiB "
            f"- 10 GiB reserve) / {ranks} rank{'s' if ranks != 1 else ''} = "
            f"{self.budget_bytes / GIB:,.1f} GiB a rank, mirroring "
            f"{self.device_bytes / GIB:,.2f} GiB of device pools"
        )


def auto_ratio(
    *,
    requested: float,
    host_memory_gib: float,
    ranks_per_host: int,
    fraction: float,
    device_bytes: float,
) -> AutoSize:
    """The host/device ratio SGLang settles on for one rank."""
    free = host_memory_gib * GIB - RESERVE_BYTES
    budget = int(free // ranks_per_host * fraction)
    ratio = min(requested, budget * (1 - ALLOCATION_SLACK) / device_bytes)
    if ratio <= 0:
        raise NoHostMemory(
            f"no host memory is left for HiCache after the 10 GiB reserve "
            f"({host_memory_gib:,.1f} GiB on the host, {ranks_per_host} rank(s)); SGLang "
            "refuses to start: give host.hicache_ratio or host.pages"
        )
    return AutoSize(ratio, requested, budget, device_bytes)
