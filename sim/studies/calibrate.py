"""`hicache-sim calibrate`: measure a CUDA GPU's host link the way `H200_LINK` was measured and
write a hardware profile a scenario names as `hardware: {calibration: FILE}`.

The measuring sits behind `Measurer` so that the table, the fit and the file are tested without
a GPU; `TorchMeasurer` is the only implementation that touches one, and imports torch only when
built (torch is the optional `calibrate` extra).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import yaml

from sim.deployment.hardware import GIB, H200_LINK, KIB, MIB, Calibration, LinkSample, link_rates

DIRECTIONS = ("h2d", "d2h")
KERNEL_CHUNKS_BYTES = (4 * KIB, 64 * KIB, 2304 * KIB)
"""The kernel path moved the same rate at every chunk size on the H200: three sizes suffice."""
DIRECT_CHUNKS_BYTES = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 2304 * KIB)
"""`H200_LINK`'s direct rows: 16 KiB is one layer's K of a 16-token page, 2.25 MiB a 64-token
page of gpt-oss-120b over all layers."""
MAX_COPIES = 16_384
"""Per direct-path measurement: keeps the 4 KiB row (a quarter million chunks in 1 GiB) to a
fraction of a second, so the whole calibration takes well under a minute."""

_H200 = link_rates(H200_LINK)
KERNEL_TO_BULK = _H200["kernel_gbps"] / _H200["bulk_gbps"]
"""The H200's kernel-path rate over its bulk rate (50.8 / 55.3): the estimate when this machine
cannot run a kernel over host memory."""


class CalibrationUnavailable(RuntimeError):
    """This machine cannot calibrate: no torch, or torch without a usable CUDA device."""


class Measurer(Protocol):
    """One GPU's host link, measured in GB/s (1e9 bytes/s); `direction` is "h2d" or "d2h"."""

    def device_name(self) -> str:
        """The device's name as CUDA reports it."""
        ...

    def memory_mib(self) -> int:
        """Device memory in MiB, as nvidia-smi's `memory.total` would report it."""
        ...

    def describe(self) -> str:
        """Software versions and method, for the file's `measured` (empty if unknown)."""
        ...

    def bulk(self, direction: str) -> float:
        """One copy of a large buffer."""
        ...

    def direct(self, chunk_bytes: int, direction: str) -> float:
        """One copy per chunk (SGLang's `direct` io)."""
        ...

    def kernel(self, chunk_bytes: int, direction: str) -> float | None:
        """A kernel gathering chunks straight from host memory (SGLang's `kernel` io); None
        when this machine cannot run one over host memory."""
        ...


class TorchMeasurer:
    """Pinned host memory, a device buffer of the same size, CUDA events around each repetition,
    the median of `repeats` after one warm-up: the method behind `H200_LINK`."""

    def __init__(self, device_index: int = 0, buffer_bytes: int = GIB, repeats: int = 5) -> None:
        try:
            import torch
        except (ImportError, OSError) as exc:
            raise CalibrationUnavailable(f"cannot import torch ({exc})") from None
        if not torch.cuda.is_available():
            raise CalibrationUnavailable(f"torch {torch.__version__} sees no CUDA device")
        count = torch.cuda.device_count()
        if not 0 <= device_index < count:
            raise CalibrationUnavailable(
                f"no CUDA device {device_index} (this machine has {count})"
            )
        self._torch: Any = torch
        self.index = device_index
        self.repeats = repeats
        self.buffer_bytes = buffer_bytes
        self.kernel_problem = ""
        torch.cuda.set_device(device_index)
        self.device = torch.device("cuda", device_index)
        self.host = torch.empty(buffer_bytes, dtype=torch.uint8, pin_memory=True)
        self.dev = torch.empty(buffer_bytes, dtype=torch.uint8, device=self.device)
        self._host_alias: Any = None

    def device_name(self) -> str:
        return str(self._torch.cuda.get_device_name(self.index))

    def memory_mib(self) -> int:
        """`total_memory` in MiB. nvidia-smi reports slightly more (it counts memory the CUDA
        context reserves), so a calibrated size is a little conservative."""
        return int(self._torch.cuda.get_device_properties(self.index).total_memory // MIB)

    def describe(self) -> str:
        torch = self._torch
        return (
            f"torch {torch.__version__}, CUDA {torch.version.cuda}; pinned host memory, "
            f"{self.buffer_bytes / GIB:g} GiB buffers, CUDA events, median of {self.repeats}"
        )

    def bulk(self, direction: str) -> float:
        dst, src = self._pair(direction, self.dev, self.host)
        seconds = self._median_s(lambda: dst.copy_(src, non_blocking=True))
        return self.buffer_bytes / seconds / 1e9

    def direct(self, chunk_bytes: int, direction: str) -> float:
        """At most MAX_COPIES copies; the views are cut before timing so that the loop issues
        copies and nothing else."""
        n = min(self.buffer_bytes // chunk_bytes, MAX_COPIES)
        dev = self.dev[: n * chunk_bytes].view(n, chunk_bytes)
        host = self.host[: n * chunk_bytes].view(n, chunk_bytes)
        dst, src = self._pair(direction, dev, host)
        pairs = list(zip(dst.unbind(0), src.unbind(0), strict=True))

        def copies() -> None:
            for d, s in pairs:
                d.copy_(s, non_blocking=True)

        return n * chunk_bytes / self._median_s(copies) / 1e9

    def kernel(self, chunk_bytes: int, direction: str) -> float | None:
        """`index_select` from (h2d) or `index_copy_` into (d2h) a CUDA tensor that aliases the
        pinned host buffer: under unified virtual addressing a pinned host pointer is valid on
        the device, which is what SGLang's kernel io relies on. Anything that fails means None."""
        if self.kernel_problem:
            return None
        try:
            torch = self._torch
            alias = self._alias()
            n = self.buffer_bytes // chunk_bytes
            words = chunk_bytes // 8
            host_rows = alias[: n * words].view(n, words)
            dev_rows = self.dev.view(torch.int64)[: n * words].view(n, words)
            index = torch.randperm(n, device=self.device)

            def gather() -> None:
                if direction == "h2d":
                    torch.index_select(host_rows, 0, index, out=dev_rows)
                else:
                    host_rows.index_copy_(0, index, dev_rows)

            return n * chunk_bytes / self._median_s(gather) / 1e9
        except Exception as exc:
            self.kernel_problem = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            return None

    def _alias(self) -> Any:
        """The pinned host buffer as a CUDA int64 tensor (8-byte loads, as a copy kernel would
        use), through `__cuda_array_interface__`; refused unless it really is the same memory
        on this device."""
        if self._host_alias is None:
            torch = self._torch
            ptr = self.host.data_ptr()
            iface = _CudaArray(ptr, self.buffer_bytes // 8)
            alias = torch.as_tensor(iface, device=self.device)
            if alias.data_ptr() != ptr or alias.device != self.device:
                raise RuntimeError("torch copied the host buffer instead of aliasing it")
            self._host_alias = alias
        return self._host_alias

    def _median_s(self, work: Callable[[], Any]) -> float:
        torch = self._torch
        work()
        torch.cuda.synchronize(self.device)
        times_s = []
        for _ in range(self.repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            times_s.append(start.elapsed_time(end) / 1e3)
        return float(statistics.median(times_s))

    @staticmethod
    def _pair(direction: str, dev: Any, host: Any) -> tuple[Any, Any]:
        """(destination, source) for a direction."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
        return (dev, host) if direction == "h2d" else (host, dev)


class _CudaArray:
    """A device pointer dressed as a CUDA array (version 3 of the interface) of int64."""

    def __init__(self, ptr: int, length: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (length,),
            "typestr": "<i8",
            "data": (ptr, False),
            "strides": None,
            "version": 3,
        }


def open_measurer(device_index: int = 0, repeats: int = 5) -> Measurer:
    """The measurer the command uses; raises CalibrationUnavailable without torch or CUDA.
    Tests replace it."""
    return TorchMeasurer(device_index=device_index, repeats=repeats)


def calibrate(measurer: Measurer) -> Calibration:
    """Measure the `H200_LINK` table on this GPU and fit the scenario's hardware values from it.
    The kernel path is measured last: a fault there cannot spoil the other rows."""
    gpu, memory_mib = measurer.device_name(), measurer.memory_mib()
    bulk = _row("bulk", GIB, measurer.bulk)
    direct = [_row("direct", c, partial(measurer.direct, c)) for c in DIRECT_CHUNKS_BYTES]
    kernel = _kernel_rows(measurer)
    samples = [bulk, *kernel, *direct]
    notes = [datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), measurer.describe()]
    if kernel:
        fitted = link_rates(samples)
    else:
        estimate = LinkSample(
            path="kernel",
            chunk_bytes=bulk.chunk_bytes,
            h2d_gbps=bulk.h2d_gbps * KERNEL_TO_BULK,
            d2h_gbps=bulk.d2h_gbps * KERNEL_TO_BULK,
        )
        fitted = link_rates([*samples, estimate])
        why = getattr(measurer, "kernel_problem", "") or "no kernel over host memory here"
        notes.append(
            f"kernel io not measured: {why}; kernel_gbps is bulk × {KERNEL_TO_BULK:.3f}, "
            "the H200's kernel/bulk ratio"
        )
    return Calibration(
        gpu=gpu,
        memory_mib=memory_mib,
        measured="; ".join(n for n in notes if n),
        samples=samples,
        **fitted,
    )


def _row(path: str, chunk_bytes: int, measure: Callable[[str], float]) -> LinkSample:
    """One row, both directions; a rate that is not a positive number is a failed measurement."""
    rates = {d: measure(d) for d in DIRECTIONS}
    for direction, rate in rates.items():
        if not _usable(rate):
            raise RuntimeError(f"{path} {_size(chunk_bytes)} {direction}: measured {rate} GB/s")
    return LinkSample(
        path=path,
        chunk_bytes=chunk_bytes,
        h2d_gbps=_sig3(rates["h2d"]),
        d2h_gbps=_sig3(rates["d2h"]),
    )


def _kernel_rows(measurer: Measurer) -> list[LinkSample]:
    """The kernel rows, or none at all if any direction or size could not be measured (a
    partial table would fit a rate from whichever sizes happened to work)."""
    rows = []
    for chunk in KERNEL_CHUNKS_BYTES:
        rates = {d: measurer.kernel(chunk, d) for d in DIRECTIONS}
        h2d, d2h = rates["h2d"], rates["d2h"]
        if h2d is None or d2h is None or not (_usable(h2d) and _usable(d2h)):
            return []
        rows.append(
            LinkSample(path="kernel", chunk_bytes=chunk, h2d_gbps=_sig3(h2d), d2h_gbps=_sig3(d2h))
        )
    return rows


def _usable(rate: float) -> bool:
    return math.isfinite(rate) and rate > 0


def _sig3(rate_gbps: float) -> float:
    """Three significant figures, as `H200_LINK` is written (and never rounded to zero)."""
    return float(f"{rate_gbps:.3g}")


def _size(chunk_bytes: int) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if chunk_bytes >= size:
            return f"{chunk_bytes / size:g} {unit}"
    return f"{chunk_bytes} B"


def default_out(device_name: str) -> Path:
    """`hardware-<device name>.yaml` in the current directory, the name lower-cased with runs
    of anything but letters and digits made one hyphen (`NVIDIA H200` → hardware-nvidia-h200)."""
    return Path(f"hardware-{slug(device_name, 'gpu')}.yaml")


def slug(text: str, fallback: str) -> str:
    """`text` lower-cased with runs of anything but letters and digits made one hyphen, at
    most 100 characters: a safe part of a file name (`fallback` if nothing is left)."""
    return (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or fallback)[:100]


def format_calibration(cal: Calibration) -> str:
    """The measured table and the fitted values, for the console."""
    rows = [("path", "chunk", "h2d GB/s", "d2h GB/s")]
    rows += [
        (s.path, _size(s.chunk_bytes), f"{s.h2d_gbps:g}", f"{s.d2h_gbps:g}") for s in cal.samples
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{p:<{widths[0]}}  {c:<{widths[1]}}  {h:>{widths[2]}}  {d:>{widths[3]}}"
        for p, c, h, d in rows
    ]
    return "\n".join(
        [
            *lines,
            "",
            f"gpu {cal.gpu}, memory_mib {cal.memory_mib}",
            f"kernel_gbps {cal.kernel_gbps:g}, bulk_gbps {cal.bulk_gbps:g}, "
            f"copy_overhead_us {cal.copy_overhead_us:g}",
            f"measured: {cal.measured}",
        ]
    )


HEADER = """\
# A hardware profile written by `hicache-sim calibrate`: {gpu}'s memory and host link.
# A scenario uses it as
#   hardware: {{calibration: {name}}}
# (a relative path is read from the scenario file's folder). memory_mib, kernel_gbps, bulk_gbps
# and copy_overhead_us become the defaults of the scenario's `hardware:` keys; `samples` is the
# measured table they were fitted from (GB/s = 1e9 bytes/s; h2d is host to device).
"""


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def write_calibration(cal: Calibration, path: Path, force: bool = False) -> Path:
    """Write `cal` as YAML that `read_calibration` reads back. Atomic (a temporary file in the
    same folder, then a rename), so a reader never sees half a file; an existing `path` is
    replaced only with `force`."""
    if (path.exists() or path.is_symlink()) and not force:
        raise FileExistsError(f"{path} already exists (use --force to replace it)")
    from sim.outputs.files import refuse_output

    refuse_output(path)
    body = yaml.safe_dump(
        cal.model_dump(mode="json"),
        sort_keys=False,
        default_flow_style=None,
        allow_unicode=True,
        width=1000,
    )
    text = HEADER.format(gpu=_one_line(cal.gpu), name=_one_line(path.name)) + body
    temp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path
