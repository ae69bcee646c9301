"""Findings of a run: what looped, what healed, what it cost, what storage restored, and what
a cluster's servers did to each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.core.units import bytes_text, is_missing, metric_text, number
from sim.outputs.findings import (
    join,
    percent,
)


def _count(summary: Mapping[str, Any], key: str) -> int:
    value = summary.get(key)
    return 0 if value is None or is_missing(value) else int(value)


def run_findings(summary: Mapping[str, Any]) -> list[str]:
    """What looped, what healed, what it cost, and what storage restored, for one run."""
    sentences = [_looped(summary)]
    healed = _healed(summary)
    if healed:
        sentences.append(healed)
    sentences.append(_cost(summary))
    restored = _restored(summary)
    if restored:
        sentences.append(restored)
    outcomes = []
    if unfinished := _count(summary, "requests_unfinished"):
        outcomes.append(f"{unfinished:,} were still unfinished at the horizon")
    if rejected := _count(summary, "requests_rejected"):
        outcomes.append(f"{rejected:,} were rejected (they can never fit on the device)")
    if outcomes:
        sentences.append(f"Of {_count(summary, 'requests'):,} requests, {join(outcomes)}.")
    cluster = _cluster(summary)
    if cluster:
        sentences.append(cluster)
    return sentences


def _looped(s: Mapping[str, Any]) -> str:
    issued, discarded = _count(s, "prefetch_issued"), _count(s, "prefetch_discarded")
    if not issued:
        return "No storage prefetch was issued after warm-up, so nothing could loop."
    if not discarded:
        return f"None of the {issued:,} issued prefetches was discarded: nothing looped."
    loops = _count(s, "loops")
    text = (
        f"{discarded:,} of the {issued:,} issued prefetches were discarded (discard rate "
        f"{number(s.get('discard_rate'))}), in {metric_text('loops', loops)}"
    )
    longest = _count(s, "loop_length_max")
    if loops and longest > 1:
        text += (
            f" of {number(s.get('loop_length_mean'))} discards on average; the longest was "
            f"discarded {longest:,} times in a row at the same endpoint."
        )
    elif loops:
        text += ", each a single discard: no endpoint was discarded twice in a row."
    else:
        text += ", all begun before the end of warm-up, so none is counted."
    return text


def _healed(s: Mapping[str, Any]) -> str | None:
    loops = _count(s, "loops")
    if not loops:
        return None
    if is_missing(s.get("loops_retried")):
        return f"The heal rate was {number(s.get('heal_rate'))}."
    retried, healed = _count(s, "loops_retried"), _count(s, "loops_healed")
    if not retried:
        return "No loop was retried (no later prefetch reached a looped endpoint): none could heal."
    text = (
        f"{healed:,} of the {retried:,} retried loops healed (heal rate {number(s['heal_rate'])})"
    )
    if not is_missing(s.get("time_to_heal_p50_s")):
        took = metric_text("time_to_heal_p50_s", s["time_to_heal_p50_s"])
        text += (
            f"; the median healed loop took {took} from its first discard to its healing success"
        )
    text += "."
    if loops > retried:
        text += f" {loops - retried:,} of the {loops:,} loops were never retried."
    return text


def _cost(s: Mapping[str, Any]) -> str:
    parts = []
    wasted = s.get("wasted_read_bytes")
    if not is_missing(wasted) and wasted:
        parts.append(f"{bytes_text(float(wasted))} of storage reads thrown away with the discards")
    rewrites = _count(s, "rewrite_pages")
    rewrite = f"{rewrites:,} KV pages rewritten after heals"
    if rewrites and not is_missing(s.get("rewrite_bytes")):
        rewrite += f" ({bytes_text(float(s['rewrite_bytes']))} of writes)"
    parts.append(rewrite)
    prompt, recomputed = _count(s, "prompt_tokens"), _count(s, "recomputed_tokens")
    if prompt:
        parts.append(
            f"{recomputed:,} of {prompt:,} prompt tokens recomputed ({percent(recomputed, prompt)})"
        )
    if not is_missing(s.get("ttft_p99_s")):
        ttft = f"a TTFT p99 of {metric_text('ttft_p99_s', s['ttft_p99_s'])}"
        if not is_missing(s.get("ttft_p50_s")):
            ttft += f" (p50 {metric_text('ttft_p50_s', s['ttft_p50_s'])})"
        parts.append(ttft)
    return f"What it cost: {join(parts)}."


def _restored(s: Mapping[str, Any]) -> str | None:
    prompt = _count(s, "prompt_tokens")
    if not prompt or is_missing(s.get("l3_loaded_tokens")):
        return None
    loaded = _count(s, "l3_loaded_tokens")
    return (
        f"Storage restored {loaded:,} prompt tokens ({percent(loaded, prompt)} of them); the "
        f"device already held {_count(s, 'device_hit_tokens'):,}."
    )


def _cluster(s: Mapping[str, Any]) -> str | None:
    """What the servers of a cluster did to each other through the shared backend."""
    instances = _count(s, "instances")
    if instances <= 1:
        return None
    text = f"{instances:,} servers shared one storage backend"
    if not is_missing(s.get("load_imbalance")):
        text += (
            f"; the busiest received {number(s['load_imbalance'])} times the mean number of "
            "requests"
        )
    loops = _count(s, "loops")
    parts = [
        f"{_count(s, 'cross_instance_l3_hit_pages'):,} KV pages were read from objects another "
        "server had stored",
        f"{_count(s, 'cross_instance_rewrite_objects'):,} objects were put again that another "
        "server had already stored",
        f"{_count(s, 'loops_stale_by_other_instance'):,} of the {loops:,} loops missed an object "
        "another server's write had pushed out of storage",
    ]
    return f"{text}. Across servers, {join(parts)}."
