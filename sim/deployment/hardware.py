"""GPUs as profiles: memory (which sizes the device pools and picks SGLang's chunk size) and the
host link (how fast host staging reaches the device, per SGLang's `--hicache-io-backend`).

The host-link figures are measured, not quoted: on one NVIDIA H200 (PCIe host link, pinned host
memory, 1 GiB buffers, CUDA events, medians) one bulk copy moves 55.3 GB/s host to device, a
gather kernel reading host memory directly (SGLang's `kernel` io) 50.8 GB/s at any chunk size,
and one `cudaMemcpyAsync` per chunk (SGLang's `direct` io) pays about 3-7 us per copy on top of
the bulk rate (`H200_LINK`). Other GPUs scale the link bandwidth by their PCIe generation and
keep the per-copy overhead unless measured: `hicache-sim calibrate` measures the same table on
the user's GPU and writes a file a scenario names as `hardware.calibration`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError

from sim.core.documents import read_document
from sim.core.registry import Registry
from sim.core.spec import (
    CopyOverheadUs,
    GpuMemoryMib,
    HostLinkGbps,
    PositiveFloat,
    PositiveInt,
    ScenarioError,
    Strict,
)

HARDWARE_KEYS = ("memory_mib", "kernel_gbps", "bulk_gbps", "copy_overhead_us")
"""The `hardware:` values a GPU profile or a calibration file supplies."""


class LinkSample(Strict):
    """One measured host-link row: how a path moved chunks of `chunk_bytes`."""

    path: Annotated[str, Field(pattern=r"^(bulk|kernel|direct)$")]
    """`bulk`: one copy of a large buffer; `kernel`: a kernel reading host memory directly;
    `direct`: one `cudaMemcpyAsync` per chunk."""
    chunk_bytes: PositiveInt
    h2d_gbps: PositiveFloat
    d2h_gbps: PositiveFloat


def per_copy_overhead_us(samples: Sequence[LinkSample], bulk_gbps: float) -> float:
    """What one copy of the `direct` path costs beyond moving its bytes at the bulk rate: the
    median over chunk sizes of (chunk time - chunk bytes / bulk rate), host to device (the
    direction loads take; device to host was within a microsecond on the H200)."""
    extra = [
        s.chunk_bytes / (s.h2d_gbps * 1e9) - s.chunk_bytes / (bulk_gbps * 1e9)
        for s in samples
        if s.path == "direct"
    ]
    if not extra:
        raise ValueError("no direct-path samples to fit a per-copy overhead")
    return max(0.0, statistics.median(extra) * 1e6)


def link_rates(samples: Sequence[LinkSample]) -> dict[str, float]:
    """`kernel_gbps`, `bulk_gbps` and `copy_overhead_us` from a measured table (host to device:
    the rates a load sees)."""
    bulk = max(s.h2d_gbps for s in samples if s.path == "bulk")
    kernel = statistics.median(s.h2d_gbps for s in samples if s.path == "kernel")
    return {
        "kernel_gbps": round(kernel, 2),
        "bulk_gbps": round(bulk, 2),
        "copy_overhead_us": round(per_copy_overhead_us(samples, bulk), 2),
    }


def _samples(path: str, rows: Sequence[tuple[int, float, float]]) -> tuple[LinkSample, ...]:
    return tuple(LinkSample(path=path, chunk_bytes=b, h2d_gbps=h, d2h_gbps=d) for b, h, d in rows)


KIB, MIB, GIB = 2**10, 2**20, 2**30
H200_LINK = (
    *_samples("bulk", [(GIB, 55.3, 55.2)]),
    *_samples("kernel", [(2304 * KIB, 50.8, 52.1)]),
    *_samples(
        "direct",
        [
            (4 * KIB, 0.94, 1.02),
            (16 * KIB, 2.32, 3.97),
            (64 * KIB, 15.3, 15.6),
            (256 * KIB, 33.5, 36.8),
            (2304 * KIB, 50.9, 52.0),
        ],
    ),
)
"""Measured on one NVIDIA H200 (PCIe Gen5 host link; pinned host memory, 1 GiB buffers, CUDA
events, medians). 16 KiB is one layer's K of 16 tokens at 1 KiB; 2.25 MiB a 64-token page of
gpt-oss-120b over all layers. The kernel path moved 50.7-50.9 / 52.0-52.2 GB/s at every chunk
size from 4 KiB to 2.25 MiB: one row, the middle of that range."""


@dataclass(frozen=True)
class GpuProfile:
    """A GPU: its memory as `nvidia-smi` reports it (SGLang's `get_nvgpu_memory_capacity`) and
    its host link."""

    name: str
    memory_mib: int
    memory_source: str
    link_samples: tuple[LinkSample, ...]
    link_scale: float
    """The link bandwidths are the samples' times this (PCIe generation against the H200)."""
    link_source: str
    sm_major: int
    """The compute capability's major version (9: Hopper, 10: Blackwell), which SGLang reads to
    pick defaults such as a DeepSeek DSA model's KV dtype."""

    @property
    def label(self) -> str:
        return f"gpu {self.name}"

    def values(self) -> dict[str, Any]:
        """The `hardware:` values this GPU supplies."""
        rates = link_rates(self.link_samples)
        return {
            "memory_mib": self.memory_mib,
            "kernel_gbps": round(rates["kernel_gbps"] * self.link_scale, 2),
            "bulk_gbps": round(rates["bulk_gbps"] * self.link_scale, 2),
            "copy_overhead_us": rates["copy_overhead_us"],
        }


GPUS: Registry[GpuProfile] = Registry("GPU")

_GEN5 = "PCIe Gen5 x16, measured on an H200"
_GEN4 = "PCIe Gen4 x16: the H200's Gen5 figures halved (not measured)"
GPUS.register(
    "h100",
    GpuProfile(
        "h100",
        81559,
        "nvidia-smi `memory.total` of an H100 80GB HBM3",
        H200_LINK,
        1.0,
        f"{_GEN5} (same link generation, not measured on an H100)",
        9,
    ),
)
GPUS.register(
    "h200",
    GpuProfile("h200", 143771, "nvidia-smi `memory.total` of an H200", H200_LINK, 1.0, _GEN5, 9),
)
GPUS.register(
    "b200",
    GpuProfile(
        "b200",
        183359,
        "nvidia-smi `memory.total` of a B200",
        H200_LINK,
        1.0,
        "PCIe Gen5 x16 to the host in HGX/DGX B200 (the chip supports Gen6): the H200's "
        "figures (not measured on a B200)",
        10,
    ),
)
GPUS.register(
    "a100-80g",
    GpuProfile(
        "a100-80g", 81920, "nvidia-smi `memory.total` of an A100 80GB", H200_LINK, 0.5, _GEN4, 8
    ),
)
GPUS.register(
    "l40s",
    GpuProfile("l40s", 46068, "nvidia-smi `memory.total` of an L40S", H200_LINK, 0.5, _GEN4, 8),
)


GPU_FORM_FACTORS = ("-sxm5", "-sxm4", "-sxm", "-hbm3", "-80gb")
"""Suffixes of a GPU's marketing name that name no other profile here (every profile is the
SXM or only board of its chip)."""
GPU_ALIASES = {"a100": "a100-80g", "a100-80gb": "a100-80g", "h100-80g": "h100"}


def gpu_named(name: str) -> str | None:
    """The `hardware.gpu` profile a GPU's written name means (`H200`, `H200-SXM`, `h100 sxm5`),
    or None when it names none."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    for suffix in GPU_FORM_FACTORS:
        key = key.removesuffix(suffix)
    key = GPU_ALIASES.get(key, key)
    return key if key in GPUS else None


class Calibration(Strict):
    """A file written by `hicache-sim calibrate`: one GPU's memory and measured host link."""

    gpu: str
    """The device's name as CUDA reports it."""
    memory_mib: GpuMemoryMib
    kernel_gbps: HostLinkGbps
    bulk_gbps: HostLinkGbps
    copy_overhead_us: CopyOverheadUs
    measured: str = ""
    """When, and with which torch and CUDA."""
    samples: list[LinkSample] = Field(default_factory=list)

    def values(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in HARDWARE_KEYS}


MAX_CALIBRATION_BYTES = 2**20
"""A calibration file is a few kilobytes; anything larger (or not a regular file) is refused
before it is read."""


def read_calibration(path: Path) -> Calibration:
    """A calibration file, or a ScenarioError naming it and its bad keys."""
    try:
        regular, size = path.is_file(), path.stat().st_size if path.is_file() else 0
    except OSError as exc:
        raise ScenarioError(str(path), None, f"cannot read file: {exc.strerror}") from None
    if not regular:
        raise ScenarioError(str(path), None, "calibration file not found (or not a file)")
    if size > MAX_CALIBRATION_BYTES:
        raise ScenarioError(str(path), None, f"{size:,} bytes is too large for a calibration file")
    doc = read_document(path)
    try:
        return Calibration.model_validate(doc)
    except ValidationError as exc:
        problems = [(".".join(map(str, e["loc"])) or None, e["msg"]) for e in exc.errors()]
        (key, message), *more = problems
        raise ScenarioError(str(path), key, message, more) from None
