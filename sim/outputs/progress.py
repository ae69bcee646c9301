"""Progress of a search or a sweep: a bar on a terminal, a line per finished step elsewhere.

A capacity search or a sweep can take hours, and is often started with its output sent to a
file (`capacity ... > log 2>&1`) or under a scheduler. A tqdm bar hides itself there, which left
the file empty until the end; a bar drawn anyway would fill it with carriage returns. So on a
stream that is not a terminal each finished step writes one plain line with what it was, how
far the work is and an estimate of the time left, flushed at once so `tail -f` shows it.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm import tqdm


def clock(seconds: float) -> str:
    """'1:02:03', '4:05', '0:07'."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts finished steps of `total`; `enabled=False` shows nothing at all."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        *,
        initial: int = 0,
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar_shown = enabled and terminal
        self.lines_shown = enabled and not terminal
        self.desc, self.unit = desc, unit
        self.total, self.n, self.first = total, initial, initial
        self.started = time.monotonic()
        self.bar: tqdm[Any] = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            file=self.stream,
            disable=not self.bar_shown,
        )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, what: str = "") -> None:
        """One more step finished; `what` says which (and what it found)."""
        self.n += 1
        self.bar.update(1)
        if self.bar_shown and what:
            self.bar.set_postfix_str(what)
        if self.lines_shown:
            self.write(f"{self.desc}: {self.n}/{self.total} {self.unit}s{_sep(what)}{self.eta()}")

    def eta(self) -> str:
        elapsed = time.monotonic() - self.started
        done = self.n - self.first
        left = max(0, self.total - self.n)
        if done <= 0:
            return f"; {clock(elapsed)} elapsed"
        return f"; {clock(elapsed)} elapsed, ETA {clock(elapsed / done * left)}"

    def write(self, text: str) -> None:
        """A line beside the bar (or alone, on a file)."""
        if self.bar_shown:
            self.bar.write(text, file=self.stream)
        elif self.lines_shown:
            print(text, file=self.stream, flush=True)

    def close(self, finished: bool = False) -> None:
        """Close the bar; `finished` ends it at what was done (a search that stopped early)."""
        if finished:
            self.bar.total = self.bar.n
            self.bar.refresh()
        self.bar.close()


def _sep(what: str) -> str:
    return f", {what}" if what else ""
