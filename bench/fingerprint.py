"""Fingerprints of runs, to check that a speed-up changed no answer.

    python bench/fingerprint.py OUT.json [SCENARIO[:KEY=VALUE,...] ...]
    python bench/fingerprint.py --all OUT.json
    python bench/fingerprint.py --compare A.json B.json [--ignore-key events]

For each scenario (the default set when none is given) it runs the simulation in process and
stores a hash of every table (columns, dtypes and values, row order included) and the whole
summary but its wall-clock keys. Two fingerprint files of different commits must be equal.
`--all` fingerprints every shipped scenario (`scenarios/**/*.yaml`, the golden files' set)
after the default set. `--ignore-key` leaves a summary key out of the comparison (`events`,
the engine's event count, when a change only schedules fewer events) and prints its values.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]

DEFAULT = [
    "scenarios/mooncake_conversation.yaml",
    "scenarios/cluster_conversation.yaml",
    "scenarios/demo.yaml",
    "scenarios/multiturn.yaml",
    "scenarios/heal_rules.yaml",
    "scenarios/cut_hole.yaml",
    "scenarios/zero_fault.yaml",
    "scenarios/layouts/kv_swa_mamba.yaml",
    "scenarios/layouts/kv_mamba.yaml",
    "scenarios/hit_query/intersect.yaml",
    "scenarios/hit_query/kv_only.yaml",
    "scenarios/failures/lease_expiry.yaml",
    "scenarios/failures/torn_nixl.yaml",
    "scenarios/failures/transient_read.yaml",
    "scenarios/failures/delete_on_failed_read.yaml",
    "scenarios/failures/partial_object.yaml",
    "scenarios/what_if/aux_blind_exists.yaml:workload.requests=10000,duration_s=3100,warmup_s=0",
    "scenarios/what_if/aux_blind_exists.yaml:workload.requests=10000,duration_s=1000,warmup_s=0,"
    "cluster.instances=8,cluster.scale_arrivals=true,cluster.router.policy=round_robin",
]


def table_hash(frame: pd.DataFrame) -> str:
    digest = hashlib.sha256()
    digest.update(repr(list(frame.columns)).encode())
    digest.update(repr([str(t) for t in frame.dtypes]).encode())
    digest.update(repr(list(frame.index[:3])).encode())
    for column in frame.columns:
        values = frame[column]
        if values.dtype == object:
            digest.update(repr(values.tolist()).encode())
        else:
            digest.update(pd.util.hash_pandas_object(values, index=False).values.tobytes())
    return digest.hexdigest()


def fingerprint(spec: str) -> dict[str, Any]:
    from sim.engine.metrics import WALL_CLOCK_KEYS
    from sim.engine.runner import run
    from sim.scenario.loading import load_scenario

    path, _, sets = spec.partition(":")
    overrides = [s for s in sets.split(",") if s]
    result = run(load_scenario(REPO / path, overrides))
    summary = {k: v for k, v in result.summary.items() if k not in WALL_CLOCK_KEYS}
    return {
        "summary": json.loads(json.dumps(summary, default=str)),
        "tables": {name: table_hash(frame) for name, frame in sorted(result.tables.items())},
        "rows": {name: len(frame) for name, frame in sorted(result.tables.items())},
    }


def compare(a: Path, b: Path, ignored: tuple[str, ...] = ()) -> int:
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for spec in sorted(set(left) | set(right)):
        if spec not in left or spec not in right:
            print(f"only in one: {spec}")
            bad += 1
            continue
        for part in ("tables", "summary"):
            x, y = left[spec][part], right[spec][part]
            if part == "summary":
                for key in ignored:
                    if x.get(key) != y.get(key):
                        print(f"{spec}: {key} {x.get(key)} -> {y.get(key)}")
                x = {k: v for k, v in x.items() if k not in ignored}
                y = {k: v for k, v in y.items() if k not in ignored}
            diff = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            if diff:
                bad += 1
                print(f"{spec}: {part} differ: {diff[:10]}")
    print("identical" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--compare", type=Path, metavar="B")
    parser.add_argument("--ignore-key", action="append", default=[], metavar="KEY")
    parser.add_argument("--all", action="store_true", help="also every shipped scenario")
    args = parser.parse_args()
    if args.compare is not None:
        sys.exit(compare(args.out, args.compare, tuple(args.ignore_key)))
    specs = list(args.specs or DEFAULT)
    if args.all:
        shipped = sorted(p.relative_to(REPO) for p in (REPO / "scenarios").rglob("*.yaml"))
        specs += [str(p) for p in shipped if str(p) not in specs]
    from sim.outputs.results import build

    print(f"build: {build()}", flush=True)
    prints = {}
    for spec in specs:
        prints[spec] = fingerprint(spec)
        print(f"{spec}: {prints[spec]['rows']}", flush=True)
    args.out.write_text(json.dumps(prints, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
