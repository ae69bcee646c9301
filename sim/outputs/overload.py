"""Overload: a run whose server could not keep up with what arrived.

Its storage figures are real but answer a question nobody asks: requests queue for prefill,
TTFT measures the queue, and the share restored from storage is whatever the queue let through.
A capacity answer from such runs sizes the wrong thing, so every command that prints or reports
runs says so (stderr and the report), naming what to change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sim.deployment.resolve import get
from sim.scenario.schema import Scenario, scenario_document

TTFT_P50_LIMIT_S = 10.0
"""A median time to first token above this is a queue, not a prefill: ten times the one-second
scale of an interactive TTFT target (a chosen bound, stated in docs/reliability.md)."""
UNFINISHED_SHARE = 0.01
"""Requests still unfinished at the horizon, as a share of those counted, above which the run is
called overloaded (a few in flight at the end are normal). Those that arrived too late to finish
by the horizon even alone on an idle server (`requests_unfinished_late`) are not counted: the
horizon cut them off, not the load."""

_FIX = (
    "raise compute.prefill_tokens_per_s to what the deployment's GPU does, add servers "
    "(cluster.instances), or shorten the workload"
)
_DECODE_FIX = (
    "lower the decode step (compute.decode_step_ms, decode_ms_per_request and "
    "decode_ms_per_ki_context_tokens; left out, the roofline of the named GPU sets them) to "
    "what the deployment's GPU does, add servers (cluster.instances) so that each running batch "
    "is smaller, shorten the outputs (the workload's output tokens), or lengthen duration_s"
)
DECODE_BOUND = "compute.decode_step_ms"
"""Named by the reason of a run whose prefill kept up but whose requests did not finish."""


def fix_for(reasons: list[str]) -> str:
    """What to change: the decode speed for a decode-bound run, else the prefill side."""
    return _DECODE_FIX if any(DECODE_BOUND in reason for reason in reasons) else _FIX


def overload_reasons(
    summary: Mapping[str, Any], prefill_tokens_per_s: float | None, window_s: float
) -> list[str]:
    """Why the run was overloaded (empty when it was not): unfinished requests, prefill work
    offered faster than the compute rate, or a median TTFT above TTFT_P50_LIMIT_S."""
    reasons = []
    requests = _number(summary.get("requests"))
    unfinished = max(
        _number(summary.get("requests_unfinished"))
        - _number(summary.get("requests_unfinished_late")),
        0.0,
    )
    if requests > 0 and unfinished > UNFINISHED_SHARE * requests:
        reasons.append(
            f"{unfinished:,.0f} of {requests:,.0f} requests ({unfinished / requests:.1%}) never "
            "finished"
        )
    if prefill_tokens_per_s and window_s > 0:
        cached = sum(
            _number(summary.get(key))
            for key in ("device_hit_tokens", "host_hit_tokens", "l3_loaded_tokens")
        )
        offered = (_number(summary.get("prompt_tokens")) - cached) / window_s
        if offered > prefill_tokens_per_s:
            reasons.append(
                f"prefill was offered {offered:,.0f} tokens/s to compute (prompt tokens found on "
                f"neither device, host nor storage, over the {window_s:g} s measured), above "
                f"compute.prefill_tokens_per_s {prefill_tokens_per_s:,.0f}"
            )
    ttft = _number(summary.get("ttft_p50_s"))
    if ttft > TTFT_P50_LIMIT_S:
        reasons.append(f"TTFT p50 is {ttft:,.1f} s (above {TTFT_P50_LIMIT_S:g} s: a queue)")
    judged = bool(prefill_tokens_per_s) and window_s > 0
    if judged and len(reasons) == 1 and reasons[0].endswith("never finished"):
        reasons[0] += (
            f" while prefill kept up (TTFT p50 {ttft:,.2f} s): the decode steps of the running "
            f"batch ({DECODE_BOUND} plus what each request and its context add) outlast the run"
        )
    return reasons


def late_note(summary: Mapping[str, Any], where: str = "the run") -> str | None:
    """How many requests were left unfinished only because they arrived too late to finish by
    the horizon even alone on an idle server (None: none were): said, not called overload."""
    late = _number(summary.get("requests_unfinished_late"))
    if late <= 0:
        return None
    return (
        f"in {where}, {late:,.0f} requests arrived too late to finish by the horizon (not "
        "counted as overload)"
    )


SETTINGS = ("compute.prefill_tokens_per_s", "cluster.instances", "duration_s", "warmup_s")
"""The scenario keys the check reads, which a sweep point may set or change through another
key (`server.tp_size` or `hardware.gpu` re-derive the prefill rate): a study's run record keeps
them as its point resolved them (`resolved`), and the check reads those first."""


def config_overload(
    summary: Mapping[str, Any], config: Mapping[str, Any], point: Mapping[str, Any] | None = None
) -> list[str]:
    """`overload_reasons` with the rate and the measured window read from a resolved scenario
    document (a run directory's config.resolved.yaml, or `scenario_document`), under a sweep
    point's own values of those keys. A cluster's servers prefill side by side."""
    values = {key: get(dict(config), key) for key in SETTINGS} | {
        key: value for key, value in (point or {}).items() if key in SETTINGS
    }
    rate = values["compute.prefill_tokens_per_s"]
    servers = values["cluster.instances"] if _number(values["cluster.instances"]) >= 1 else 1
    window = _number(values["duration_s"]) - _number(values["warmup_s"])
    total = _number(rate) * _number(servers) if isinstance(rate, int | float) else None
    return overload_reasons(summary, total, window)


def study_overload(tasks: Path, config: Mapping[str, Any], what: str) -> str | None:
    """One line for a sweep, capacity search or plan whose finished runs (`tasks/`, one JSON
    file a run) include overloaded ones: how many, the first one's point and why."""
    overloaded, total, first = 0, 0, ""
    for record, summary, point in _run_records(tasks):
        total += 1
        reasons = config_overload(summary, config, _as_resolved(record, point))
        if reasons:
            overloaded += 1
            if not first:
                shown = ", ".join(f"{k}={v}" for k, v in point.items()) or "the scenario"
                first = f"first at {shown}: {'; '.join(reasons)}"
    if not overloaded:
        return None
    return (
        f"{overloaded:,} of {total:,} runs of this {what} were overloaded ({first}). Their "
        "storage figures describe a queue, and an answer from them sizes the wrong thing: "
        f"{fix_for([first])}"
    )


def study_late_note(tasks: Path, what: str) -> str | None:
    """`late_note` for a sweep, capacity search or plan: how many of its finished runs left
    requests unfinished only because they arrived too late, and how many requests in all."""
    runs, total, late = 0, 0, 0.0
    for _, summary, _ in _run_records(tasks):
        total += 1
        count = _number(summary.get("requests_unfinished_late"))
        runs += count > 0
        late += count
    if not late:
        return None
    return (
        f"in {runs:,} of {total:,} runs of this {what}, {late:,.0f} requests in all arrived too "
        "late to finish by the horizon (not counted as overload)"
    )


def _run_records(tasks: Path) -> Iterator[tuple[Mapping[str, Any], ...]]:
    """Each finished run of a study (`tasks/`, one JSON file a run): its record, summary and
    point; unreadable or partial records are skipped."""
    for path in sorted(tasks.glob("*.json")) if tasks.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        summary, point = record.get("summary"), record.get("values") or {}
        if isinstance(summary, Mapping) and isinstance(point, Mapping):
            yield record, summary, point


def _as_resolved(record: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """A run record's point with the values its own scenario resolved (a record written
    before they were kept: the point as swept)."""
    resolved = record.get("resolved")
    own = resolved if isinstance(resolved, Mapping) else {}
    return {**point, **{key: own[key] for key in SETTINGS if key in own}}


def answer_overload(
    tasks: Path, config: Mapping[str, Any], values: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The `overloaded` field of capacity.json and plan.json: of the finished runs at the
    answer's values (`tasks/`, one JSON file a run), how many were overloaded, why (a line a
    run), what to change, and one statement to print; None when none was, or there is no
    answer. An answer from such runs sizes a queue, not the storage."""
    if values is None:
        return None
    runs, warnings = 0, []
    for record, summary, point in _run_records(tasks):
        if set(point) != set(values) or any(point[k] != v for k, v in values.items()):
            continue
        runs += 1
        reasons = config_overload(summary, config, _as_resolved(record, point))
        if reasons:
            warnings.append(f"seed {record.get('seed')}: {'; '.join(reasons)}")
    if not warnings:
        return None
    fix = fix_for(warnings)
    return {
        "runs": len(warnings),
        "of": runs,
        "warnings": warnings,
        "fix": fix,
        "statement": (
            f"{len(warnings):,} of the answer's {runs:,} runs were overloaded "
            f"({warnings[0]}). Their storage figures describe a queue, and the answer sizes the "
            f"wrong thing: {fix}"
        ),
    }


def value_overload(tasks: Path, scenario: Scenario, answer: Any) -> dict[str, Any] | None:
    """`answer_overload` of a capacity answer (its `param` and `answer`, None: no answer)."""
    if answer.answer is None:
        return None
    return answer_overload(tasks, scenario_document(scenario), {answer.param: answer.answer})


def point_overload(tasks: Path, scenario: Scenario, point: Any) -> dict[str, Any] | None:
    """`answer_overload` of a plan's answer (a point with its `values`; None: no answer)."""
    if point is None:
        return None
    return answer_overload(tasks, scenario_document(scenario), point.values)


def overload_warning(reasons: list[str], where: str = "the run") -> str | None:
    """One line saying `where` was overloaded, why, and what to change (None: it was not)."""
    if not reasons:
        return None
    return (
        f"{where} was overloaded: {'; '.join(reasons)}. Its storage figures describe a queue: "
        f"{fix_for(reasons)}"
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value == value else 0.0
