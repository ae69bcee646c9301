"""Summary metrics, exactly as docs/metrics.md defines them (warm-up excluded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sim.model.backup import DROP_VERDICTS
from sim.model.components import DEVICE_EVICTED_KEY, device_dropped_key, device_freed_key
from sim.model.loops import Loop
from sim.model.pools import KV, POOL_KINDS, PoolKind, Residency
from sim.model.prefetch import Outcome
from sim.model.storage import STORAGE_COUNTERS

SUMMARY_KEYS = (
    "requests",
    "prompt_tokens",
    "device_hit_tokens",
    "host_hit_tokens",
    "prefetch_issued",
    "prefetch_success",
    "prefetch_discarded",
    "discard_rate",
    "loops",
    "heal_rate",
    "loop_length_mean",
    "loop_length_max",
    "time_to_heal_p50_s",
    "l3_hit_tokens",
    "l3_loaded_tokens",
    "recomputed_tokens",
    "wasted_read_bytes",
    "rewrite_pages",
    "skipped_write_pages",
    "ttft_p50_s",
    "ttft_p99_s",
    "events",
    "wall_s",
)
"""The contract keys, in contract order; extra keys follow them in summary.json."""

EXTRA_KEYS = (
    "tpot_p50_s",
    "tpot_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "output_tokens_per_s",
    "input_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "input_tokens_per_s_per_gpu",
    "decode_steps",
    "decode_batch_mean",
    "loops_retried",
    "loops_healed",
    "requests_finished",
    "requests_unfinished",
    "requests_rejected",
    "requests_unfinished_late",
    "prefetch_revoked",
    "prefetch_declined",
    "prefetch_forfeited",
    "prefetch_aux_alloc_failed_tokens",
    "prefetch_anchor_lost",
    "prefetch_device_covered",
    "prefetch_refetched",
    "prefetch_terminated",
    "prefetch_retries",
    "prefetch_retry_success",
    "l3_loaded_rate",
    "written_pages",
    "written_kv_pages",
    "staged_write_bytes",
    "written_bytes",
    "rewrite_bytes",
    "heal_rewrite_node_pages",
    "write_kv_failed_pages",
    "write_aux_failed_objects",
    "dropped_parent_pages",
    "backup_dropped_tokens",
    "heal_dropped_beliefs",
    "hit_query_dropped_beliefs",
    "prefetch_shrunk",
    "storage_io_halts",
    "hit_query_halts",
    "device_backoff_tokens",
    "device_change_tokens",
    "read_transfer_bytes",
    "cross_instance_l3_hit_pages",
    "cross_instance_rewrite_objects",
    "loops_stale_by_other_instance",
    "instances",
    "load_imbalance",
)
"""Keys after the contract ones (docs/metrics.md, "Extra keys"), besides per-pool counters."""

WALL_CLOCK_KEYS = ("wall_s",)


def in_key_order(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with the contract keys first, then the extra keys, in the order of their
    tuples (and of docs/metrics.md), then the per-pool keys as they came: one order for
    summary.json and comparison.csv, whoever computed each key."""
    rank = {key: i for i, key in enumerate((*SUMMARY_KEYS, *EXTRA_KEYS))}
    last = len(rank)
    return dict(sorted(summary.items(), key=lambda item: rank.get(item[0], last)))


def is_summary_key(name: str) -> bool:
    """Is `name` a key a summary can have (contract, extra, or a per-pool storage or device
    counter)?"""
    if name in SUMMARY_KEYS or name in EXTRA_KEYS or name == DEVICE_EVICTED_KEY:
        return True
    if name.startswith(("device_", "written_")):
        return any(name in _aux_pool_keys(kind) for kind in POOL_KINDS.values() if kind.name != KV)
    return name.startswith("storage_") and any(
        name == f"storage_{pool}_{counter}" for pool in POOL_KINDS for counter in STORAGE_COUNTERS
    )


def summary_keys(pools: Iterable[str]) -> frozenset[str]:
    """Every key the summary of a run of a model with these pools has (`is_summary_key` says
    which names any model can have; this, which this model reports)."""
    names = list(pools)
    keys = {*SUMMARY_KEYS, *EXTRA_KEYS, DEVICE_EVICTED_KEY}
    for name in names:
        kind = POOL_KINDS[name]
        keys.update(f"storage_{name}_{counter}" for counter in STORAGE_COUNTERS)
        if name == KV:
            continue
        keys.update(_aux_pool_keys(kind))
        if not kind.residency.per_page:
            keys.discard(device_freed_key(name))
    return frozenset(keys)


def _aux_pool_keys(kind: PoolKind) -> tuple[str, ...]:
    """The summary keys an aux pool of this kind adds (a sidecar has no device slots of its
    own; it counts the prefetches its shortfalls clamped instead)."""
    if kind.rides_on_kv:
        return (
            f"written_{kind.name}_objects",
            f"prefetch_{kind.name}_clamps",
            f"prefetch_{kind.name}_clamped_tokens",
        )
    return (
        device_dropped_key(kind.name, kind.residency),
        device_freed_key(kind.name),
        device_resident_key(kind.name, kind.residency),
        f"written_{kind.name}_objects",
    )


def device_resident_key(pool: str, residency: Residency) -> str:
    """Mean device residency of an aux pool after warm-up: tokens for per-page values (pages
    times the page size), slots for end states."""
    unit = "tokens" if residency.per_page else residency.unit
    return f"device_{pool}_resident_{unit}_mean"


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def _quantile(values: pd.Series | np.ndarray, q: float) -> float | None:
    arr = np.asarray(values, dtype=float)
    return None if arr.size == 0 else float(np.quantile(arr, q))


def _weighted_quantile(values: pd.Series, weights: pd.Series, q: float) -> float | None:
    """`np.quantile` (linear interpolation, as SGLang's `bench_serving` takes its ITL
    percentiles) of the sample where each value is repeated its weight times (a gap that
    `tokens` tokens came after counts `tokens` times), without building that sample: the two
    ranks around `q * (n - 1)` are found in the cumulative weights."""
    order = np.argsort(values.to_numpy(dtype=float), kind="stable")
    sorted_values = values.to_numpy(dtype=float)[order]
    cumulative = np.cumsum(weights.to_numpy(dtype=np.int64)[order])
    if cumulative.size == 0 or cumulative[-1] <= 0:
        return None
    rank = q * float(cumulative[-1] - 1)
    below = int(np.floor(rank))
    above = min(below + 1, int(cumulative[-1]) - 1)
    low, high = sorted_values[np.searchsorted(cumulative, [below, above], side="right")]
    share = rank - below
    return float(low + (high - low) * share if share < 0.5 else high - (high - low) * (1 - share))


def latency_and_throughput(
    req: pd.DataFrame, gaps: pd.DataFrame, *, warmup_s: float, window_s: float, gpus: int
) -> dict[str, Any]:
    """TPOT, inter-token latency and end-to-end latency percentiles, and throughput, as
    SGLang's `bench_serving` defines them: TPOT per finished request of more than one output
    token (decode time over its tokens after the first); ITL over every token after a first;
    throughput the tokens produced inside the measured window (`window_s` after warm-up),
    per second, for the server(s) and for each of their `gpus`."""
    finished = req.loc[req["outcome"] == "finished"]
    many = finished[finished["output_tokens"] > 1]
    tpot = (many["finish_s"] - many["first_token_s"]) / (many["output_tokens"] - 1)
    e2e = finished["finish_s"] - finished["arrival_s"]
    counted = gaps[gaps["t_s"] >= warmup_s]
    first = req.loc[req["first_token_s"] >= warmup_s, "prompt_tokens"]
    output = int(counted["tokens"].sum()) + len(first)
    steps = int(counted["t_s"].nunique())
    rate = 1.0 / window_s if window_s > 0 else 0.0
    return {
        "tpot_p50_s": _quantile(tpot, 0.5),
        "tpot_p99_s": _quantile(tpot, 0.99),
        "itl_p50_s": _weighted_quantile(counted["gap_s"], counted["tokens"], 0.5),
        "itl_p99_s": _weighted_quantile(counted["gap_s"], counted["tokens"], 0.99),
        "e2e_p50_s": _quantile(e2e, 0.5),
        "e2e_p99_s": _quantile(e2e, 0.99),
        "output_tokens_per_s": round(output * rate, 3),
        "input_tokens_per_s": round(int(first.sum()) * rate, 3),
        "output_tokens_per_s_per_gpu": round(output * rate / gpus, 3),
        "input_tokens_per_s_per_gpu": round(int(first.sum()) * rate / gpus, 3),
        "decode_steps": steps,
        "decode_batch_mean": round(int(counted["tokens"].sum()) / steps, 3) if steps else None,
    }


ISSUED_COLUMNS = [
    "outcome",
    "attempt",
    "terminated",
    "read_bytes",
    "dropped_beliefs",
    "cross_instance_pages",
]
"""The prefetch columns the summary reads of the issued prefetches."""


def summarize(
    tables: dict[str, pd.DataFrame],
    loops: list[Loop],
    *,
    aux_pools: Sequence[PoolKind],
    page_size: int,
    warmup_s: float,
    events: int,
    wall_s: float,
    window_s: float = 0.0,
    gpus: int = 1,
) -> dict[str, Any]:
    """The summary keys computed from the record tables and the loops. The whole-run counters
    the components keep (storage's, each server's device tree's and prefetcher's) are theirs to
    report; the runner adds them."""
    req = tables["requests"]
    req = req[req["arrival_s"] >= warmup_s]
    pf = tables["prefetches"]
    pf = pf[pf["issued_s"] >= warmup_s]
    wr = tables["writes"]
    wr = wr[wr["t_s"] >= warmup_s]
    # Filtered frames keep only the columns read below: a long run's tables are large, and
    # each filtered copy of all their columns added to the run's peak memory.
    issued = pf.loc[pf["outcome"].isin([Outcome.SUCCESS, Outcome.DISCARDED]), ISSUED_COLUMNS]
    discarded = issued[issued["outcome"] == Outcome.DISCARDED]
    forfeited = pf[pf["outcome"] == Outcome.FORFEITED]
    counted = [lp for lp in loops if lp.first_discard_s >= warmup_s]
    retried = [lp for lp in counted if lp.retried]
    healed = [lp for lp in retried if lp.healed_s is not None]
    first_token = req.loc[req["first_token_s"].notna(), ["arrival_s", "first_token_s"]]
    ttft = first_token["first_token_s"] - first_token["arrival_s"]
    written = wr[wr["verdict"] == "write"]
    ts = tables["timeseries"]
    ts = ts[ts["t_s"] >= warmup_s]
    names = [kind.name for kind in aux_pools]
    summary: dict[str, Any] = {
        "requests": len(req),
        "prompt_tokens": int(req["prompt_tokens"].sum()),
        "device_hit_tokens": int(req["device_hit_tokens"].sum()),
        "host_hit_tokens": int(req["host_hit_tokens"].sum()),
        "prefetch_issued": len(issued),
        "prefetch_success": int((issued["outcome"] == Outcome.SUCCESS).sum()),
        "prefetch_discarded": len(discarded),
        "discard_rate": _ratio(len(discarded), len(issued)),
        "loops": len(counted),
        "heal_rate": _ratio(len(healed), len(retried)),
        "loop_length_mean": float(np.mean([lp.length for lp in counted])) if counted else None,
        "loop_length_max": max((lp.length for lp in counted), default=0),
        "time_to_heal_p50_s": _quantile(
            np.array([lp.time_to_heal_s for lp in healed], dtype=float), 0.5
        ),
        "l3_hit_tokens": int(req["l3_hit_tokens"].sum()),
        "l3_loaded_tokens": int(req["l3_loaded_tokens"].sum()),
        "recomputed_tokens": int(req["recomputed_tokens"].sum()),
        "wasted_read_bytes": int(discarded["read_bytes"].sum()),
        "rewrite_pages": int(written["rewrite_pages"].sum()),
        "skipped_write_pages": int(wr.loc[wr["verdict"] == "skip_covered", "pages"].sum()),
        "ttft_p50_s": _quantile(ttft, 0.5),
        "ttft_p99_s": _quantile(ttft, 0.99),
        "events": int(events),
        "wall_s": round(float(wall_s), 4),
        "loops_retried": len(retried),
        "loops_healed": len(healed),
        "requests_finished": int((req["outcome"] == "finished").sum()),
        "requests_unfinished": int((req["outcome"] == "unfinished").sum()),
        "requests_rejected": int((req["outcome"] == "rejected").sum()),
        "prefetch_revoked": int((pf["outcome"] == Outcome.REVOKED).sum()),
        "prefetch_declined": int((pf["outcome"] == Outcome.DECLINED).sum()),
        "prefetch_forfeited": len(forfeited),
        "prefetch_aux_alloc_failed_tokens": int(forfeited["span_pages"].sum()) * page_size,
        "prefetch_anchor_lost": int((pf["outcome"] == Outcome.ANCHOR_LOST).sum()),
        "prefetch_device_covered": int((pf["outcome"] == Outcome.DEVICE_COVERED).sum()),
        "prefetch_refetched": int((pf["outcome"] == Outcome.REFETCHED).sum()),
        "prefetch_terminated": int(issued["terminated"].sum()),
        "prefetch_retries": int((pf["attempt"] > 0).sum()),
        "l3_loaded_rate": _ratio(
            int(req["l3_loaded_tokens"].sum()), int(req["prompt_tokens"].sum())
        ),
        "prefetch_retry_success": int(
            ((issued["attempt"] > 0) & (issued["outcome"] == Outcome.SUCCESS)).sum()
        ),
        "written_pages": int(written["kv_staged"].sum()),
        "written_kv_pages": int(written["kv_written"].sum()),
        "staged_write_bytes": int(written["bytes"].sum()),
        "written_bytes": int(written["written_bytes"].sum()),
        "rewrite_bytes": int(written.loc[written["rewrite_pages"] > 0, "written_bytes"].sum()),
        "heal_rewrite_node_pages": int(
            written.loc[written["rewrite_pages"] > 0, "kv_staged"].sum()
        ),
        "write_kv_failed_pages": int(written["kv_failed"].sum()),
        "write_aux_failed_objects": int(sum(written[f"{p}_failed"].sum() for p in names)),
        "dropped_parent_pages": int(wr.loc[wr["verdict"] == "drop_parent", "pages"].sum()),
        "backup_dropped_tokens": int(wr.loc[wr["verdict"].isin(DROP_VERDICTS), "pages"].sum())
        * page_size,
        "heal_dropped_beliefs": int(discarded["dropped_beliefs"].sum()),
        "device_backoff_tokens": int(req["device_backoff_tokens"].sum()),
        "device_change_tokens": int(req["device_change_tokens"].sum()),
        "read_transfer_bytes": int(pf["transfer_bytes"].sum()),
        "cross_instance_l3_hit_pages": int(issued["cross_instance_pages"].sum()),
        "cross_instance_rewrite_objects": int(written["cross_instance_objects"].sum()),
        "loops_stale_by_other_instance": sum(1 for lp in counted if lp.stale_by_other),
    }
    summary.update(
        latency_and_throughput(
            req, tables["decode_gaps"], warmup_s=warmup_s, window_s=window_s, gpus=gpus
        )
    )
    for kind in aux_pools:
        summary[f"written_{kind.name}_objects"] = int(written[f"{kind.name}_keys"].sum())
        if kind.rides_on_kv:
            continue
        units = ts[f"device_{kind.name}_{kind.residency.unit}"]
        scale = page_size if kind.residency.per_page else 1
        summary[device_resident_key(kind.name, kind.residency)] = (
            None if units.empty else round(float(units.mean()) * scale, 3)
        )
    return summary


CLUSTER_KEYS = ("instances", "load_imbalance")
"""Keys only the whole cluster has (a server's own row in the `instances` table lacks them)."""


def cluster_summary(instances: pd.DataFrame) -> dict[str, Any]:
    """The cluster's shape from its per-server summaries: how many servers, and how unevenly
    the router spread the requests (the busiest server's over the mean; 1.0 is even)."""
    requests = instances["requests"]
    mean = float(requests.mean())
    return {
        "instances": len(instances),
        "load_imbalance": None if mean == 0 else round(float(requests.max()) / mean, 6),
    }
