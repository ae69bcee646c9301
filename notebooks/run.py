"""Execute the notebooks top to bottom, as CI does, and keep the executed copies.

    pip install -e '.[notebooks]'
    python notebooks/run.py [--small] [NAME ...]

`--small` sets HICACHE_SMALL=1 (each notebook shrinks to well under a minute, which is how the
test suite runs them); without it they run at full size. Executed copies, outputs included, go
to results/notebooks/; the notebooks in this folder stay without outputs. Exits 1 if any
notebook fails, after running the others.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "results" / "notebooks"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="HICACHE_SMALL=1: quick, reduced runs")
    parser.add_argument("names", nargs="*", help="notebook names (default: all)")
    args = parser.parse_args()
    if args.small:
        os.environ["HICACHE_SMALL"] = "1"
    paths = sorted(HERE.glob("*.ipynb"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names or p.name in args.names]
        if not paths:
            sys.exit(f"no notebook named {args.names} in {HERE}")
    OUT.mkdir(parents=True, exist_ok=True)
    failed = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
        )
        started = time.perf_counter()
        try:
            client.execute()
            status = "ok"
        except CellExecutionError as exc:
            failed.append(path.name)
            status = f"FAILED: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        nbformat.write(nb, OUT / path.name)
        print(f"{path.name}: {status} ({time.perf_counter() - started:.1f} s) -> {OUT / path.name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
