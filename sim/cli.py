"""The `hicache-sim` command line (also `python -m sim`).

Exit codes: 0 success; 2 bad input (file, schema, unknown key: the message names both, and
nothing is written); 1 anything else.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from sim.deployment.resolve import USER, get, show_value
from sim.outputs.console import format_table, print_summary, progress
from sim.results.directories import check_path, check_sweep_out, only_writer, refuse_existing
from sim.results.layout import SUMMARY, TASKS
from sim.runner import run
from sim.scenario import (
    Scenario,
    ScenarioError,
    apply_override,
    check_references,
    defaulted_storage_pools,
    load_scenario,
    parse_override,
    read_document,
    scenario_document,
    scenario_model,
)
from sim.variants import Variant, VariantSet

F = TypeVar("F", bound=Callable[..., Any])

RESULTS_ROOT = Path("results")
DEBUG_ENV = "HICACHE_DEBUG"
"""Set (or `--debug`): an unexpected error (exit 1) prints its traceback, for bug reports."""


def _bad_input(fn: F) -> F:
    """Map ScenarioError to exit 2 and other failures to exit 1, without a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except FileExistsError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt as exc:
            where = f" ({exc})" if str(exc) else ""
            click.echo(f"interrupted{where}; no partial result directory was left", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            else:
                hint = f" (rerun with --debug or {DEBUG_ENV}=1 for the traceback)"
                click.echo(f"error: {type(exc).__name__}: {exc}{hint}", err=True)
                sys.exit(1)
            click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _load(
    path: str, overrides: tuple[str, ...], seed: int | None = None, *, scan_trace: bool = True
) -> Scenario:
    """Load, validate and check references; by default also read the whole trace, so that a
    malformed line is bad input before anything runs, even past the horizon or `limit`."""
    check_path(path, Path(path))
    items = list(overrides)
    if seed is not None:
        items.append(f"seed={seed}")
    scenario = load_scenario(path, items)
    check_references(scenario, path)
    if scan_trace:
        _trace_requests(scenario)
    return scenario


def _trace_requests(scenario: Scenario) -> int:
    """Requests in the scenario's trace (0 without one); a malformed line raises ScenarioError."""
    return scenario.workload.scan()


_set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario value by dotted key (repeatable); a relative path is relative to "
    "the current directory.",
)
_out_option = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Result directory (default: a new one under results/<scenario name>/).",
)
_force_option = click.option("--force", is_flag=True, help="Replace an existing --out directory.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hicache-sim")
@click.option(
    "--debug",
    is_flag=True,
    help=f"Print the traceback behind an unexpected error (also {DEBUG_ENV}=1).",
)
def cli(debug: bool) -> None:
    """Simulate hybrid HiCache storage prefetch and compare existence-cache healing rules."""
    if debug:
        os.environ[DEBUG_ENV] = "1"


@cli.command("run")
@click.argument("scenario", type=click.Path(dir_okay=False))
@_out_option
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@_set_option
@_force_option
@click.option(
    "--storage-trace",
    is_flag=True,
    help="Also record every storage access (storage_trace.parquet, for export-trace).",
)
@_bad_input
def run_cmd(
    scenario: str,
    out: Path | None,
    seed: int | None,
    overrides: tuple[str, ...],
    force: bool,
    storage_trace: bool,
) -> None:
    """Run one scenario and write a run directory."""
    from sim.outputs.results import write_run
    from sim.results.directories import default_out, write_atomically

    sc = _load(scenario, overrides, seed)
    refuse_existing(out, force)
    with progress(sc, sc.name) as on_progress:
        result = run(sc, storage_trace=storage_trace, on_progress=on_progress)
    target = out or default_out(RESULTS_ROOT, sc.name, "run")
    written = write_atomically(target, lambda d: write_run(result, d), force=force)
    print_summary(result, str(Path(written) / SUMMARY))
    click.echo(f"wrote {written}")


@cli.command("compare")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option(
    "--heal",
    "heals",
    default=None,
    metavar="A,B,...",
    help="Heal rules to compare: the same as --vary heal=A,B (default: none,keep_pages).",
)
@click.option(
    "--vary",
    multiple=True,
    metavar="KEY=A,B,...",
    help="One dotted key and the values to run it at (YAML values, as --set).",
)
@click.option(
    "--variant",
    "variant_specs",
    multiple=True,
    metavar="LABEL:KEY=VALUE[;KEY=VALUE...]",
    help="One variant per option (repeatable): a label and the keys it sets.",
)
@_out_option
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@_set_option
@_force_option
@_bad_input
def compare_cmd(
    scenario: str,
    heals: str | None,
    vary: tuple[str, ...],
    variant_specs: tuple[str, ...],
    out: Path | None,
    seed: int | None,
    overrides: tuple[str, ...],
    force: bool,
) -> None:
    """Run the scenario once per variant on the same seed, print a table, write comparison.csv,
    comparison.png and one run directory per variant.

    Variants are heal rules (--heal), the values of one key (--vary) or labelled sets of keys
    (--variant); every one is checked before the first run.
    """
    from sim.results.compare import compare, write_comparison
    from sim.results.directories import default_out, write_atomically
    from sim.variants import variant_set

    found = variant_set(heals, vary, variant_specs)
    base = _load(scenario, overrides, seed)
    scenarios = [_load_variant(scenario, overrides, seed, v, found, base) for v in found.variants]
    refuse_existing(out, force)

    def shown(label: str) -> str:
        return label if found.column == "variant" else f"{found.column}={label}"

    comparison = compare(
        {v.label: sc for v, sc in zip(found.variants, scenarios, strict=True)},
        found.column,
        progress=lambda sc, label: progress(sc, shown(label)),
    )
    sets = {v.label: v.values() for v in found.variants}
    target = out or default_out(RESULTS_ROOT, base.name, "compare")
    written = write_atomically(
        target, lambda d: write_comparison(comparison, d, sets, found.option), force=force
    )
    click.echo(format_table(comparison.table, found.column))
    click.echo(f"wrote {written / 'comparison.csv'} and {written / 'comparison.png'}")


def _load_variant(
    path: str,
    overrides: tuple[str, ...],
    seed: int | None,
    variant: Variant,
    found: VariantSet,
    base: Scenario,
) -> Scenario:
    """The scenario with `--set`, then the variant's keys; a refusal names the variant's option
    (and its label), and a variant that replays another trace has that trace read whole too."""
    try:
        sc = _load(path, (*overrides, *variant.sets), seed, scan_trace=False)
        if sc.trace_path() != base.trace_path():
            _trace_requests(sc)
    except ScenarioError as exc:
        where = ";".join(variant.sets) if found.option == "--vary" else variant.label
        raise ScenarioError(f"{found.option} {where}", exc.key, exc.message) from None
    return sc


@cli.command("sweep")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option(
    "--executor",
    type=click.Choice(["serial", "process", "dask"]),
    default="process",
    show_default=True,
    help="Where the runs execute; results are identical whatever the choice.",
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Default: cores.")
@click.option("--scheduler", default=None, help="Dask scheduler address to join (dask only).")
@click.option("--seeds", type=click.IntRange(min=1), default=None, help="Override sweep.seeds.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sweep directory; rerunning into it computes only the missing runs.",
)
@_set_option
@_bad_input
def sweep_cmd(
    scenario: str,
    executor: str,
    workers: int | None,
    scheduler: str | None,
    seeds: int | None,
    out: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Run the scenario's sweep grid × seeds; write runs.parquet, points.csv and plots."""
    from sim.outputs.plot import plot_sweep
    from sim.outputs.results import meta
    from sim.results.directories import default_out
    from sim.sweep import finished_runs, plan, run_sweep, staging_dir

    sc = _load(scenario, overrides, scan_trace=False)
    tasks = plan(sc, scenario, seeds)
    target = out or default_out(RESULTS_ROOT, sc.name, "sweep")
    provenance = {
        "scenario": sc.name,
        "grid": sc.sweep.grid if sc.sweep else {},
        "variants": sc.sweep.variants if sc.sweep else {},
        "target": sc.sweep.target if sc.sweep else None,
        **meta(0.0, sc.seed),
    }
    check_sweep_out(target, sc.name)
    click.echo(f"{len(tasks)} runs into {target}", err=True)
    try:
        with only_writer(target):
            outcome = run_sweep(
                tasks,
                target,
                executor=executor,
                workers=workers,
                scheduler=scheduler,
                provenance=provenance,
            )
    except KeyboardInterrupt:
        kept = target if target.exists() else staging_dir(target)
        resume = _resume_command(scenario, target, seeds, overrides)
        click.echo(
            f"interrupted after {finished_runs(kept / 'tasks', tasks)} of {len(tasks)} runs "
            f"(kept in {kept}); finish with: {resume}",
            err=True,
        )
        sys.exit(130)
    for path in plot_sweep(target):
        click.echo(f"wrote {path}")
    click.echo(
        f"{len(tasks)} runs ({outcome.computed} computed, {outcome.reused} reused) -> {target}"
    )
    if outcome.failed:
        for fail in outcome.failed:
            click.echo(
                f"failed: point {fail['values']} seed {fail['seed']}: {fail['error']}", err=True
            )
        raise SystemExit(1)


def _resume_command(
    scenario: str, target: Path, seeds: int | None, overrides: tuple[str, ...]
) -> str:
    """The sweep command that plans the same runs into the same directory (the --set values
    and --seeds decide the runs' keys, so a resume without them would start afresh)."""
    args = ["hicache-sim", "sweep", scenario]
    if seeds is not None:
        args += ["--seeds", str(seeds)]
    for item in overrides:
        args += ["--set", item]
    return shlex.join([*args, "--out", str(target)])


@cli.command("capacity")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--param", required=True, help="Dotted scenario key to size, e.g. device.swa_pages.")
@click.option(
    "--target", required=True, help="METRIC>=VALUE or METRIC<=VALUE, e.g. heal_rate>=0.9."
)
@click.option(
    "--range",
    "bounds",
    nargs=2,
    type=str,
    default=None,
    metavar="LOW HIGH",
    help="Bisect this range (integers give an integer search; a _gb key takes 512MB, 2GiB, ...).",
)
@click.option("--values", default=None, help="Comma-separated values to scan instead of bisecting.")
@click.option(
    "--tolerance",
    type=float,
    default=None,
    help="Bisection resolution (> 0; default 1 for integer ends, 1/64 of the range otherwise).",
)
@click.option("--seeds", type=click.IntRange(min=2), default=5, show_default=True)
@click.option("--executor", type=click.Choice(["serial", "process", "dask"]), default="process")
@click.option("--workers", type=click.IntRange(min=1), default=None)
@_out_option
@_set_option
@_bad_input
def capacity_cmd(
    scenario: str,
    param: str,
    target: str,
    bounds: tuple[str, str] | None,
    values: str | None,
    tolerance: float | None,
    seeds: int,
    executor: str,
    workers: int | None,
    out: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Smallest value of --param that meets --target with 95 % confidence across seeds.

    Every argument is checked before the first run; a refused one exits 2 and writes nothing.
    """
    from sim.capacity import CapacitySearch
    from sim.outputs.plot import plot_capacity
    from sim.results.directories import default_out
    from sim.sweep import finished_runs
    from sim.units import param_text

    sc = _load(scenario, overrides)
    if (bounds is None) == (values is None):
        raise ScenarioError(
            "capacity", None, "give exactly one of --range LOW HIGH and --values A,B,..."
        )
    if tolerance is not None and values is not None:
        raise ScenarioError(
            "--tolerance", None, "applies only to --range (drop it, or bisect with --range)"
        )
    target_dir = out or default_out(RESULTS_ROOT, sc.name, "capacity")
    search = CapacitySearch(
        sc, scenario, param, target, seeds, target_dir, executor=executor, workers=workers
    )
    try:
        if values is not None:
            answer = search.scan(_quantities("--values", values.split(","), param))
        else:
            assert bounds is not None
            low, high = _quantities("--range", list(bounds), param)
            answer = search.bisect(low, high, tolerance)
    except KeyboardInterrupt:
        finished = finished_runs(target_dir / TASKS)
        click.echo(
            f"interrupted after {finished} finished runs; they are kept in "
            f"{target_dir / 'tasks'} and a rerun with --out {target_dir} reuses them",
            err=True,
        )
        sys.exit(130)
    search.save(answer)
    for ev in answer.evaluations:
        verdict = "meets" if ev.meets else "fails"
        click.echo(
            f"{param}={param_text(param, ev.value)}: mean {ev.mean:.4g} "
            f"CI [{ev.ci_low:.4g}, {ev.ci_high:.4g}] n={ev.n} {verdict}"
        )
    click.echo(answer.describe())
    for path in plot_capacity(target_dir):
        click.echo(f"wrote {path}")
    click.echo(f"evidence in {target_dir}")


def _quantities(option: str, texts: list[str], param: str) -> list[int | float]:
    """Command-line numbers for `param` (a `_gb` key also takes 512MB, 2GiB, ...)."""
    from sim.units import parse_quantity

    numbers = []
    for text in texts:
        if not text.strip():
            raise ScenarioError(
                option, None, f"an empty value in {','.join(texts)!r} (give e.g. 1,2,4)"
            )
        try:
            numbers.append(parse_quantity(text, param))
        except ValueError as exc:
            raise ScenarioError(option, None, str(exc)) from None
    return numbers


@cli.command("validate")
@click.argument("scenario", type=click.Path(dir_okay=False))
@_set_option
@_bad_input
def validate_cmd(scenario: str, overrides: tuple[str, ...]) -> None:
    """Check a scenario without running it, referenced trace files included."""
    sc = _load(scenario, overrides, scan_trace=False)
    path = sc.trace_path()
    requests = _trace_requests(sc)
    extra = f", trace {path} ({requests} requests)" if path is not None else ""
    click.echo(f"{scenario}: valid ({sc.name}, heal={sc.heal}{extra})")
    _print_sources(sc)
    raw = read_document(Path(scenario))
    for item in overrides:
        key, value = parse_override(item)
        apply_override(raw, key, value)
    for pool in defaulted_storage_pools(raw):
        click.echo(
            f"note: storage.pools.{pool} is not given: the {pool} pool is stored unbounded and "
            "fault-free (the defaults; the resolved configuration lists them)"
        )


def _print_sources(scenario: Scenario) -> None:
    """The values a profile, a preset or SGLang's rules set, and the scenario's own values that
    differ from its profiles."""
    doc = scenario_document(scenario)
    given = scenario.sources.from_profiles()
    if given:
        click.echo("from profiles, the preset and SGLang's rules:")
    for key, source in given.items():
        click.echo(f"  {key} = {show_value(get(doc, key))}  ({source})")
    for key, source in scenario.sources.of.items():
        if source.startswith(f"{USER};"):
            shown = show_value(get(doc, key))
            click.echo(f"note: {key} = {shown} is the scenario's own;{source[len(USER) + 1 :]}")


@cli.command("export-trace")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--pool", default="kv", show_default=True, help="Storage pool to export.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="CSV file to write (default: RUN_DIR/storage_trace_<pool>.csv).",
)
@_bad_input
def export_trace_cmd(run_dir: Path, pool: str, out: Path | None) -> None:
    """Write a run's storage accesses of one pool as a libCacheSim CSV trace."""
    from sim.outputs.results import PoolNotInRun, export_libcachesim_csv

    target = out or run_dir / f"storage_trace_{pool}.csv"
    with _reading(run_dir):
        try:
            n = export_libcachesim_csv(run_dir, pool, target)
        except FileNotFoundError as exc:
            raise ScenarioError(str(run_dir), "storage_trace.parquet", str(exc)) from None
        except PoolNotInRun as exc:
            raise ScenarioError(str(run_dir), "--pool", str(exc)) from None
    click.echo(f"wrote {target} ({n} requests of pool {pool})")


@cli.command("calibrate")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Hardware profile to write (default: hardware-<device name>.yaml here).",
)
@click.option(
    "--device",
    "device_index",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="CUDA device index.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Timed repetitions per measurement (the median is kept).",
)
@click.option("--force", is_flag=True, help="Replace an existing --out.")
@_bad_input
def calibrate_cmd(out: Path | None, device_index: int, repeats: int, force: bool) -> None:
    """Measure this CUDA GPU's host link and memory; write a file a scenario names as
    `hardware: {calibration: FILE}`. Needs PyTorch with CUDA (the `calibrate` extra)."""
    from sim import calibrate

    if out is not None:
        check_path("--out", out)
        if (out.exists() or out.is_symlink()) and not force:
            raise FileExistsError(f"{out} already exists (use --force to replace it)")
    try:
        measurer = calibrate.open_measurer(device_index, repeats)
    except calibrate.CalibrationUnavailable as exc:
        click.echo(
            "error: calibrate needs PyTorch with a CUDA GPU "
            f"(pip install 'hicache-sim[calibrate]'): {exc}",
            err=True,
        )
        sys.exit(1)
    target = out or calibrate.default_out(measurer.device_name())
    if (target.exists() or target.is_symlink()) and not force:
        raise FileExistsError(f"{target} already exists (use --force to replace it)")
    click.echo(f"measuring {measurer.device_name()} (about a minute)", err=True)
    result = calibrate.calibrate(measurer)
    click.echo(calibrate.format_calibration(result))
    calibrate.write_calibration(result, target, force=force)
    click.echo(f"wrote {target}")


@cli.command("schema")
def schema_cmd() -> None:
    """Print the scenario JSON Schema."""
    click.echo(json.dumps(scenario_model().model_json_schema(), indent=2))


@cli.command("plot")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@_bad_input
def plot_cmd(directory: Path) -> None:
    """Draw the plots of a run, compare, sweep or capacity directory."""
    from sim.outputs.plot import plot_directory

    with _reading(directory):
        paths = plot_directory(directory)
    for path in paths:
        click.echo(f"wrote {path}")


@cli.command("report")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file to write (default: DIRECTORY/report.html).",
)
@_bad_input
def report_cmd(directory: Path, out: Path | None) -> None:
    """Write one self-contained HTML page of a run, compare, sweep or capacity directory."""
    from sim.outputs.report import write_report

    with _reading(directory):
        written = write_report(directory, out)
    click.echo(f"wrote {written}")


@contextmanager
def _reading(directory: Path) -> Iterator[None]:
    """A result directory this tool did not write as it is (junk Parquet, a configuration that
    is not a mapping or carries a Python tag, a malformed sweep.json) is bad input, exit 2."""
    try:
        yield
    except ScenarioError:
        raise
    except (*_UNREADABLE, yaml.YAMLError) as exc:
        raise ScenarioError(
            str(directory), None, f"not a readable result directory ({type(exc).__name__}: {exc})"
        ) from None


_UNREADABLE = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    cli(prog_name="hicache-sim")
