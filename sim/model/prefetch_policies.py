"""When the scheduler may stop a storage prefetch that has not finished (SGLang's
`--hicache-storage-prefetch-policy`: check_prefetch_progress / _can_terminate_prefetch).

A policy maps an operation and its timeout budget to a time: -inf (at once), a deadline, or inf
(never); the registry is also the list `prefetch.policy` accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sim.core.registry import Registry
from sim.model.operation import PrefetchOp


@dataclass(frozen=True)
class PrefetchTimeout:
    """The `timeout` policy's budget: base + per 1024 tokens of the hit."""

    base_s: float
    per_ki_token_s: float
    page_size: int


Policy = Callable[[PrefetchOp, PrefetchTimeout], float]
"""When the scheduler may stop a prefetch that has not finished: a time, -inf (at once) or inf
(never). SGLang: check_prefetch_progress / _can_terminate_prefetch."""

PREFETCH_POLICIES: Registry[Policy] = Registry("prefetch policy")


@PREFETCH_POLICIES.register("best_effort")
def best_effort(op: PrefetchOp, budget: PrefetchTimeout) -> float:
    """Stop as soon as the request could run."""
    return -math.inf


@PREFETCH_POLICIES.register("timeout")
def timeout(op: PrefetchOp, budget: PrefetchTimeout) -> float:
    """Stop once the budget for the hit has passed since the prefetch started (before the hit
    query answers, the budget is the base alone)."""
    per_hit = budget.per_ki_token_s * op.hit_pages * budget.page_size / 1024.0
    return op.issued_s + (budget.base_s + per_hit)


@PREFETCH_POLICIES.register("wait_complete")
def wait_complete(op: PrefetchOp, budget: PrefetchTimeout) -> float:
    """Never stop: the request waits for every byte."""
    return math.inf
