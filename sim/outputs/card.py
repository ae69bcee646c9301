"""The deployment card: what was simulated, in the words a capacity planner forwards.

A report is read by someone who did not write the scenario: before any number they need the
model (and what a token of each pool weighs), the trace or workload, the servers and their GPU,
the SGLang release and storage backend, and every pool's size in pages, tokens and bytes. The card
is computed from a resolved configuration (`config.resolved.yaml`), so it says what ran, after
presets, profiles and derived sizes, never what the scenario file happened to spell out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from sim.core.documents import value_at
from sim.core.units import GB, bytes_text, number
from sim.outputs.sizing import held
from sim.scenario.sizes import size_notes

Card = list[tuple[str, str]]
"""Rows of (item, value), in reading order."""

POOL_LABELS = {"kv": "KV", "swa": "SWA", "mamba": "Mamba"}
DEVICE_KEYS = {"kv": "kv_pages", "swa": "swa_pages", "mamba": "mamba_slots"}


def deployment_card(config: Mapping[str, Any], varied: Mapping[str, str] | None = None) -> Card:
    """The card of a resolved configuration; `varied` maps a dotted key a sweep or a search
    changes to what it says instead of the one value (`'swept: 2, 5, 10 GB'`)."""
    varied = dict(varied or {})
    notes = size_notes(dict(config))
    rows: Card = []
    rows.append(("model", _model(config)))
    rows.append(("workload", _workload(config)))
    rows.append(("servers", _servers(config)))
    profile = _profile(config)
    if profile:
        rows.append(("SGLang and backend", profile))
    rows.append(("device pools", _device(config, notes, varied)))
    rows.append(("host pool", _host(config, notes, varied)))
    rows.append(("storage pools", _storage(config, notes, varied)))
    duration = value_at(config, "duration_s")
    if duration is not None:
        warmup = config.get("warmup_s")
        rows.append(("simulated", f"{number(duration)} s (warm-up {number(warmup)} s)"))
    shown = {k for k in varied if _placed(k)}
    for key, note in varied.items():
        if key not in shown:
            rows.append((key, note))
    return rows


def _placed(key: str) -> bool:
    """Keys the pool rows already mention when varied."""
    return key.startswith(("device.", "host.pages", "storage.pools."))


def _model(config: Mapping[str, Any]) -> str:
    model = config.get("model")
    if not isinstance(model, Mapping):
        return "–"
    name = model.get("preset") or "custom (no preset)"
    parts = []
    for pool in ("kv", "swa", "mamba"):
        spec = model.get(pool)
        if not isinstance(spec, Mapping):
            continue
        label = POOL_LABELS[pool]
        if pool == "mamba":
            state = spec.get("state_bytes")
            parts.append(f"{label} state {bytes_text(float(state))}" if state else label)
            continue
        text = f"{label} {number(spec.get('bytes_per_token'))} B/token"
        if spec.get("layers"):
            text += f" ({number(spec['layers'])} layers)"
        if pool == "swa" and spec.get("window_tokens"):
            text += f", {number(spec['window_tokens'])}-token window"
        parts.append(text)
    page = model.get("page_size")
    paged = f"; pages of {number(page)} tokens" if page else ""
    return f"{name}: {'; '.join(parts)}{paged}"


def _workload(config: Mapping[str, Any]) -> str:
    workload = config.get("workload")
    if not isinstance(workload, Mapping):
        return "–"
    kind = str(workload.get("kind", "?"))
    path = workload.get("path")
    if isinstance(path, str):
        extra = [
            f"{k.removesuffix('_tokens')} {number(v)} tokens"
            if k.endswith("_tokens")
            else f"{k} {number(v)}"
            for k, v in workload.items()
            if k not in ("kind", "path") and v is not None
        ]
        return f"{kind} trace {PurePath(path).name}" + (f" ({', '.join(extra)})" if extra else "")
    settings = [f"{k} {number(v)}" for k, v in workload.items() if k != "kind" and _scalar(v)]
    return f"{kind} (synthetic: {', '.join(settings)})" if settings else kind


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool)


def _servers(config: Mapping[str, Any]) -> str:
    instances = value_at(config, "cluster.instances") or 1
    gpu = value_at(config, "hardware.gpu")
    memory = value_at(config, "hardware.memory_mib")
    tp = value_at(config, "server.tp_size") or 1
    what = f"GPU {gpu}" if gpu else "no GPU profile (device pools as given)"
    if gpu and memory:
        what += f" ({number(memory)} MiB)"
    text = f"{number(instances)} server{'s' if instances != 1 else ''}, {what}, TP {number(tp)}"
    policy = value_at(config, "cluster.router.policy")
    if instances != 1 and policy:
        text += f", {policy} router"
    return text


_PROFILE = (
    ("server.sglang", "SGLang {}"),
    ("storage.backend", "{} backend"),
    ("storage.hit_query", "hit query {}"),
    ("host.mode", "host {} mode"),
    ("heal", "heal {}"),
)
"""The deployment's named behaviours, each a key and how the card says it."""


def _profile(config: Mapping[str, Any]) -> str:
    values = ((value_at(config, key), form) for key, form in _PROFILE)
    return ", ".join(form.format(value) for value, form in values if value)


def _sized(key: str, value: Any, notes: Mapping[str, str], varied: Mapping[str, str]) -> str:
    if key in varied:
        return varied[key]
    if value is None:
        return "none"
    note = notes.get(key)
    return f"{number(value)}" + (f" ({note})" if note else "")


def _device(config: Mapping[str, Any], notes: Mapping[str, str], varied: Mapping[str, str]) -> str:
    parts = []
    for pool, key in DEVICE_KEYS.items():
        if not isinstance(value_at(config, f"model.{pool}"), Mapping):
            continue
        value = value_at(config, f"device.{key}")
        unit = key.split("_")[-1]
        text = f"{POOL_LABELS[pool]} {unit} {_sized(f'device.{key}', value, notes, varied)}"
        holds = held(config, f"device.{key}") if f"device.{key}" not in varied else ""
        parts.append(text + (f" = {holds}" if holds and pool == "swa" else ""))
    return "; ".join(parts) or "–"


def _host(config: Mapping[str, Any], notes: Mapping[str, str], varied: Mapping[str, str]) -> str:
    pages = value_at(config, "host.pages")
    text = f"pages {_sized('host.pages', pages, notes, varied)}"
    pcie = value_at(config, "host.pcie_gbps")
    if pcie is not None:
        text += f", PCIe {number(pcie)} GB/s"
    return text


def _storage(config: Mapping[str, Any], notes: Mapping[str, str], varied: Mapping[str, str]) -> str:
    pools = value_at(config, "storage.pools")
    parts = []
    for pool, spec in (pools or {}).items() if isinstance(pools, Mapping) else ():
        key = f"storage.pools.{pool}.capacity_gb"
        capacity = spec.get("capacity_gb") if isinstance(spec, Mapping) else None
        if key in varied:
            size = varied[key]
        elif capacity is None:
            size = "unbounded"
        else:
            size = f"{bytes_text(float(capacity) * GB)}"
        label = POOL_LABELS.get(str(pool), str(pool))
        failing = spec.get("put_fail_prob") if isinstance(spec, Mapping) else None
        fail = f" ({float(failing) * 100:.3g} % of writes fail)" if failing else ""
        parts.append(f"{label} {size}{fail}")
    read = value_at(config, "storage.read_gbps")
    write = value_at(config, "storage.write_gbps")
    link = f"; read {number(read)} GB/s, write {number(write)} GB/s" if read is not None else ""
    return ("; ".join(parts) or "–") + link
