"""Deployment profiles: what a named SGLang release and a named storage backend set, with evidence.

A finding holds for a deployment, not for a mechanism: the same heal rule can loop or not
depending on which SGLang release the server runs, which backend answers its `exists` calls and
how its host memory is used. A profile is a set of scenario defaults, each a `Setting` that
carries the released code it was read from (`release: file:function`); `server.sglang` and
`storage.backend` select one each, and what a scenario writes itself always wins
(`sim.deployment.resolve` layers them and records where every value came from). A backend's
behaviour can change between releases (the file backend's hit query intersects from 0.5.23 on),
so a backend's settings are read for the release the scenario names.

The releases are in `sim.deployment.releases`, the backends in `sim.deployment.backends`; this
module holds what they are made of and how a scenario's names find them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

from sim.core.registry import Registry
from sim.model.pools import KV, POOL_KINDS
from sim.model.storage import no_hit_reason

CUSTOM = "custom"
"""The name that selects no profile: the scenario's own keys and the schema defaults only."""
LATEST = "latest"
"""The name of the newest release the model has a profile for."""


@dataclass(frozen=True)
class Setting:
    """One default a profile sets: a dotted scenario key, its value and where SGLang says so."""

    key: str
    value: Any
    evidence: str


@dataclass(frozen=True)
class ChunkTier:
    """One row of SGLang's memory-tier table (`handle_gpu_memory_settings`): GPUs with less
    than `below_mib` of memory get this chunked-prefill size and CUDA-graph batch bound."""

    below_mib: float
    chunk_tokens: int
    decode_max_bs: int
    decode_max_bs_tp4: int
    """The bound at tensor parallelism of 4 or more."""


@dataclass(frozen=True)
class SGLangRelease:
    """An SGLang release: the HiCache defaults it ships and the combinations it refuses."""

    name: str
    """The version, `0.5.19`."""
    summary: str
    """What sets the release apart, in a line (the docs' table of releases)."""
    settings: tuple[Setting, ...]
    buffer_only_pools: frozenset[str]
    """Pool kinds `init_hicache` accepts in `buffer_only` host mode (empty: no such mode)."""
    memory_tiers: tuple[ChunkTier, ...]
    """The chunked-prefill and CUDA-graph defaults by GPU memory (`hardware.memory_mib`)."""

    @property
    def label(self) -> str:
        return f"sglang {self.name}"

    @property
    def order(self) -> tuple[int, ...]:
        return release_order(self.name)


def release_order(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class StorageBackend:
    """A storage backend as SGLang's client sees it: how `batch_exists_v2` folds the pools,
    whether a write of a stored key is skipped, and how the backend evicts."""

    name: str
    code: str
    settings: tuple[Setting, ...]
    forbids_layouts: tuple[str, ...] = field(default=())
    """Host layouts SGLang switches away from for this backend (`hicache_hook`)."""
    changes: tuple[tuple[str, Setting], ...] = field(default=())
    """(release, setting): from that release on the setting replaces the one of the same key
    (oldest first)."""
    since: str = "0.5.18"
    """The first release whose `StorageBackendFactory` registers the backend
    (mem_cache/storage/backend_factory.py); an older one refuses the name."""

    @property
    def label(self) -> str:
        return f"backend {self.name}"

    def settings_for(self, release: SGLangRelease | None) -> tuple[Setting, ...]:
        """The settings of this backend in `release` (none named: the newest release's)."""
        by_key = {s.key: s for s in self.settings}
        for since, setting in self.changes:
            if release is None or release.order >= release_order(since):
                by_key[setting.key] = setting
        return tuple(by_key.values())


SGLANG_RELEASES: Registry[SGLangRelease] = Registry("SGLang release")
"""Every name `server.sglang` accepts: the versions, and aliases (`latest`, `pr36386`)."""
STORAGE_BACKENDS: Registry[StorageBackend] = Registry("storage backend")

RETIRED_NAMES = {
    "main": "the simulator's name for SGLang's newest stored source, which no release pins",
    "v0.5.20": "the simulator's earlier name for a profile read from unreleased source",
}
"""Names `server.sglang` once accepted and now refuses, with why (a did-you-mean follows)."""


def release_names() -> tuple[str, ...]:
    """The release versions, oldest first, without aliases."""
    versions = {release.name for release in SGLANG_RELEASES.values()}
    return tuple(sorted(versions, key=release_order))


def unknown_release_message(name: str) -> str:
    """What `server.sglang` says about a name that is not a release: which releases exist, and
    the closest one."""
    versions = release_names()
    aliases = [
        f"{alias} ({release.name})"
        for alias, release in SGLANG_RELEASES.items()
        if alias not in versions
    ]
    known = ", ".join((*versions, *aliases, CUSTOM))
    why = RETIRED_NAMES.get(name)
    if why is not None:
        head = f"{name!r} is no longer accepted ({why}): a scenario names the release it models"
    else:
        head = f"{name!r} is not an SGLang release the model knows"
    guess = get_close_matches(name.removeprefix("v"), versions, n=1, cutoff=0.6)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    if name == "main":
        hint = f"; did you mean {versions[-1]!r} (latest)?"
    return f"{head}; choose one of {known}{hint}"


def release_of(doc: dict[str, Any]) -> SGLangRelease | None:
    """The release a raw document names (None for none, `custom` or an unknown name)."""
    return _named(SGLANG_RELEASES, doc, "server", "sglang")


def backend_of(doc: dict[str, Any]) -> StorageBackend | None:
    return _named(STORAGE_BACKENDS, doc, "storage", "backend")


def _named(registry: Registry[Any], doc: dict[str, Any], section: str, key: str) -> Any:
    part = doc.get(section)
    name = part.get(key) if isinstance(part, dict) else None
    return registry.get(name) if isinstance(name, str) else None


def refusals(
    release: SGLangRelease, pools: tuple[str, ...], host_mode: str
) -> Iterator[tuple[str, str]]:
    """(key, message) for each combination the release's server refuses to start with."""
    if host_mode != "buffer_only":
        return
    if not release.buffer_only_pools:
        later = _first_release(lambda other: bool(other.buffer_only_pools))
        yield (
            "host.mode",
            f"SGLang {release.name} has no buffer_only host memory mode "
            f"(--hicache-host-memory-mode came in {later})",
        )
        return
    refused = [pool for pool in pools if pool not in release.buffer_only_pools]
    if not refused:
        return
    allowing = _first_release(lambda other: set(refused) <= other.buffer_only_pools)
    later = f"; allowed from {allowing}" if allowing else ""
    if all(POOL_KINDS[pool].rides_on_kv for pool in refused):
        why = (
            "validate_buffer_only_stack: '--hicache-host-memory-mode buffer_only does not "
            "support sidecar storage pools'"
        )
    else:
        why = (
            "init_hicache: '--hicache-host-memory-mode buffer_only supports only FULL/SWA "
            "unified trees'"
        )
    yield (
        "host.mode",
        f"SGLang {release.name} refuses buffer_only host memory with {_a(refused[0])} "
        f"{', '.join(refused)} "
        f"pool ({why}){later}",
    )


def backend_refusal(release: SGLangRelease, backend: StorageBackend) -> str | None:
    """Why the release's server refuses the backend's name (it does not register it yet)."""
    if release.order >= release_order(backend.since):
        return None
    return (
        f"{backend.name} came in {backend.since}: SGLang {release.name}'s "
        "StorageBackendFactory does not register it (mem_cache/storage/backend_factory.py)"
    )


def serving_warnings(doc: Mapping[str, Any]) -> list[str]:
    """What `validate` warns of a resolved document whose backend, in its release, cannot
    serve the model from storage (its hit query answers nothing, or raises for this model)."""
    storage, prefetch, model = (doc.get(part) for part in ("storage", "prefetch", "model"))
    backend = backend_of(dict(doc))
    kind = storage.get("hit_query") if isinstance(storage, Mapping) else None
    if backend is None or not isinstance(kind, str) or not isinstance(model, Mapping):
        return []
    pools = [name for name in POOL_KINDS if name == KV or isinstance(model.get(name), Mapping)]
    error = prefetch.get("hit_query_error") if isinstance(prefetch, Mapping) else None
    reason = no_hit_reason(kind, pools, str(error or "stop"))
    if reason is None:
        return []
    release = release_of(dict(doc))
    server = "the newest SGLang" if release is None else f"SGLang {release.name}"
    return [f"storage.backend {backend.name} in {server} cannot serve this model: {reason}"]


def first_release_setting(key: str) -> str | None:
    """The oldest release whose profile sets `key` (None: no release does)."""
    return _first_release(lambda other: any(s.key == key for s in other.settings))


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _first_release(accepts: Any) -> str | None:
    for name in release_names():
        if accepts(SGLANG_RELEASES[name]):
            return name
    return None
