"""Build the optional compiled copy of the simulator: the model and engine modules compiled
with mypyc from the same typed sources.

    python bench/compile.py [--out build/compiled]
    PYTHONPATH=build/compiled hicache-sim run scenarios/demo.yaml

The pure-Python package is the reference and what the README's commands run; the compiled copy
runs the same code about 1.5 times faster and must give identical tables
(`tests/test_compiled.py` checks that on every run of the suite). The copy is a whole `sim`
package: the listed modules as C extensions beside every other module as Python, so putting its
folder first on `PYTHONPATH` swaps the whole simulator at once and nothing in the checkout
changes. It needs a C compiler and the Python headers, and mypy (the test extra installs it).

A copy is stamped with a hash of the sources it was built from, and running this again
rebuilds it only when they changed: a copy older than the sources runs the old code, so run it
again after every edit (the benchmark and the test always do).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import mypy.version

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "build" / "compiled"
STAMP = ".source-hash"

COMPILED_MODULES = (
    "sim/engine/channel.py",
    "sim/engine/job.py",
    "sim/engine/links.py",
    "sim/engine/prefetch_io.py",
    "sim/engine/records.py",
    "sim/engine/running_batch.py",
    "sim/engine/scheduler.py",
    "sim/engine/server.py",
    "sim/engine/server_base.py",
    "sim/engine/simulation.py",
    "sim/engine/write_back.py",
    "sim/heal.py",
    "sim/model/anchors.py",
    "sim/model/backup.py",
    "sim/model/chain.py",
    "sim/model/components.py",
    "sim/model/device.py",
    "sim/model/existence.py",
    "sim/model/faults.py",
    "sim/model/heals.py",
    "sim/model/host.py",
    "sim/model/loops.py",
    "sim/model/node.py",
    "sim/model/object_store.py",
    "sim/model/operation.py",
    "sim/model/prefetch.py",
    "sim/model/prefetch_policies.py",
    "sim/model/radix.py",
    "sim/model/retries.py",
    "sim/model/storage.py",
    "sim/model/tree_capacity.py",
)
"""What a run spends its time in. The scenario schema (pydantic models) stays Python: mypyc
cannot compile a pydantic model class, and validation runs once per run."""


def source_hash(package: Path) -> str:
    """A hash of every Python source of the package, the module list and the toolchain."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    digest.update("\n".join(COMPILED_MODULES).encode())
    digest.update(f"{sys.version} mypy {mypy.version.__version__}".encode())
    return digest.hexdigest()


def build_copy(out: Path, quiet: bool = False) -> Path:
    """Build (or reuse) the compiled copy at `out`; returns `out`, the folder for PYTHONPATH."""
    source = REPO / "sim"
    wanted = source_hash(source)
    stamp = out / "sim" / STAMP
    if stamp.is_file() and stamp.read_text() == wanted:
        if not quiet:
            print(f"{out}: up to date")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".compiling-") as tmp:
        work = Path(tmp)
        shutil.copytree(
            source, work / "sim", ignore=shutil.ignore_patterns("__pycache__", "*.so", STAMP)
        )
        proc = subprocess.run(
            [sys.executable, "-m", "mypyc", "--ignore-missing-imports", *COMPILED_MODULES],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "MYPYC_OPT_LEVEL": os.environ.get("MYPYC_OPT_LEVEL", "3")},
        )
        if proc.returncode != 0:
            sys.exit(f"mypyc failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        built = sorted((work / "sim").rglob("*.so"))
        if len(built) < len(COMPILED_MODULES):
            sys.exit(f"mypyc built {len(built)} extensions for {len(COMPILED_MODULES)} modules")
        imported = subprocess.run(
            [sys.executable, "-c", "import sim.engine.runner"],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(work)},
        )
        if imported.returncode != 0:
            sys.exit(f"the compiled copy does not import:\n{imported.stderr[-4000:]}")
        (work / "sim" / STAMP).write_text(wanted)
        shutil.rmtree(work / "build", ignore_errors=True)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        (work / "sim").rename(out / "sim")
        for runtime in work.glob("*__mypyc*.so"):
            runtime.rename(out / runtime.name)
    if not quiet:
        print(f"built {out} ({len(COMPILED_MODULES)} compiled modules)")
        print(f"use it with: PYTHONPATH={out} hicache-sim run ...")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    build_copy(args.out.resolve())


if __name__ == "__main__":
    main()
