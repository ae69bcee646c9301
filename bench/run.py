"""Benchmarks: the machine's SimPy yardstick, the simulator's throughput and memory, sweep speed-up.

    python bench/run.py [--repeat 3] [--sizes 10000,100000,1000000] [--quick] [--record]
                        [--cluster-instances 8] [--only CASE,...]

Each case runs in a fresh subprocess (so peak RSS is that case's own) and is repeated, in rounds
(every case once per round, so the cases a ratio compares are measured interleaved); figures
are medians. Results go to results/bench/bench-<UTC time>.csv, or with `--record` are appended
to bench/results.csv (the committed record), with the commit, the command, versions and the
machine; the ratios the performance targets are stated in are printed at the end.

Every simulator case's wall time is also given at the reference speed (`wall_s_at_reference`):
each run scaled by the bare SimPy loop of its own round against REFERENCE_EVENTS_PER_S, so
figures taken on two machines, or on one machine on a busy and a quiet day, can be compared.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RECORD = "bench/results.csv"
RESULTS = REPO / RECORD
"""The committed record; `--record` appends to it. Without it a run writes its own CSV under
results/bench/, so benchmarking never leaves the work tree dirty."""
CONVERSATION = REPO / "scenarios" / "mooncake_conversation.yaml"
"""Replays the repository's copy of the Mooncake conversation trace (traces/)."""
CLUSTER_CONVERSATION = REPO / "scenarios" / "cluster_conversation.yaml"
"""The same trace on eight servers behind the cache_aware router, sharing one backend."""
REFERENCE_EVENTS_PER_S = 1_672_000
"""The bare SimPy loop's speed on the day the first figures were recorded (bench/results.csv):
the targets are stated at this speed."""
TARGETS = {
    "mooncake_conversation": ("wall_s_at_reference", 2.5),
    "shared_prefix_1000000": ("wall_s_at_reference", 100.0),
}
"""Case -> (figure, most it may be) for the performance targets (docs/performance.md)."""
DEMO = REPO / "scenarios" / "demo.yaml"
SHARED_PREFIX = REPO / "scenarios" / "what_if" / "aux_blind_exists.yaml"
"""The size and scaling cases grow a shared-prefix workload (the earlier demo, kept as a
what-if): its request count is one key, and the figures stay comparable across commits."""

CHILD = r"""
import json, resource, sys, time
case = json.loads(sys.argv[1])
if case.get("compiled"):
    sys.path.insert(0, case["compiled"])
if case["kind"] == "sweep":
    import tempfile
    from pathlib import Path
    from sim.scenario.loading import load_scenario
    from sim.studies.grid import plan
    from sim.studies.sweep import run_sweep
    sc = load_scenario(case["scenario"])
    tasks = plan(sc, case["scenario"], case["seeds"])
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run_sweep(tasks, Path(tmp) / "sweep", executor=case["executor"],
                  workers=case["workers"], progress=False)
        wall = time.perf_counter() - t
    out = {"wall_s": wall, "events": 0, "requests": 0}
elif case["kind"] == "simpy":
    import simpy
    env = simpy.Environment()
    def ticking(env, n):
        for _ in range(n):
            yield env.timeout(1)
    env.process(ticking(env, case["events"]))
    t = time.perf_counter(); env.run(); wall = time.perf_counter() - t
    out = {"wall_s": wall, "events": case["events"] + 1, "requests": 0}
else:
    import sim
    sc = sim.load_scenario(case["scenario"], case.get("overrides", []))
    before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter(); result = sim.run(sc); wall = time.perf_counter() - t
    tables = sum(int(f.memory_usage(deep=True).sum()) for f in result.tables.values())
    from sim.outputs.results import build
    if build() != ("compiled" if case.get("compiled") else "python"):
        sys.exit(f"ran the {build()} build, not the one asked for")
    out = {"wall_s": wall, "events": result.summary["events"],
           "requests": len(result.tables["requests"]),
           "imports_rss_mib": before_mib, "tables_mib": tables / 2**20}
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_case(case: dict[str, object]) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(case)], capture_output=True, text=True, cwd=REPO
    )
    if proc.returncode != 0:
        sys.exit(f"bench case {case} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


SWEEP_SEEDS = 5
"""5 failure rates x 2 heal rules x 5 seeds = 50 runs of about 0.25 s each."""


def demo_at(requests: int) -> list[str]:
    """Overrides that run the shared-prefix workload for `requests` requests, all counted."""
    return [f"workload.requests={requests}", f"duration_s={requests / 4 + 600}", "warmup_s=0"]


def cluster_at(requests: int, instances: int, policy: str) -> list[str]:
    """The same workload and server, `instances` servers behind a `policy` router: arrivals
    scaled by 1/instances, so each server sees the single server's load."""
    return [
        f"workload.requests={requests}",
        f"duration_s={requests / 4 / instances + 600}",
        "warmup_s=0",
        f"cluster.instances={instances}",
        "cluster.scale_arrivals=true",
        f"cluster.router.policy={policy}",
    ]


CLUSTER_POLICIES = ("cache_aware", "round_robin")
"""The gateway's default at every size; round-robin, for comparison, below 1M requests."""


def cluster_cases(requests: int, instances: int) -> list[tuple[str, dict[str, object]]]:
    """The cluster cases at `requests` requests, one per router."""
    policies = CLUSTER_POLICIES if requests < 1_000_000 else CLUSTER_POLICIES[:1]
    return [
        (
            f"cluster{instances}_{policy}_{requests}",
            {
                "kind": "sim",
                "scenario": str(SHARED_PREFIX),
                "overrides": cluster_at(requests, instances, policy),
            },
        )
        for policy in policies
    ]


def kv_only_demo(folder: Path) -> Path:
    """The shared-prefix scenario without its SWA pool, in `folder` (an override can set a key,
    not drop it)."""
    doc = yaml.safe_load(SHARED_PREFIX.read_text())
    del doc["model"]["swa"], doc["storage"]["pools"]["swa"], doc["device"]["swa_pages"]
    path = folder / "demo_kv_only.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def scaling_cases(requests: int, folder: Path) -> list[tuple[str, dict[str, object]]]:
    """The shared-prefix scenario at `requests` requests, varying one thing: pages per request,
    or pool count."""
    base = demo_at(requests)
    cases: list[tuple[str, str, list[str]]] = []
    for pages in (16, 64, 256):
        # Prefill speed grows with the prompt so the server stays as loaded as the demo's.
        speed = [
            f"workload.prefix_tokens={pages * 64}",
            f"compute.prefill_tokens_per_s={pages * 312}",
        ]
        cases.append((f"pages_per_request_{pages}", str(SHARED_PREFIX), base + speed))
    mamba = [
        "model.mamba={state_bytes: 75497472}",
        "device.mamba_slots=64",
        "storage.pools.mamba={}",
    ]
    cases.append(("pools_kv", str(kv_only_demo(folder)), base))
    cases.append(("pools_kv_swa", str(SHARED_PREFIX), base))
    cases.append(("pools_kv_swa_mamba", str(SHARED_PREFIX), base + mamba))
    return [
        (name, {"kind": "sim", "scenario": path, "overrides": overrides})
        for name, path, overrides in cases
    ]


def sweep_wall(executor: str, workers: int, seeds: int) -> float:
    """Wall time of run_sweep alone (imports and plots excluded), in a fresh process."""
    case = {
        "kind": "sweep",
        "scenario": "scenarios/sweeps/aux_write_failures.yaml",
        "executor": executor,
        "workers": workers,
        "seeds": seeds,
    }
    return run_case(case)["wall_s"]


COMPILED = ".compiled"
"""Suffix of a case run on the compiled copy (`--compiled`)."""


def with_compiled(
    cases: list[tuple[str, dict[str, object], int]], copy: Path
) -> list[tuple[str, dict[str, object], int]]:
    """Every simulator case followed by its twin on the compiled copy, so the two builds are
    measured in the same rounds."""
    out = []
    for name, case, repeat in cases:
        out.append((name, case, repeat))
        if case["kind"] == "sim":
            out.append((name + COMPILED, {**case, "compiled": str(copy)}, repeat))
    return out


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        )
        # The record's own new rows (a run recorded before this one) do not make a tree dirty.
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                f":(top,exclude){RECORD}",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def versions() -> str:
    parts = [f"python={platform.python_version()}"]
    for pkg in ("simpy", "numpy", "pandas", "pyarrow"):
        parts.append(f"{pkg}={metadata.version(pkg)}")
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="sizes 10k,100k; repeat 1")
    parser.add_argument(
        "--record", action="store_true", help="append to bench/results.csv (the committed record)"
    )
    parser.add_argument(
        "--scaling-requests", type=int, default=10_000, help="requests per scaling case (0: skip)"
    )
    parser.add_argument(
        "--cluster-instances",
        type=int,
        default=8,
        help="servers in the cluster cases, run at each size (0: skip)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="run only the cases whose names start with one of these (comma-separated; "
        "'sweep' names the sweeps), e.g. shared_prefix_1000000,cluster8_cache_aware_1000000",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also run every simulator case on the compiled copy (bench/compile.py builds it, "
        "or reuses an up-to-date one, in build/compiled)",
    )
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat = "10000,100000", 1
    sizes = [int(s) for s in args.sizes.split(",") if s]

    cases: list[tuple[str, dict[str, object], int]] = [
        ("simpy_timeout_loop", {"kind": "simpy", "events": 1_000_000}, args.repeat),
        ("demo", {"kind": "sim", "scenario": str(DEMO)}, args.repeat),
        ("mooncake_conversation", {"kind": "sim", "scenario": str(CONVERSATION)}, args.repeat),
        (
            "cluster_conversation",
            {"kind": "sim", "scenario": str(CLUSTER_CONVERSATION)},
            args.repeat,
        ),
    ]
    for n in sizes:
        # A size's cluster cases right after its single server: the ratio is taken back to back.
        spec = {"kind": "sim", "scenario": str(SHARED_PREFIX), "overrides": demo_at(n)}
        sized = [(f"shared_prefix_{n}", spec)]
        if args.cluster_instances:
            sized += cluster_cases(n, args.cluster_instances)
        cases += [(name, case, args.repeat if n < 1_000_000 else 1) for name, case in sized]
    scratch = tempfile.TemporaryDirectory(prefix="hicache-bench-")
    if args.scaling_requests:
        scaling = scaling_cases(args.scaling_requests, Path(scratch.name))
        cases += [(name, case, args.repeat) for name, case in scaling]
    only = tuple(name for name in args.only.split(",") if name)
    if only:
        # The yardstick always runs: every figure is also given at the reference speed.
        cases = [case for case in cases if case[0].startswith((*only, "simpy_timeout_loop"))]
    if args.compiled:
        from compile import DEFAULT_OUT, build_copy

        cases = with_compiled(cases, build_copy(DEFAULT_OUT))

    rows = []
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    revision = commit()
    machine = f"{platform.machine()} {os.cpu_count()} cores {platform.system()}"
    command = " ".join(["python", "bench/run.py", *sys.argv[1:]])
    medians: dict[str, dict[str, float]] = {}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in cases}
    for round_ in range(max((repeat for _, _, repeat in cases), default=0)):
        for name, case, repeat in cases:
            if round_ < repeat:
                runs[name].append({**run_case(case), "round": round_})
                wall = runs[name][-1]["wall_s"]
                load = os.getloadavg()[0]
                print(f"  round {round_ + 1}: {name} {wall:.1f} s, load {load:.1f}", flush=True)
    # Each sample is scaled by the yardstick of its own round (measured just before it): a
    # machine whose load changes during the benchmark changes both together.
    yard_by_round = {
        s["round"]: s["events"] / s["wall_s"] for s in runs.get("simpy_timeout_loop", [])
    }
    for name, _, repeat in cases:
        samples = runs[name]
        wall = statistics.median(s["wall_s"] for s in samples)
        med = {
            "wall_s": wall,
            "events_per_s": statistics.median(s["events"] / s["wall_s"] for s in samples),
            "requests_per_s": statistics.median(
                s["requests"] / s["wall_s"] for s in samples if s["requests"]
            )
            if samples[0]["requests"]
            else 0.0,
            "peak_rss_mib": max(s["peak_rss_mib"] for s in samples),
            "us_per_request": 1e6 * wall / samples[0]["requests"] if samples[0]["requests"] else 0,
        }
        for extra in ("imports_rss_mib", "tables_mib"):
            if extra in samples[0]:
                med[extra] = statistics.median(s[extra] for s in samples)
        if yard_by_round and name != "simpy_timeout_loop":
            med["wall_s_at_reference"] = statistics.median(
                s["wall_s"] * yard_by_round[s["round"]] / REFERENCE_EVENTS_PER_S for s in samples
            )
        base, dot, build_name = name.partition(".")
        single = medians.get(
            (
                "mooncake_conversation"
                if base == "cluster_conversation"
                else f"shared_prefix_{base.rsplit('_', 1)[-1]}"
            )
            + dot
            + build_name
        )
        if name.startswith("cluster") and single:
            med["us_per_request_vs_single"] = med["us_per_request"] / single["us_per_request"]
        medians[name] = med
        print(f"{name:24s} " + "  ".join(f"{k}={v:,.1f}" for k, v in med.items()), flush=True)
        for metric, value in med.items():
            rows.append(
                [stamp, revision, command, versions(), machine, name, metric, value, repeat]
            )

    sweeps = not only or "sweep".startswith(only)
    if sweeps:
        repeat = args.repeat
        serial = statistics.median(sweep_wall("serial", 1, SWEEP_SEEDS) for _ in range(repeat))
        process = statistics.median(sweep_wall("process", 2, SWEEP_SEEDS) for _ in range(repeat))
        for name, value in (("sweep_serial_wall_s", serial), ("sweep_process2_wall_s", process)):
            rows.append([stamp, revision, command, versions(), machine, name, "wall_s", value, 1])
        sweep_runs = 10 * SWEEP_SEEDS
        print(
            f"sweep ({sweep_runs} runs, run_sweep only): "
            f"serial {serial:.1f} s, process x2 {process:.1f} s"
        )

    print("\nratios against the performance targets (docs/performance.md):")
    if "simpy_timeout_loop" in medians:
        yard = medians["simpy_timeout_loop"]["events_per_s"]
        print(
            f"  yardstick: {yard / 1e6:.2f} M events/s, "
            f"{yard / REFERENCE_EVENTS_PER_S:.2f}x the reference "
            f"{REFERENCE_EVENTS_PER_S / 1e6:.2f} M"
        )
        for target_case, (metric, most) in TARGETS.items():
            for name in (target_case, target_case + COMPILED):
                if name in medians:
                    value = medians[name][metric]
                    verdict = "met" if value <= most else "NOT met"
                    print(
                        f"  {name}: {medians[name]['wall_s']:.2f} s here, {value:.2f} s at the "
                        f"reference speed (target <= {most:g} s: {verdict})"
                    )
        for name, med in medians.items():
            if name != "simpy_timeout_loop":
                print(
                    f"  {name}: events/s = {med['events_per_s'] / yard:.0%} of the bare SimPy loop"
                )
    for suffix in ("", COMPILED):
        small, large = f"shared_prefix_{sizes[0]}{suffix}", f"shared_prefix_{sizes[-1]}{suffix}"
        if large in medians:
            big = medians[large]
            if small in medians and small != large:
                ratio = big["us_per_request"] / medians[small]["us_per_request"]
                print(f"  {large}: time per request {ratio:.2f}x that at {sizes[0]:,}")
            print(
                f"  {large}: peak RSS {big['peak_rss_mib']:.0f} MiB (imports "
                f"{big['imports_rss_mib']:.0f} MiB, final tables {big['tables_mib']:.0f} MiB; "
                f"target at 1M <= 1,229 MiB)"
            )
    for name, med in medians.items():
        if "us_per_request_vs_single" in med:
            print(
                f"  {name}: {med['us_per_request']:.0f} us per request, "
                f"{med['us_per_request_vs_single']:.2f}x the single server's, "
                f"peak RSS {med['peak_rss_mib']:.0f} MiB"
                + (" (target at 1M: <= 1.1x)" if name.endswith("_1000000") else "")
            )
    if sweeps:
        print(f"  process sweep on 2 workers: {serial / process:.2f}x serial (target >= 1.9x)")

    target = RESULTS if args.record else REPO / "results" / "bench" / f"bench-{stamp[:19]}.csv"
    target = target.with_name(target.name.replace(":", ""))
    target.parent.mkdir(parents=True, exist_ok=True)
    new = not target.exists()
    with target.open("a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(
                ["utc", "commit", "command", "versions", "machine", "case", "metric", "median", "n"]
            )
        writer.writerows(rows)
    print(f"\nappended {len(rows)} rows to {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
