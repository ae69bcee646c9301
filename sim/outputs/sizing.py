"""Resolved sizes, and the sizes that are valid but cannot work.

A size given in bytes is right for one model and wrong for the next: `device.swa_pages: 4GiB`
holds 910 of gpt-oss-120b's 128-token windows, and after `--set model.preset=gemma-3-27b` a
handful of Gemma's 1,024-token ones. The schema cannot refuse that (the pool is a legal size),
so `validate` prints what every size resolved to, and `validate`, `run` and the report warn
where an aux pool is too small to do its job:

- a device or host SWA pool that holds fewer than MIN_WINDOWS sliding windows, or a Mamba pool
  fewer than MIN_WINDOWS states: a request needs its window (or state) on the device to run and
  a prefetch needs one on the host, so a pool that small serializes requests and keeps almost
  nothing for reuse;
- a bounded storage aux pool smaller than one request's objects (a window's pages, or one
  Mamba state): nothing written to it can ever be read back whole;
- a storage backend that, in the scenario's release, cannot serve the model from storage at
  all (`sim.deployment.profiles.serving_warnings`).

All of it is computed from a resolved scenario document (`scenario_document`, or the mapping
of `config.resolved.yaml`), so a report can say it of a run long after it ran.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sim.core.documents import value_at
from sim.core.units import GB, bytes_text, number
from sim.deployment.profiles import serving_warnings
from sim.scenario.sizes import size_notes

MIN_WINDOWS = 16
"""Fewer sliding windows (or Mamba states) than this in a device or host aux pool is warned of.
Four would be the least a pool needs to run a few requests at once; sixteen also catches a
4 GiB SWA pool sized for gpt-oss-120b's 128-token windows (910 of them) and then given to
gemma-3-27b, whose 1,024-token windows (416 KiB a token) fit 9.8 times: valid, yet on the
conversation trace storage then restored 2.5 % of prompt tokens instead of about 25 %."""


def _window_pages(doc: Mapping[str, Any]) -> int | None:
    window, page = value_at(doc, "model.swa.window_tokens"), value_at(doc, "model.page_size") or 64
    if not isinstance(window, int) or window <= 0:
        return None
    return math.ceil(window / page)


def resolved_sizes(doc: Mapping[str, Any]) -> list[str]:
    """One line per size key with a value: the value in its unit, in tokens and bytes, and for
    an aux pool how many windows (or states) it holds."""
    notes = size_notes(dict(doc))
    host_swa = value_at(doc, "host.swa_pages")
    per_token = value_at(doc, "model.swa.bytes_per_token")
    page = value_at(doc, "model.page_size") or 64
    if isinstance(host_swa, int) and isinstance(per_token, int | float):
        notes["host.swa_pages"] = (
            f"{host_swa * page:,} tokens, {bytes_text(host_swa * page * per_token)}"
        )
    lines = []
    for key, note in notes.items():
        line = f"{key}: {number(value_at(doc, key))} ({note})"
        held_text = held(doc, key)
        if held_text:
            line += f" = {held_text}"
        lines.append(line)
    return lines


def held(doc: Mapping[str, Any], key: str) -> str:
    """What an aux pool's size holds: windows of the model's SWA, or Mamba states."""
    value = value_at(doc, key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    if key in ("device.swa_pages", "host.swa_pages"):
        pages = _window_pages(doc)
        if pages:
            window = value_at(doc, "model.swa.window_tokens")
            return f"{value / pages:,.1f} windows of {number(window)} tokens"
    if key == "device.mamba_slots":
        return f"{number(value)} Mamba states"
    return ""


def sizing_warnings(doc: Mapping[str, Any]) -> list[str]:
    """What in a resolved document is a legal size that cannot work (see the module)."""
    warnings = []
    pages = _window_pages(doc)
    window = value_at(doc, "model.swa.window_tokens")
    for key in ("device.swa_pages", "host.swa_pages"):
        value = value_at(doc, key)
        if pages and isinstance(value, int) and value / pages < MIN_WINDOWS:
            warnings.append(
                f"{key} is {number(value)} pages = {value / pages:.1f} windows of "
                f"{number(window)} tokens (fewer than {MIN_WINDOWS}): requests will wait for "
                "window space and almost no SWA state survives for reuse; size it in tokens "
                "or windows of this model"
            )
    slots = value_at(doc, "device.mamba_slots")
    mamba = isinstance(value_at(doc, "model.mamba"), Mapping)
    if mamba and isinstance(slots, int) and slots < MIN_WINDOWS:
        warnings.append(
            f"device.mamba_slots is {number(slots)} (fewer than {MIN_WINDOWS} Mamba "
            "states): requests will wait for a slot and almost none survives for reuse"
        )
    for pool, need in _request_objects(doc).items():
        capacity = value_at(doc, f"storage.pools.{pool}.capacity_gb")
        if isinstance(capacity, int | float) and capacity * GB < need:
            warnings.append(
                f"storage.pools.{pool}.capacity_gb is {bytes_text(capacity * GB)}, below one "
                f"request's {pool} objects ({bytes_text(need)}): nothing written there can be "
                "read back whole"
            )
    return warnings + serving_warnings(doc)


def _request_objects(doc: Mapping[str, Any]) -> dict[str, float]:
    """Bytes of the aux objects one request writes: a window's pages of SWA, one Mamba state."""
    out: dict[str, float] = {}
    pages, page = _window_pages(doc), value_at(doc, "model.page_size") or 64
    per_token = value_at(doc, "model.swa.bytes_per_token")
    if pages and isinstance(per_token, int | float):
        out["swa"] = pages * page * per_token
    state = value_at(doc, "model.mamba.state_bytes")
    if isinstance(state, int | float):
        out["mamba"] = float(state)
    return out
