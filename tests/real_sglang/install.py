"""What run.sh installs and when, in plain Python (the standard library only: run.sh calls it
with the system's python3 before any venv exists).

`python3 -m tests.real_sglang.install COMMAND ...`:
- `releases ARGS...`: the releases the driver's arguments select (`--releases`, `-k`), one line;
  exit 2 naming the argument when they select no case, before anything is installed;
- `venv STAMP [--write]`: `stale` or `fresh`, whether the venv's stamp holds every input of its
  install (requirements.txt, constraints.txt, no_deps.txt); `--write` records them;
- `release RELEASE WHEEL STAMP [--write]`: the same for one release's `--target` install (the
  wheel's name and the release's extra pins);
- `pins RELEASE`: the extra packages that release's install needs, one a line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.real_sglang.cases import CASES

HERE = Path(__file__).resolve().parent
VENV_INPUTS = ("requirements.txt", "constraints.txt", "no_deps.txt")
"""The files whose every pin the venv is built from: a change to any rebuilds it."""
DEFAULT_RELEASES = "0.5.23,0.5.19"
RELEASE_PINS = {"0.5.19": ("xgrammar==0.2.1",)}
"""0.5.19's server arguments import xgrammar at top level (its pinned release)."""


def parser() -> argparse.ArgumentParser:
    """The driver's arguments (`python -m tests.real_sglang`)."""
    found = argparse.ArgumentParser(prog="python -m tests.real_sglang")
    found.add_argument("--releases", default=DEFAULT_RELEASES)
    found.add_argument(
        "--write-docs", action="store_true", help="write the case table into docs/fidelity.md"
    )
    found.add_argument("-k", default="", help="only the cases whose name contains this")
    found.add_argument("-v", action="store_true", help="print both records of every step")
    return found


class NothingSelected(ValueError):
    """Arguments that select no case: the message names the argument."""


def selected(releases: str, k: str) -> dict[str, list[dict[str, Any]]]:
    """The cases to run, by release (in the order given); a release no case runs on, or a
    selection with no case at all, is refused."""
    known = sorted({r for case in CASES for r in case["releases"]})
    chosen: dict[str, list[dict[str, Any]]] = {}
    for release in releases.split(","):
        if release not in known:
            raise NothingSelected(
                f"--releases: no case runs on {release!r} (the cases run on {', '.join(known)})"
            )
        chosen[release] = [c for c in CASES if release in c["releases"] and k in c["name"]]
    if not any(chosen.values()):
        raise NothingSelected(f"-k {k!r} selects no case of {releases}")
    return {release: cases for release, cases in chosen.items() if cases}


def venv_stamp() -> str:
    return "".join(f"== {name}\n{(HERE / name).read_text()}" for name in VENV_INPUTS)


def release_stamp(release: str, wheel: str) -> str:
    return "\n".join((Path(wheel).name, *RELEASE_PINS.get(release, ()))) + "\n"


def _state(stamp: Path, want: str, write: bool) -> str:
    if write:
        stamp.write_text(want)
        return "fresh"
    try:
        return "fresh" if stamp.read_text() == want else "stale"
    except OSError:
        return "stale"


def main(argv: Sequence[str]) -> int:
    command, *rest = argv or ("",)
    write = "--write" in rest
    rest = [arg for arg in rest if arg != "--write"]
    if command == "releases":
        args, _ = parser().parse_known_args(rest)
        try:
            print(" ".join(selected(args.releases, args.k)))
        except NothingSelected as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if command == "venv" and len(rest) == 1:
        print(_state(Path(rest[0]), venv_stamp(), write))
        return 0
    if command == "release" and len(rest) == 3:
        release, wheel, stamp = rest
        print(_state(Path(stamp), release_stamp(release, wheel), write))
        return 0
    if command == "pins" and len(rest) == 1:
        print("\n".join(RELEASE_PINS.get(rest[0], ())))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
