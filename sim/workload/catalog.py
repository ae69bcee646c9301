"""The workload kinds a scenario's `workload.kind` accepts, each registered by its name."""

from __future__ import annotations

from sim.core.registry import Registry
from sim.workload.concurrency import ConcurrencyWorkload
from sim.workload.kinds import (
    MooncakeWorkload,
    MultiturnWorkload,
    SharedPrefixWorkload,
    WorkloadSpec,
)

WORKLOAD_KINDS: Registry[type[WorkloadSpec]] = Registry("workload kind")
"""Workload specs by `kind`; the spec's `build` makes the request stream."""
WORKLOAD_KINDS.register("shared_prefix", SharedPrefixWorkload)
WORKLOAD_KINDS.register("multiturn", MultiturnWorkload)
WORKLOAD_KINDS.register("mooncake", MooncakeWorkload)
WORKLOAD_KINDS.register("concurrency", ConcurrencyWorkload)
