"""The model's settings for a release, read from the simulator's own release and backend
profiles (`sim/deployment/`), so that the suite checks the profiles a scenario naming that
release runs, and a wrong profile value fails against SGLang's code like a wrong rule."""

from __future__ import annotations

from typing import Any

from sim.deployment.profiles import SGLANG_RELEASES, STORAGE_BACKENDS
from sim.scenario.sections import PrefetchSpec


def profile(release: str, backend: str | None = None) -> dict[str, Any]:
    """Every value the release's profile sets (and the backend's, as that release runs it)."""
    server = SGLANG_RELEASES[release]
    values = {s.key: s.value for s in server.settings}
    if backend is not None:
        values.update({s.key: s.value for s in STORAGE_BACKENDS[backend].settings_for(server)})
    return values


def heal_after_deadline(release: str) -> bool:
    """The release's `prefetch.heal_after_deadline`, the schema's default where it sets none."""
    default = PrefetchSpec.model_fields["heal_after_deadline"].default
    return bool(profile(release).get("prefetch.heal_after_deadline", default))
