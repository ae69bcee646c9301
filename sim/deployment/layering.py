"""The profiles a scenario names, layered under what it writes: its SGLang release's settings,
its storage backend's (as that release has them) and its GPU's or calibration's figures, each
value's source recorded (`Sources`): the file's own, a profile's, or the file's over a profile
that has another value. What SGLang then derives is `sim.deployment.resolve`'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.core.documents import layered
from sim.core.spec import ScenarioError
from sim.deployment.hardware import GPUS, gpu_named, read_calibration
from sim.deployment.profiles import SGLangRelease, backend_of, first_release_setting, release_of
from sim.deployment.resolve import USER, Sources, get, has, leaves, put, show_value


@dataclass
class Layered:
    """A document with the profiles it names layered under it."""

    doc: dict[str, Any]
    sources: Sources
    problems: list[tuple[str, str]]


def layer_profiles(written: dict[str, Any]) -> Layered:
    """The release, backend and hardware layers under what the document writes."""
    _canonical_gpu(written)
    sources = Sources({key: USER for key in leaves(written)})
    problems: list[tuple[str, str]] = []
    layers: list[tuple[str, dict[str, Any]]] = []
    release, backend = release_of(written), backend_of(written)
    if release is not None:
        layers.append((release.label, {s.key: s.value for s in release.settings}))
    if backend is not None:
        layers.append((backend.label, {s.key: s.value for s in backend.settings_for(release)}))
    hardware = _hardware_layer(written, problems)
    if hardware is not None:
        layers.append(hardware)
    below: dict[str, Any] = {}
    for label, values in layers:
        for key, value in values.items():
            put(below, key, value)
            if not has(written, key):
                sources.of[key] = label
            elif get(written, key) != value:
                sources.of[key] = f"{USER}; {label} has {show_value(value)}"
    if release is not None:
        _note_settings_the_release_lacks(written, release, sources)
    return Layered(layered(below, written), sources, problems)


def _canonical_gpu(written: dict[str, Any]) -> None:
    """`hardware.gpu` as a person writes it (`H200`, `H200-SXM`) becomes the profile's name."""
    section = written.get("hardware")
    name = section.get("gpu") if isinstance(section, dict) else None
    if isinstance(name, str) and name not in GPUS and gpu_named(name) is not None:
        section["gpu"] = gpu_named(name)  # type: ignore[index]


def _note_settings_the_release_lacks(
    written: dict[str, Any], release: SGLangRelease, sources: Sources
) -> None:
    """A key a later release sets and this one has no such setting for (0.5.18 with
    `prefetch.retry.deadline_cancels`): the value is a what-if, and the note says so."""
    own = {s.key for s in release.settings}
    for key in leaves(written):
        since = None if key in own else first_release_setting(key)
        if since is not None and sources[key] == USER:
            why = f"no such setting (the releases from {since} on set it)"
            sources.of[key] = f"{USER}; {release.label} has {why}"


def _hardware_layer(
    written: dict[str, Any], problems: list[tuple[str, str]]
) -> tuple[str, dict[str, Any]] | None:
    section = written.get("hardware")
    if not isinstance(section, dict):
        return None
    calibration = section.get("calibration")
    if isinstance(calibration, str):
        path = Path(calibration)
        try:
            found = read_calibration(path)
        except ScenarioError as exc:
            problems.append(("hardware.calibration", str(exc)))
            return None
        values = {f"hardware.{k}": v for k, v in found.values().items()}
        return f"calibration {path.name}", values
    name = section.get("gpu")
    gpu = GPUS.get(name) if isinstance(name, str) else None
    if gpu is None:
        return None
    return gpu.label, {f"hardware.{k}": v for k, v in gpu.values().items()}
