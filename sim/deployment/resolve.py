"""From what a scenario writes to every value it runs with, and where each value came from.

Values come in layers, lowest first: the schema's defaults, the SGLang release (`server.sglang`),
the storage backend (`storage.backend`), the GPU (`hardware.gpu`) or a calibration file
(`hardware.calibration`), the model preset (`model.preset`), then what SGLang derives from them
(chunk size and memory fraction from the GPU's memory, device pools from memory minus weights,
the host pool from the device pool, the host link from the io backend), the prefill and decode
speed of the GPU's roofline of the preset (`sim.deployment.compute`), and the switches SGLang's
argument handling makes (a host layout the io backend or the backend cannot use). What the
scenario writes wins over every layer. `Sources` maps each dotted key that did not come from
the schema's defaults to its layer, and `config.resolved.yaml` prints it beside the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.core.spec import KeyedError
from sim.deployment.compute import roofline
from sim.deployment.fitting import ServerMemory, what_fits
from sim.deployment.host_sizing import NoHostMemory, auto_ratio
from sim.deployment.profiles import (
    ChunkTier,
    backend_of,
    release_of,
)
from sim.deployment.releases import TIERS_SINCE_0_5_20
from sim.deployment.sizing import (
    NoRoomForPools,
    default_chunk_tokens,
    hicache_ratio_default,
    host_pages,
    kv_cell_bytes,
    rank_model,
)
from sim.model.pools import POOL_KINDS
from sim.model.presets import MODEL_PRESETS

USER = "user"
DEFAULT = "default"


@dataclass
class Sources:
    """Where each value came from: dotted key -> `user`, a profile's label (`sglang 0.5.20`,
    `backend mooncake`, `gpu h200`, `calibration FILE`, `preset gpt-oss-120b`), `derived: why`
    or `adjusted: why`; keys not listed have the schema's default."""

    of: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        return self.of.get(key, DEFAULT)

    def from_profiles(self) -> dict[str, str]:
        """Keys a profile, a derivation or an adjustment set (what `validate` prints)."""
        return {k: v for k, v in self.of.items() if not v.startswith(USER)}


def leaves(doc: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys of a document's values (a mapping's own values; lists are values)."""
    if not isinstance(doc, dict):
        return
    for key, value in doc.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            yield from leaves(value, dotted)
        else:
            yield dotted


def get(doc: dict[str, Any], key: str) -> Any:
    node: Any = doc
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def has(doc: dict[str, Any], key: str) -> bool:
    *path, leaf = key.split(".")
    node: Any = doc
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return isinstance(node, dict) and leaf in node


def put(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key, creating the sections it needs; a section the document writes as
    something other than a mapping (`device: 5`) is left as written, for validation to refuse."""
    *path, leaf = key.split(".")
    node = doc
    for part in path:
        if part not in node:
            node[part] = {}
        child = node[part]
        if not isinstance(child, dict):
            return
        node = child
    node[leaf] = value


def show_value(value: Any) -> str:
    """A value as the resolved configuration writes it (null, true, 0.16)."""
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


class Derivation:
    """What SGLang derives from a layered document, filled in where the document is silent.

    Values the document leaves out are read through `default` (the schema's defaults), so the
    rules below never keep a second copy of them."""

    def __init__(
        self,
        doc: dict[str, Any],
        model: dict[str, Any],
        sources: Sources,
        default: Callable[[str], Any],
        refusal: Callable[[str, Any], str | None] = lambda key, value: None,
    ) -> None:
        self.doc, self.model, self.sources, self.default = doc, model, sources, default
        self.refusal = refusal
        self.release = release_of(doc)
        self.tiers: tuple[ChunkTier, ...] = (
            TIERS_SINCE_0_5_20 if self.release is None else self.release.memory_tiers
        )

    def value(self, key: str) -> Any:
        return get(self.doc, key) if has(self.doc, key) else self.default(key)

    def fill(self, key: str, value: Any, why: str, kind: str = "derived") -> None:
        put(self.doc, key, value)
        if has(self.doc, key):
            self.sources.of[key] = f"{kind}: {why}"

    def run(self) -> list[KeyedError]:
        """Fill in place; returns what cannot be derived."""
        self.adjust_host_layout()
        memory = self.value("hardware.memory_mib")
        if _number(memory) and not has(self.doc, "compute.chunk_tokens"):
            server = "SGLang" if self.release is None else f"SGLang {self.release.name}"
            self.fill(
                "compute.chunk_tokens",
                default_chunk_tokens(self.tiers, memory),
                f"{server}'s chunked-prefill default for {memory:,} MiB",
            )
        self.host_link()
        self.compute_speed()
        problems: list[KeyedError] = []
        if not has(self.doc, "device.kv_pages") and _number(memory):
            try:
                self.device(memory)
            except NoRoomForPools as exc:
                problems.append(KeyedError("device.kv_pages", str(exc)))
            except KeyedError as exc:
                problems.append(exc)
        kv_pages = self.value("device.kv_pages")
        if not has(self.doc, "host.pages") and _number(kv_pages):
            try:
                ratio, note = self.host_ratio(kv_pages)
            except NoHostMemory as exc:
                problems.append(KeyedError("hardware.host_memory_gib", str(exc)))
                return problems
            self.fill(
                "host.pages",
                host_pages(kv_pages, self.page_size, ratio),
                f"host pool = {ratio:g} x the device KV pool (--hicache-ratio){note}",
            )
        self.host_swa_pool()
        return problems

    def host_ratio(self, kv_pages: int) -> tuple[float, str]:
        """`--hicache-ratio` as the server runs with it, and a note for its source: the one
        written; else the mode's default, lowered to fit the host's memory where the release
        auto-sizes (`host.auto_size`) and the scenario says how much the host has
        (`hardware.host_memory_gib`), where it fills `host.hicache_ratio` and says why."""
        ratio = self.value("host.hicache_ratio")
        if _number(ratio):
            return ratio, ""
        ratio = hicache_ratio_default(str(self.value("host.mode")))
        fraction, host_gib = (
            self.value("host.memory_fraction"),
            self.value("hardware.host_memory_gib"),
        )
        if self.value("host.auto_size") is not True or not _number(fraction):
            return ratio, ""
        if not _number(host_gib):
            return ratio, (
                "; this release lowers the ratio until the host pools fit the host's memory: "
                "give hardware.host_memory_gib to apply its rule"
            )
        ranks = self.value("server.tp_size")
        found = auto_ratio(
            requested=ratio,
            host_memory_gib=host_gib,
            ranks_per_host=ranks if _number(ranks) else 1,
            fraction=fraction,
            device_bytes=self.device_pool_bytes(kv_pages),
        )
        self.fill("host.hicache_ratio", round(found.ratio, 6), found.why(host_gib, ranks, fraction))
        return round(found.ratio, 6), ""

    def kv_cell_bytes(self) -> int:
        """A KV token's device bytes in this document's model (`sizing.kv_cell_bytes`)."""
        return kv_cell_bytes(
            {pool: self.pool_value(pool, "bytes_per_token") for pool in POOL_KINDS}
        )

    def device_pool_bytes(self, kv_pages: int) -> float:
        """One rank's device pools the host pools mirror: KV with its sidecars, SWA, and the
        Mamba states with their padding slot (`_estimate_hicache_bytes`)."""
        total = kv_pages * self.page_size * self.kv_cell_bytes()
        swa_pages, swa = self.value("device.swa_pages"), self.pool_value("swa", "bytes_per_token")
        if _number(swa_pages) and swa is not None:
            total += swa_pages * self.page_size * swa
        slots, state = self.value("device.mamba_slots"), self.pool_value("mamba", "state_bytes")
        if _number(slots) and state is not None:
            total += (slots + 1) * state
        return float(total)

    def compute_speed(self) -> None:
        """Prefill and decode speed from the roofline of the named GPU running the preset
        (`sim.deployment.compute`); a value the document writes wins, and says what the
        roofline would have given."""
        gpu, name = get(self.doc, "hardware.gpu"), get(self.model, "preset")
        tp = self.value("server.tp_size")
        if (
            not isinstance(gpu, str)
            or not isinstance(name, str)
            or self.refusal("server.tp_size", tp)
        ):
            return
        dtype = self.model.get("weights_dtype") if isinstance(self.model, dict) else None
        dtype = dtype if isinstance(dtype, str) else None
        found = roofline(gpu, name, tp, dtype) if isinstance(tp, int) else None
        if found is None:
            return
        step, (step_why, request_why, context_why) = found.step, found.step_whys()
        derived = [
            ("compute.prefill_tokens_per_s", found.prefill_tokens_per_s, found.prefill_why()),
            ("compute.decode_ms_per_token", found.decode_ms_per_token, found.decode_why()),
        ]
        step_keys = [
            ("compute.decode_step_ms", step.step_ms, step_why),
            ("compute.decode_ms_per_request", step.ms_per_request, request_why),
            ("compute.decode_ms_per_ki_context_tokens", step.ms_per_ki_context_tokens, context_why),
        ]
        constant = has(self.doc, "compute.decode_ms_per_token") and not any(
            has(self.doc, key) for key, _, _ in step_keys
        )
        for key, value, why in derived if constant else derived + step_keys:
            if not has(self.doc, key):
                self.fill(key, value, why)
            elif self.sources[key] == USER and get(self.doc, key) != value:
                self.sources.of[key] = f"{USER}; the {found.label} gives {show_value(value)}"

    def host_swa_pool(self) -> None:
        """buffer_only mode stages SWA windows through a host SWA pool that SGLang sizes as
        every host pool: `--hicache-ratio` x the device pool (`HostKVCache`)."""
        swa_pages = self.value("device.swa_pages")
        if (
            self.value("host.mode") != "buffer_only"
            or not isinstance(self.model, dict)
            or not isinstance(self.model.get("swa"), dict)
            or not _number(swa_pages)
            or has(self.doc, "host.swa_pages")
        ):
            return
        ratio = self.value("host.hicache_ratio")
        if not _number(ratio):
            ratio = hicache_ratio_default("buffer_only")
        self.fill(
            "host.swa_pages",
            host_pages(swa_pages, self.page_size, ratio),
            f"host SWA pool = {ratio:g} x the device SWA pool (--hicache-ratio)",
        )

    @property
    def page_size(self) -> int:
        page = self.model.get("page_size") if isinstance(self.model, dict) else None
        return page if _number(page) and isinstance(page, int) else self.default("model.page_size")

    def adjust_host_layout(self) -> None:
        """SGLang's own switches (`hicache_hook`): page_first_direct needs direct io, direct io
        cannot use page_first, and a backend that cannot take layer_first moves off it."""
        io, layout = self.value("host.io_backend"), self.value("host.mem_layout")
        why = "(SGLang switches it)"
        if layout == "page_first_direct" and io == "kernel":
            self.fill(
                "host.io_backend", "direct", f"page_first_direct needs direct io {why}", "adjusted"
            )
        elif layout == "page_first" and io == "direct":
            self.fill(
                "host.mem_layout",
                "page_first_direct",
                f"direct io cannot use page_first {why}",
                "adjusted",
            )
        backend = backend_of(self.doc)
        layout = self.value("host.mem_layout")
        if backend is not None and layout in backend.forbids_layouts:
            direct = self.value("host.io_backend") == "direct"
            self.fill(
                "host.mem_layout",
                "page_first_direct" if direct else "page_first",
                f"{backend.name} does not take {layout} {why}",
                "adjusted",
            )

    def host_link(self) -> None:
        """The host link of the io backend in use: the gather kernel's rate, or the bulk copy
        rate plus a per-copy overhead for direct io."""
        direct = self.value("host.io_backend") == "direct"
        rate_key = "bulk_gbps" if direct else "kernel_gbps"
        rate = self.value(f"hardware.{rate_key}")
        if not _number(rate):
            return
        if not has(self.doc, "host.pcie_gbps"):
            io = "direct" if direct else "kernel"
            self.fill("host.pcie_gbps", rate, f"hardware.{rate_key} ({io} io)")
        overhead = self.value("hardware.copy_overhead_us")
        if direct and not has(self.doc, "host.copy_overhead_us") and _number(overhead):
            self.fill(
                "host.copy_overhead_us",
                overhead,
                "hardware.copy_overhead_us (direct io: one copy per layer per page)",
            )

    def device(self, memory: int) -> None:
        """Device pools from GPU memory minus one rank's weights, as SGLang sizes them on one
        rank; the pools' bytes are already one rank's (the preset derived them at tp)."""
        name = self.model.get("preset") if isinstance(self.model, dict) else None
        preset = MODEL_PRESETS.get(name) if isinstance(name, str) else None
        if preset is None:
            raise KeyedError(
                "device.kv_pages",
                "required: give it, or name model.preset with hardware.gpu to size the device "
                "from the GPU's memory minus the model's weights",
            )
        self.check_sizing_inputs()
        tp = self.value("server.tp_size")
        chunk = self.value("compute.chunk_tokens")
        fraction = self.value("server.mem_fraction_static")
        server = ServerMemory(
            memory,
            self.tiers,
            chunk,
            fraction,
            self.page_size,
            self.value("server.swa_full_tokens_ratio"),
            self.value("server.mamba_full_memory_ratio"),
        )
        if fraction is None:
            fraction = server.fraction_at(tp)
            self.fill(
                "server.mem_fraction_static",
                fraction,
                f"SGLang's rule for {memory:,} MiB at tp {tp}",
            )
        written = self.model.get("weights_dtype")
        dtype = written if isinstance(written, str) and written in preset.checkpoints else None
        checkpoint = preset.checkpoint(dtype)
        rank = rank_model(
            tp_size=tp,
            weight_bytes=checkpoint.weight_bytes,
            kv_bytes_per_token=self.kv_cell_bytes(),
            swa_bytes_per_token=self.pool_value("swa", "bytes_per_token"),
            mamba_state_bytes=self.pool_value("mamba", "state_bytes"),
        )
        try:
            pools = server.pools(rank, tp)
        except NoRoomForPools as exc:
            kept = {p for p in ("swa", "mamba") if isinstance(self.model.get(p), dict)}
            hint = what_fits(preset, kept, server, tp, checkpoint.weights_dtype)
            raise NoRoomForPools(f"{exc}{hint}") from None
        weights = rank.weight_bytes / 2**30
        self.fill(
            "device.kv_pages",
            pools.kv_tokens // self.page_size,
            f"{fraction:.3f} of {memory:,} MiB less {weights:,.1f} GiB of {preset.source} "
            f"{dtype + ' ' if dtype else ''}weights a rank (tp {tp}): "
            f"{pools.pool_bytes / 2**30:,.1f} GiB of pools",
        )
        if pools.swa_tokens is not None and not has(self.doc, "device.swa_pages"):
            self.fill(
                "device.swa_pages",
                pools.swa_tokens // self.page_size,
                "SWA tokens = swa_full_tokens_ratio x full tokens",
            )
        if pools.mamba_slots is not None and not has(self.doc, "device.mamba_slots"):
            self.fill(
                "device.mamba_slots",
                pools.mamba_slots,
                "mamba_full_memory_ratio of the pools for Mamba states",
            )

    def check_sizing_inputs(self) -> None:
        """Every value the device sizing reads, refused (KeyedError naming it) where the
        schema would refuse it: a bad one must neither crash the arithmetic nor be replaced
        by SGLang's rule (a `mem_fraction_static` of 0 or `abc` used to be, silently)."""
        for key in SIZING_INPUTS:
            value = self.value(key)
            why = self.refusal(key, value)
            if why is not None:
                raise KeyedError(key, f"{why}; the device is sized from it")
        kv = self.model.get("kv") if isinstance(self.model, dict) else None
        if not isinstance(kv, dict):
            raise KeyedError(
                "model.kv", "must be a mapping with bytes_per_token to size the device from"
            )
        value = kv.get("bytes_per_token")
        why = self.refusal("model.kv.bytes_per_token", value)
        if why is not None or not _number(value):
            why = why or f"must be a number of bytes above 0 (got {show_value(value)})"
            raise KeyedError("model.kv.bytes_per_token", f"{why}; the device is sized from it")

    def pool_value(self, pool: str, key: str) -> Any:
        spec = self.model.get(pool) if isinstance(self.model, dict) else None
        value = spec.get(key) if isinstance(spec, dict) else None
        return value if _number(value) else None


SIZING_INPUTS = (
    "server.tp_size",
    "compute.chunk_tokens",
    "server.mem_fraction_static",
    "server.swa_full_tokens_ratio",
    "server.mamba_full_memory_ratio",
)
"""The server keys the device sizing reads, besides the model's bytes per token."""


def derive(
    doc: dict[str, Any],
    model: dict[str, Any],
    sources: Sources,
    default: Callable[[str], Any],
    refusal: Callable[[str, Any], str | None] = lambda key, value: None,
) -> list[KeyedError]:
    """Fill, in place, what SGLang derives and the document left out; returns what cannot be
    derived. `model` is the document's model section with its preset expanded; `default` gives
    the schema's default of a dotted key, and `refusal` why the schema refuses a value (None:
    it takes it)."""
    return Derivation(doc, model, sources, default, refusal).run()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
