"""The sections every report page shares: the deployment card, the scenario, provenance, and
the overload warning that comes first among the findings."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.core.units import number
from sim.outputs.card import deployment_card
from sim.outputs.html import (
    Section,
    details,
    esc,
    html_table,
    section,
)
from sim.outputs.overload import config_overload, overload_warning, study_overload
from sim.outputs.sizing import sizing_warnings
from sim.results.layout import TASKS


def overloaded(summary: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """A finding first when the run's server could not keep up (sim.outputs.overload)."""
    line = overload_warning(config_overload(summary, config))
    return [f"Warning: {line}"] if line else []


def study_overloaded(directory: Path, config: Mapping[str, Any], what: str) -> list[str]:
    line = study_overload(directory / TASKS, config, what)
    return [f"Warning: {line}"] if line else []


def header_comment(text: str | None) -> str:
    """The comment lines a YAML file opens with (a scenario's statement of what it models)."""
    lines = []
    for line in (text or "").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines).strip()


def scenario_section(
    name: str,
    config_text: str | None,
    config_label: str = "Resolved configuration (config.resolved.yaml)",
    extra: Sequence[str] = (),
) -> Section:
    parts = [f"<p>Scenario <strong>{esc(name)}</strong>.</p>"]
    comment = header_comment(config_text)
    if comment:
        parts.append(f'<div class="comment">{esc(comment)}</div>')
    parts += extra
    if config_text:
        parts.append(details(config_label, config_text))
    return section("scenario", "Scenario", *parts)


def deployment_section(
    config: Mapping[str, Any], varied: Mapping[str, str] | None = None
) -> Section | None:
    """The deployment card (sim.outputs.card) of a resolved configuration, first on the page;
    none for a directory written before sweeps and searches kept their configuration."""
    if not config:
        return None
    rows = deployment_card(config, varied)
    rows += [("warning", warning) for warning in sizing_warnings(config)]
    return section(
        "deployment",
        "Deployment",
        "<p>What was simulated (config.resolved.yaml: presets, profiles and derived sizes "
        "resolved).</p>",
        html_table("deployment", ["item", "value"], rows),
    )


def provenance_section(
    meta: Mapping[str, Any], extra: Sequence[tuple[str, Any]] = ()
) -> Section | None:
    """Command, time, seed, versions and machine of what wrote the directory."""
    rows: list[tuple[str, Any]] = []
    command = meta.get("command")
    if isinstance(command, list):
        rows.append(("command", shlex.join(str(c) for c in command)))
    for key in ("written_utc", "seed", "wall_s", "build"):
        if key in meta:
            rows.append((key, meta[key]))
    rows += extra
    versions = meta.get("versions")
    if isinstance(versions, dict):
        rows.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items())))
    machine = meta.get("machine")
    if isinstance(machine, dict):
        rows.append(("machine", " ".join(str(v) for v in machine.values())))
    if not rows:
        return None
    body = [(k, number(v) if isinstance(v, int | float) else str(v)) for k, v in rows]
    return section("provenance", "Provenance", html_table("provenance", ["item", "value"], body))
