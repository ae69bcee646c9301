"""The vocabulary of scenario specs: the strict base model, bounded number types, and the
errors that name a file and a key.

It sits below every extension point, so a pool kind, a workload kind or a policy can declare
its own part of the scenario next to its behaviour, and `sim.scenario.schema` assembles the whole
schema from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

COMMAND_LINE_SET = "--set"
"""A problem's key starting with this came from the command line, not from the file."""


class ScenarioError(Exception):
    """Bad input: names the file and the key; the CLI maps it to exit code 2.

    `key` and `message` are the first problem; `problems` holds every problem found in the
    same input (the first included), so a user fixes a file in one pass, not one error a run.
    """

    def __init__(
        self,
        source: str,
        key: str | None,
        message: str,
        more: Sequence[tuple[str | None, str]] = (),
    ) -> None:
        super().__init__(source, key, message)
        self.source = source
        self.key = key
        self.message = message
        self.problems: list[tuple[str | None, str]] = [(key, message), *more]

    def __str__(self) -> str:
        return "\n".join(self._line(key, message) for key, message in self.problems)

    def _line(self, key: str | None, message: str) -> str:
        if key is None:
            return f"{self.source}: {message}"
        if key.startswith(f"{COMMAND_LINE_SET} "):
            # Set on the command line: told as `--set: KEY: ...`, like a malformed --set.
            return f"{COMMAND_LINE_SET}: {key.removeprefix(COMMAND_LINE_SET + ' ')}: {message}"
        if key.startswith("--"):
            # A command-line option among a command's problems: it is its own source.
            return f"{key}: {message}"
        return f"{self.source}: {key or repr('')}: {message}"


class KeyedError(ValueError):
    """A cross-field error that knows which dotted key it is about."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class Strict(BaseModel):
    """Unknown keys refused, values frozen, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)


PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
Probability = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
PositiveFloat = Annotated[float, Field(strict=True, gt=0.0)]
NonNegFloat = Annotated[float, Field(strict=True, ge=0.0)]
Flag = Annotated[bool, Field(strict=True)]
"""true or false only: a lax bool would take `1.0` or `"yes"` and run with it."""

MIN_INTERVAL_S = 1e-3
IntervalS = Annotated[float, Field(strict=True, ge=MIN_INTERVAL_S, le=1e9)]
"""A timer's period in seconds: at least a millisecond, so a timer cannot fire billions of times
in a run (a 1e-300 s poll would never let simulated time advance)."""
Gbps = Annotated[float, Field(strict=True, ge=1e-3, le=1e6)]
"""A bandwidth in GB/s: from 1 MB/s (below it a page takes minutes to move) to 1 PB/s."""
GpuMemoryMib = Annotated[int, Field(strict=True, ge=1, le=2**24)]
"""A GPU's memory in MiB, as nvidia-smi reports it (at most 16 TiB)."""
HostLinkGbps = Annotated[float, Field(strict=True, ge=1e-3, le=1e4)]
"""A host-to-device rate in GB/s, from 1 MB/s to 10 TB/s."""
CopyOverheadUs = Annotated[float, Field(strict=True, ge=0.0, le=1e6)]
"""The cost of one host copy beyond its bytes, in microseconds (at most a second)."""
MAX_ATTEMPTS = 1000
Attempts = Annotated[int, Field(strict=True, ge=0, le=MAX_ATTEMPTS)]
"""Re-issues per request: each is an event, so the count is bounded (SGLang's default is 8)."""

Bytes = Annotated[int, Field(strict=True, ge=1, le=2**40)]
"""Object and token sizes: bounded so byte arithmetic stays within floats (a TiB per object)."""
