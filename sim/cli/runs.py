"""Commands over one scenario or one result directory: run, compare, validate, schema,
export-trace, calibrate, plot, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pandas as pd

from sim.cli.app import (
    RESULTS_ROOT,
    bad_input,
    cli,
    debug_option,
    force_option,
    load,
    note_late_variants,
    out_option,
    reading,
    set_option,
    sweep_tasks,
    trace_requests,
    warn_overload,
    warn_sizes,
)
from sim.core.spec import COMMAND_LINE_SET
from sim.deployment.resolve import USER, get, show_value
from sim.engine.runner import run
from sim.outputs.console import format_table, print_summary, progress
from sim.results.directories import check_path, refuse_existing
from sim.results.layout import SUMMARY
from sim.scenario.loading import apply_override, parse_override, read_document
from sim.scenario.schema import (
    Scenario,
    ScenarioError,
    defaulted_storage_pools,
    scenario_document,
    scenario_model,
)
from sim.studies.variants import Variant, VariantSet


@cli.command("run")
@click.argument("scenario", type=click.Path(dir_okay=False))
@out_option
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@set_option
@force_option
@click.option(
    "--storage-trace",
    is_flag=True,
    help="Also record every storage access (storage_trace.parquet, for export-trace).",
)
@debug_option
@bad_input
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

    sc = load(scenario, overrides, seed)
    refuse_existing(out, force)
    warn_sizes(sc)
    _warn_horizon(sc)
    with progress(sc, sc.name) as on_progress:
        result = run(sc, storage_trace=storage_trace, on_progress=on_progress)
    target = out or default_out(RESULTS_ROOT, sc.name, "run")
    written = write_atomically(target, lambda d: write_run(result, d), force=force)
    print_summary(result, str(Path(written) / SUMMARY))
    click.echo(f"wrote {written}")
    warn_overload(result.summary, sc)


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
@out_option
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@set_option
@force_option
@bad_input
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
    from sim.studies.variants import variant_set

    found = variant_set(heals, vary, variant_specs)
    base, scenarios = _load_variants(scenario, overrides, seed, found)
    refuse_existing(out, force)
    for warning in dict.fromkeys(_horizon_warning(sc) for sc in scenarios):
        if warning is not None:
            click.echo(warning, err=True)

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
    _warn_if_identical(comparison.table, found.column)
    for (label, result), sc in zip(comparison.runs.items(), scenarios, strict=True):
        warn_overload(result.summary, sc, f"the run of {shown(label)}", late=False)
    note_late_variants([result.summary for result in comparison.runs.values()])


def _warn_if_identical(table: pd.DataFrame, column: str) -> None:
    """Variants whose runs are identical (wall clock aside) usually set a key this scenario
    never exercises (a retry interval with retries off, a pool's faults with no traffic)."""
    results = table.drop(columns=[column, "wall_s"], errors="ignore")
    if len(results) > 1 and results.astype(str).nunique().le(1).all():
        click.echo(
            f"warning: every variant gave identical results: {column} changes nothing this "
            "scenario exercises (check the key, and that the scenario reaches it)",
            err=True,
        )


def _load_variants(
    path: str, overrides: tuple[str, ...], seed: int | None, found: VariantSet
) -> tuple[Scenario, list[Scenario]]:
    """The scenario and every variant of it, or one refusal telling every problem at once: the
    scenario's own, then each variant's that its own keys cause (a bad `--heal` beside a bad
    `--set`), each under the option and label it came from."""
    base: Scenario | None = None
    problems: list[tuple[str | None, str]] = []
    first: ScenarioError | None = None
    try:
        base = load(path, overrides, seed)
    except ScenarioError as exc:
        first = exc
    scenarios = []
    for variant in found.variants:
        try:
            scenarios.append(_load_variant(path, overrides, seed, variant, base))
        except ScenarioError as exc:
            where = ";".join(variant.sets) if found.option == "--vary" else variant.label
            problems += _variant_problems(exc, f"{found.option} {where}", variant, base is None)
    if first is None and not problems:
        assert base is not None
        return base, scenarios
    if first is None:
        (key, message), *more = problems
        raise ScenarioError(path, key, message, more)
    raise ScenarioError(first.source, first.key, first.message, [*first.problems[1:], *problems])


def _variant_problems(
    exc: ScenarioError, where: str, variant: Variant, base_failed: bool
) -> list[tuple[str | None, str]]:
    """A variant's problems, each under the variant's option (its own source); with the
    scenario itself refused, only those of the keys the variant sets."""
    keys = [text.partition("=")[0].strip() for text in variant.sets]
    told: list[tuple[str | None, str]] = []
    for key, message in exc.problems:
        # The variant's option names the source; the key is a key, not a `--set` label.
        bare = key.removeprefix(f"{COMMAND_LINE_SET} ") if key else key
        ours = bare is not None and any(
            bare == k or bare.startswith(f"{k}.") or k.startswith(f"{bare}.") for k in keys
        )
        if base_failed and not ours:
            continue
        told.append((f"{where}: {bare}" if bare else where, message))
    return told


def _load_variant(
    path: str,
    overrides: tuple[str, ...],
    seed: int | None,
    variant: Variant,
    base: Scenario | None,
) -> Scenario:
    """The scenario with `--set`, then the variant's keys; a variant that replays another
    trace has that trace read whole too."""
    sc = load(path, (*overrides, *variant.sets), seed, scan_trace=False)
    if base is not None and sc.trace_path() != base.trace_path():
        trace_requests(sc)
    return sc


@cli.command("validate")
@click.argument("scenario", type=click.Path(dir_okay=False))
@set_option
@bad_input
def validate_cmd(scenario: str, overrides: tuple[str, ...]) -> None:
    """Check a scenario without running it, referenced trace files included."""
    sc = load(scenario, overrides, scan_trace=False)
    path = sc.trace_path()
    requests = trace_requests(sc)
    extra = f", trace {path} ({requests} requests)" if path is not None else ""
    if sc.sweep is not None:
        extra += f", sweep of {len(sweep_tasks(sc, scenario, overrides)):,} runs"
    click.echo(f"{scenario}: valid ({sc.name}, heal={sc.heal}{extra})")
    _print_sources(sc)
    _warn_made_up_compute(sc)
    _print_sizes(sc)
    _warn_horizon(sc)
    raw = read_document(Path(scenario))
    for item in overrides:
        key, value = parse_override(item)
        apply_override(raw, key, value)
    for pool in defaulted_storage_pools(raw):
        click.echo(
            f"note: storage.pools.{pool} is not given: the {pool} pool is stored unbounded and "
            "fault-free (the defaults; the resolved configuration lists them)"
        )


def _warn_made_up_compute(scenario: Scenario) -> None:
    """Compute speeds neither written nor derived from a GPU and a preset are the schema's
    made-up figures, on stderr (exit 0): every TTFT and any overload follow from them."""
    from sim.deployment.compute import made_up_compute

    for key in made_up_compute(scenario.sources):
        click.echo(
            f"warning: {key} = {show_value(get(scenario_document(scenario), key))} is the "
            "schema's made-up default; write it, or name hardware.gpu and model.preset to "
            "derive it from the GPU's roofline (docs/compute.md)",
            err=True,
        )


def _warn_horizon(scenario: Scenario) -> None:
    """A trace replay whose `duration_s` ends before the trace does counts only the requests
    that arrived by then, on stderr (exit 0): its shares describe the trace's first part."""
    warning = _horizon_warning(scenario)
    if warning is not None:
        click.echo(warning, err=True)


def _horizon_warning(scenario: Scenario) -> str | None:
    arrivals = getattr(scenario.workload, "arrivals_s", None)
    if arrivals is None:
        return None
    times = arrivals()
    if scenario.cluster.scale_arrivals and scenario.cluster.instances > 1:
        times = [t / scenario.cluster.instances for t in times]
    late = sum(1 for t in times if t >= scenario.duration_s)
    if not late:
        return None
    return (
        f"warning: duration_s {scenario.duration_s:g} ends before the trace: {late:,} of its "
        f"{len(times):,} requests arrive after it (the last at {max(times):,.0f} s) and are "
        "never replayed; set duration_s past the last arrival, or workload.limit to replay "
        "fewer requests on purpose"
    )


def _print_sizes(scenario: Scenario) -> None:
    """Every size as it resolved (pages, tokens, bytes, windows), and on stderr the sizes that
    are legal but cannot work (exit 0: a warning, not a refusal)."""
    from sim.outputs.sizing import resolved_sizes

    click.echo("resolved sizes:")
    for line in resolved_sizes(scenario_document(scenario)):
        click.echo(f"  {line}")
    warn_sizes(scenario)


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
@bad_input
def export_trace_cmd(run_dir: Path, pool: str, out: Path | None) -> None:
    """Write a run's storage accesses of one pool as a libCacheSim CSV trace."""
    from sim.outputs.files import refuse_output
    from sim.outputs.results import PoolNotInRun, export_libcachesim_csv

    target = out or run_dir / f"storage_trace_{pool}.csv"
    refuse_output(target)
    with reading(run_dir):
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
    help="File to write (default: hardware-<device name>.yaml, or with --step-times "
    "compute-<table name>.yaml, here).",
)
@click.option(
    "--step-times",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Fit the scenario's compute section from this table of measured forward times (a "
    "CSV of phase,batch_size,tokens,ms, or SGLang bench_one_batch JSONL) instead of "
    "measuring the host link; needs no GPU.",
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
@click.pass_context
@bad_input
def calibrate_cmd(
    ctx: click.Context,
    out: Path | None,
    step_times: Path | None,
    device_index: int,
    repeats: int,
    force: bool,
) -> None:
    """Measure this CUDA GPU's host link and memory; write a file a scenario names as
    `hardware: {calibration: FILE}`. Needs PyTorch with CUDA (the `calibrate` extra). With
    --step-times, fit `compute:` from measured step times instead (docs/compute.md)."""
    from sim.studies import calibrate

    if out is not None:
        check_path("--out", out)
        if (out.exists() or out.is_symlink()) and not force:
            raise FileExistsError(f"{out} already exists (use --force to replace it)")
    if step_times is not None:
        for name in ("device_index", "repeats"):
            if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
                option = "--device" if name == "device_index" else "--repeats"
                raise ScenarioError(option, option, "measures the host link; not with --step-times")
        _calibrate_steps(step_times, out, force)
        return
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


def _calibrate_steps(table_path: Path, out: Path | None, force: bool) -> None:
    """`calibrate --step-times`: read, fit, print, write; nothing is written on bad input."""
    from sim.outputs.files import refuse_output
    from sim.studies import step_fit
    from sim.studies.step_table import read_step_table

    check_path("--step-times", table_path)
    target = out or step_fit.default_out(table_path)
    if (target.exists() or target.is_symlink()) and not force:
        raise FileExistsError(f"{target} already exists (use --force to replace it)")
    refuse_output(target)
    fit = step_fit.fit_steps(read_step_table(table_path), str(table_path))
    click.echo(step_fit.format_fit(fit))
    for warning in fit.warnings:
        click.echo(f"warning: {warning}", err=True)
    step_fit.write_fit(fit, target, force=force)
    click.echo(f"wrote {target}; a scenario pastes its compute: section, or runs with")
    click.echo(f"  {step_fit.set_line(fit)}")


@cli.command("schema")
def schema_cmd() -> None:
    """Print the scenario JSON Schema."""
    click.echo(json.dumps(scenario_model().model_json_schema(), indent=2))


@cli.command("plot")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@bad_input
def plot_cmd(directory: Path) -> None:
    """Draw the plots of a run, compare, sweep or capacity directory."""
    from sim.outputs.plot import plot_directory

    with reading(directory):
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
@bad_input
def report_cmd(directory: Path, out: Path | None) -> None:
    """Write one self-contained HTML page of a run, compare, sweep or capacity directory."""
    from sim.outputs.report import write_report

    with reading(directory):
        written = write_report(directory, out)
    click.echo(f"wrote {written}")
