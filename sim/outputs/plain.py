"""The answer of a capacity search or a plan in one plain paragraph, for the top of its report.

The page is forwarded to someone who did not run the search and may not know the scenario's
keys: what was sized, for which deployment (release, backend, GPU, model), the answer with its
interval and unit, and what the simulation leaves out, in words. The key names are in the
tables below the paragraph.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sim.core.documents import value_at
from sim.core.stats import parse_relative, parse_target
from sim.core.units import is_missing, metric_text, metric_unit
from sim.outputs.answers import SAME_NOTE, answer_text, quantity_text, same_every_seed
from sim.outputs.findings import LABELS, label

POOLS = {"kv": "KV", "swa": "SWA", "mamba": "Mamba"}
NAMED = {
    "cluster.instances": "the number of servers",
    "host.pages": "the host pool's pages",
    "device.mamba_slots": "the device's Mamba slots",
    "existence_cache.entries": "the existence cache's entries",
}
NOT_MODELLED = (
    "Not modelled: decode retraction (a request reserves its whole output at admission), "
    "prefill and decode mixed in one batch, servers failing, and the router's own delay; "
    "docs/model.md lists every simplification."
)


def plain_key(key: str) -> str:
    """A scenario key in words: 'storage.pools.swa.capacity_gb' -> "the SWA storage pool's
    capacity"."""
    if key in NAMED:
        return NAMED[key]
    parts = key.split(".")
    if len(parts) == 4 and parts[:2] == ["storage", "pools"] and parts[3] == "capacity_gb":
        return f"the {POOLS.get(parts[2], parts[2])} storage pool's capacity"
    if len(parts) == 2 and parts[0] == "device" and parts[1].endswith("_pages"):
        pool = parts[1].removesuffix("_pages")
        return f"the device {POOLS.get(pool, pool)} pool's pages"
    return "the " + " ".join(part.replace("_", " ") for part in parts)


def plain_value(key: str, value: Any) -> str:
    """'2 servers', "0.2 GB for the SWA storage pool's capacity"."""
    if key == "cluster.instances" and isinstance(value, int):
        return f"{value:,} server" + ("" if value == 1 else "s")
    if is_missing(value):
        return f"no bound on {plain_key(key)}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{quantity_text(key, value)} for {plain_key(key)}"
    return f"{value} for {plain_key(key)}"


def plain_metric(metric: str) -> str:
    """'discard_rate' -> 'the discard rate'; a count 'the number of requests'."""
    words = label(metric) if metric in LABELS else metric.replace("_", " ")
    if metric_unit(metric) in ("ratio", "s", "bytes") or metric.endswith("_rate"):
        return f"the {words}"
    return f"the number of {words}"


def plain_target(text: str) -> str:
    """'discard_rate<=0.2' -> 'the discard rate is at most 0.2'."""
    metric, op, bound = parse_target(text)
    side = "at least" if op == ">=" else "at most"
    return f"{plain_metric(metric)} is {side} {metric_text(metric, bound)}"


def relative_target(answer: Mapping[str, Any], param: str) -> str:
    """A relative target as it was asked, with the reference mean that made it absolute: 'the
    heal rate is at least 95 % of the unbounded pool's 0.2652'; an absolute one as written."""
    target, reference = str(answer["target"]), answer.get("reference")
    requested = answer.get("requested_target")
    relative = parse_relative(str(requested)) if requested else None
    if relative is None or not isinstance(reference, Mapping):
        return plain_target(target)
    metric, op, share, _ = relative
    side = "at least" if op == ">=" else "at most"
    value, mean = reference.get("value"), reference.get("mean")
    whose = (
        "the unbounded pool's" if value is None else f"its value at {quantity_text(param, value)},"
    )
    return f"{plain_metric(metric)} is {side} {share * 100:g} % of {whose} {mean:.4g}"


GPU_WORDS = {
    "h100": "H100",
    "h200": "H200",
    "b200": "B200",
    "a100-80g": "A100 80GB",
    "l40s": "L40S",
}
"""A GPU profile's name as its maker writes it."""


def deployment_words(config: Mapping[str, Any], varied: Sequence[str] = ()) -> str:
    """'gpt-oss-120b on 2 servers of 4 H200 GPUs each, SGLang 0.5.23 with the file storage
    backend'; 'on one H200' for one server of one GPU (the server count left out where it is
    among the `varied` keys)."""
    model = value_at(config, "model.preset") or "a custom model"
    servers = value_at(config, "cluster.instances") or 1
    tp = value_at(config, "server.tp_size") or 1
    gpu = value_at(config, "hardware.gpu")
    board = GPU_WORDS.get(str(gpu), str(gpu)) if gpu else None
    each = None if board is None else f"one {board}" if tp == 1 else f"{tp:,} {board} GPUs"
    if "cluster.instances" in varied:
        text = f"{model} on servers" + (f" of {each} each" if each else "")
    elif servers == 1:
        text = f"{model} on " + (
            "one server" if each is None else each if tp == 1 else f"one server of {each}"
        )
    else:
        text = f"{model} on {servers:,} servers" + (f" of {each} each" if each else "")
    release, backend = value_at(config, "server.sglang"), value_at(config, "storage.backend")
    if release:
        text += f", SGLang {release}"
    if backend:
        text += f" with the {backend} storage backend"
    return text


def measured(metric: str, stats: Mapping[str, Any]) -> str:
    """'the discard rate at a mean of 0.15 (95 % interval 0.1 to 0.2)', or the one value every
    seed gave."""
    mean, what = stats.get("mean"), plain_metric(metric)
    if same_every_seed(stats):
        return f"{what} at {metric_text(metric, mean)} ({SAME_NOTE})"
    low, high = stats.get("ci_low"), stats.get("ci_high")
    if is_missing(low) or is_missing(high):
        return f"{what} at a mean of {metric_text(metric, mean)}"
    return (
        f"{what} at a mean of {metric_text(metric, mean)} (95 % interval "
        f"{metric_text(metric, low)} to {metric_text(metric, high)})"
    )


def capacity_paragraph(
    answer: Mapping[str, Any], rows: Sequence[Mapping[Any, Any]], config: Mapping[str, Any]
) -> str:
    """A capacity search in words: what it sized, the smallest value meeting the target with
    its interval and unit, how sharply it was resolved, and what is not modelled."""
    param, target = str(answer["param"]), str(answer["target"])
    metric = parse_target(target)[0]
    seeds, found = answer.get("seeds"), answer.get("answer")
    where = deployment_words(config, [param]) if config else "the scenario's deployment"
    text = (
        f"This search sized {plain_key(param)} for {where}: the smallest value at which "
        f"{relative_target(answer, param)} with 95 % confidence over {seeds} seeds. "
    )
    best = next((r for r in rows if _same(r.get("value"), found)), None)
    if found is None or best is None:
        text += f"No value tried, from {_range(param, rows)}, meets it. "
    else:
        text += (
            f"The answer is {answer_text(param, found, answer.get('largest_failing'), config)}, "
            f"with {measured(metric, best)}. "
        )
    if answer.get("overloaded"):
        text += "The answer's runs were overloaded (see the warning below): it sizes a queue. "
    return text + NOT_MODELLED


def plan_paragraph(doc: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """A plan in words: the grid priced, the cheapest of its points meeting every target with
    each target's interval, what may lie between the points, and what is not modelled."""
    axes = doc.get("axes") or {}
    count = math.prod(len(values) for values in axes.values()) if axes else 0
    where = deployment_words(config, list(axes)) if config else "the scenario's deployment"
    varied = ", ".join(plain_key(key) for key in axes)
    targets = " and ".join(plain_target(t) for t in doc.get("targets") or [])
    text = (
        f"This plan priced {count:,} deployments of {where}, every combination of the values "
        f"tried for {varied}, and looked for the cheapest at which {targets}, with 95 % "
        f"confidence over {doc.get('seeds')} seeds. "
    )
    best = doc.get("answer")
    if not isinstance(best, Mapping):
        text += "None of them meets every target. "
    else:
        values = ", ".join(plain_value(k, v) for k, v in (best.get("values") or {}).items())
        stats = best.get("metrics") or {}
        met = "; ".join(
            measured(m, stats[m])
            for m in dict.fromkeys(parse_target(t)[0] for t in doc.get("targets") or [])
            if m in stats
        )
        text += (
            f"The cheapest of the grid's points is {values}: ${best['cost_usd_per_hour']:,.2f} "
            f"per hour (${best['cost_usd_per_month']:,.0f} per month, {_gpus(best['gpus'])}), "
            f"with {met}. "
        )
        if doc.get("neighbours"):
            text += (
                "A cheaper deployment may lie between the grid's points: the points worth "
                "adding are listed below. "
            )
    if doc.get("overloaded"):
        text += "The answer's runs were overloaded (see the warning below): it sizes a queue. "
    return text + "The price counts GPU hours and storage capacity only. " + NOT_MODELLED


def _gpus(count: Any) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def _range(param: str, rows: Sequence[Mapping[Any, Any]]) -> str:
    values = sorted(float(r["value"]) for r in rows if not is_missing(r.get("value")))
    if not values:
        return "none"
    return f"{quantity_text(param, values[0])} to {quantity_text(param, values[-1])}"


def _same(a: Any, b: Any) -> bool:
    return not is_missing(a) and not is_missing(b) and math.isclose(float(a), float(b))
