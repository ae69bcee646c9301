"""Commands that run many evaluations of one scenario: sweep and capacity."""

from __future__ import annotations

import shlex
import sys
from functools import partial
from pathlib import Path
from typing import Any

import click

from sim.cli.app import (
    RESULTS_ROOT,
    bad_input,
    cli,
    drawn,
    executor_options,
    interrupted,
    load,
    out_option,
    set_option,
    sweep_tasks,
    warn_sizes,
    warn_study_overload,
)
from sim.outputs.files import replace_file
from sim.results.directories import (
    check_capacity_out,
    check_sweep_out,
    only_writer,
    replaced_at_end,
)
from sim.results.layout import CONFIG, TASKS
from sim.scenario.schema import (
    ScenarioError,
)
from sim.studies.resume import capacity_runs, foreign, origin, planned, write_origin


@cli.command("sweep")
@click.argument("scenario", type=click.Path(dir_okay=False))
@executor_options
@click.option("--scheduler", default=None, help="Dask scheduler address to join (dask only).")
@click.option("--seeds", type=click.IntRange(min=1), default=None, help="Override sweep.seeds.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sweep directory; rerunning into it computes only the missing runs.",
)
@set_option
@bad_input
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
    from sim.outputs.console import sweep_table
    from sim.outputs.plot_sweep import plot_sweep
    from sim.outputs.results import meta, resolved_yaml
    from sim.results.directories import default_out
    from sim.studies.executors import check_scheduler_address, connect_scheduler
    from sim.studies.sweep import run_sweep, staging_dir
    from sim.studies.tasks import finished_runs

    if scheduler is not None and executor != "dask":
        raise ScenarioError(
            "--scheduler", None, f"applies only to --executor dask (the executor is {executor})"
        )
    if scheduler is not None:
        check_scheduler_address(scheduler)
    sc = load(scenario, overrides, scan_trace=False)
    warn_sizes(sc)
    tasks = sweep_tasks(sc, scenario, overrides, seeds)
    target = out or default_out(RESULTS_ROOT, sc.name, "sweep")
    provenance = {
        "scenario": sc.name,
        "grid": sc.sweep.grid if sc.sweep else {},
        "variants": sc.sweep.variants if sc.sweep else {},
        "target": sc.sweep.target if sc.sweep else None,
        **meta(0.0, sc.seed),
    }
    keys = {task.key for task in tasks}
    check_sweep_out(target, sc.name, keys)
    work = target if target.exists() else staging_dir(target)
    made = origin("sweep", scenario, overrides, seeds or (sc.sweep.seeds if sc.sweep else 0))
    why = foreign(work, planned(keys), made, "sweep", keys)
    if why is not None:
        fix = "" if work == target else f"remove {work} to start afresh, "
        raise ScenarioError(
            "--out",
            None,
            f"{work} {why}; resuming would mix them into this sweep's tables: {fix}"
            "choose another --out, or rerun the command that made it",
        )
    if scheduler is not None:
        connect_scheduler(scheduler).close()
    click.echo(f"{len(tasks)} runs into {target}", err=True)
    try:
        with only_writer(target):
            write_origin(work, made)
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
    # The deployment swept, for the report's deployment card (replaced, never written through).
    config = resolved_yaml(sc)
    replace_file(target / CONFIG, lambda tmp: tmp.write_text(config))
    for path in drawn(plot_sweep, target):
        click.echo(f"wrote {path}")
    click.echo(sweep_table(outcome.points, sc.sweep.target if sc.sweep else None))
    click.echo(
        f"{len(tasks)} runs ({outcome.computed} computed, {outcome.reused} reused) -> {target}"
    )
    warn_study_overload(target / TASKS, sc, "sweep")
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
@click.argument("more_values", nargs=-1, metavar="")
@click.option("--param", required=True, help="Dotted scenario key to size, e.g. device.swa_pages.")
@click.option(
    "--target",
    required=True,
    help="METRIC>=VALUE or METRIC<=VALUE, e.g. heal_rate>=0.9 or l3_loaded_rate>=23%; or a "
    "share of the metric at a reference value of --param, run first on the same seeds: "
    "l3_loaded_rate>=95%@unbounded (null) or ...@100GB.",
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
@click.option(
    "--values",
    default=None,
    help="Values to scan instead of bisecting, separated by commas or spaces (1,2,4 or '1 2 4' "
    "or --values 1 2 4).",
)
@click.option(
    "--tolerance",
    type=float,
    default=None,
    help="Bisection resolution (> 0; default 1 for integer ends, 1/64 of the range otherwise).",
)
@click.option("--seeds", type=click.IntRange(min=2), default=5, show_default=True)
@executor_options
@out_option
@set_option
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing --out that is not a capacity search of this scenario.",
)
@bad_input
def capacity_cmd(
    scenario: str,
    more_values: tuple[str, ...],
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
    force: bool,
) -> None:
    """Smallest value of --param that meets --target with 95 % confidence across seeds.

    Every argument is checked before the first run; a refused one exits 2 and writes nothing.
    """
    from sim.outputs.answers import SAME_NOTE, same_every_seed
    from sim.outputs.overload import value_overload
    from sim.outputs.plot_capacity import plot_capacity
    from sim.results.directories import default_out
    from sim.studies.capacity import CapacitySearch

    if more_values and values is not None:
        values = " ".join([values, *more_values])
    sc = load(scenario, overrides)
    target_dir = out or default_out(RESULTS_ROOT, sc.name, "capacity")
    question = Question(sc, scenario, param, target_dir)
    question.check(target, bounds, values, tolerance, more_values)
    warn_sizes(sc)
    search = CapacitySearch(
        sc, scenario, param, target, seeds, target_dir, executor=executor, workers=workers
    )
    search.given = question.given
    made = origin("capacity", scenario, overrides, seeds, param=param)
    mine = partial(foreign, belongs=capacity_runs(sc, scenario, param, seeds), here=made)
    replace = check_capacity_out(  # after every check
        target_dir, sc.name, force, partial(mine, noun="capacity search")
    )
    with only_writer(target_dir), replaced_at_end(target_dir, replace) as work:
        search.out = work
        write_origin(work, made)
        try:
            if values is not None:
                answer = search.scan(question.numbers)
            else:
                low, high = question.numbers
                answer = search.bisect(low, high, tolerance)
        except KeyboardInterrupt:
            click.echo(interrupted(target_dir, work), err=True)
            sys.exit(130)
        search.save(answer)
    search.out = target_dir
    if search.reference is not None:
        click.echo(search.reference.describe(search))
    for ev in answer.evaluations:
        verdict = "meets" if ev.meets else "fails"
        same = f" ({SAME_NOTE})" if same_every_seed(vars(ev)) else ""
        click.echo(
            f"{param}={search.shown(ev.value)}: mean {ev.mean:.4g} "
            f"CI [{ev.ci_low:.4g}, {ev.ci_high:.4g}]{same} n={ev.n} {verdict}"
        )
    click.echo(answer.describe(search.given))
    overloaded = value_overload(target_dir / TASKS, sc, answer)
    if overloaded:
        click.echo(f"WARNING: {overloaded['statement']}")
    for path in drawn(plot_capacity, target_dir):
        click.echo(f"wrote {path}")
    click.echo(f"evidence in {target_dir}")
    warn_study_overload(target_dir / TASKS, sc, "capacity search")


def split_values(text: str) -> list[str]:
    """'1,2,4', '1 2 4' or '512 MiB, 2GiB' -> ['1', '2', '4'] / ['512 MiB', '2GiB']: commas or
    spaces separate values, and a unit written apart stays with its number. An empty item
    between two commas is kept, for the caller to refuse."""
    items: list[str] = []
    for part in text.split(","):
        words = part.split()
        if not words:
            items.append("")
            continue
        start = len(items)
        for word in words:
            if len(items) > start and word[:1].isalpha() and items[-1][-1:].isdigit():
                items[-1] = f"{items[-1]} {word}"
            else:
                items.append(word)
    return items


class Question:
    """A capacity question's arguments checked all together before the first run: every
    refusal (--param, --target, --range or --values, --tolerance, a stray argument) is told in
    one error, not one per attempt. Keeps the values as numbers and as the user wrote them."""

    def __init__(self, scenario: Any, source: str, param: str, out: Path) -> None:
        self.scenario, self.source, self.param, self.out = scenario, source, param, out
        self.problems: list[tuple[str | None, str]] = []
        self.numbers: list[int | float] = []
        self.given: dict[float, str] = {}

    def attempt(self, check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except ScenarioError as exc:
            for key, message in exc.problems:
                self.problems.append((exc.source if key is None else key, message))
            return None

    def check(
        self,
        target: str,
        bounds: tuple[str, str] | None,
        values: str | None,
        tolerance: float | None,
        stray: tuple[str, ...],
    ) -> None:
        from sim.studies.capacity_checks import (
            check_param,
            check_range,
            check_relative,
            check_target,
            check_value,
        )

        if stray and values is None:
            self.problems.append(
                (
                    None,
                    f"unexpected argument(s) {' '.join(stray)!r} after the scenario (only "
                    "--values takes several: --values 1,2,4 or --values 1 2 4)",
                )
            )
        if (bounds is None) == (values is None):
            self.problems.append(
                (None, "give exactly one of --range LOW HIGH and --values A,B,...")
            )
        if tolerance is not None and values is not None:
            self.problems.append(
                ("--tolerance", "applies only to --range (drop it, or bisect with --range)")
            )
        param_ok = self.attempt(check_param, self.scenario, self.param) is None and not any(
            key == "--param" for key, _ in self.problems
        )
        relative = self.attempt(check_relative, self.scenario, self.param, target)
        if relative is None and "@" not in target:
            self.attempt(check_target, self.scenario, target)
        elif relative is not None and param_ok:
            self.attempt(check_value, self.scenario, self.param, relative[3], "--target")
        option = "--values" if values is not None else "--range"
        texts = split_values(values) if values is not None else list(bounds or ())
        numbers = self.attempt(self._quantities, option, texts)
        if numbers is not None and bounds is not None and values is None:
            self.attempt(check_range, *numbers, tolerance)
        if numbers is not None and param_ok:
            for number in numbers:
                self.attempt(check_value, self.scenario, self.param, number, option)
        if self.problems:
            (key, message), *more = self.problems
            raise ScenarioError("capacity", key, message, more)
        self.numbers = numbers or []

    def _quantities(self, option: str, texts: list[str]) -> list[int | float]:
        """Command-line numbers for the parameter: a `_gb` key takes 512MB, 2GiB, ...; a page or
        slot key takes a size with a unit as the scenario file does (4GiB, 65536 tokens),
        converted with this model's object sizes. What the user wrote is kept for echoing."""
        from sim.core.units import parse_quantity
        from sim.scenario.schema import scenario_document
        from sim.scenario.sizes import SizeError, convert, size_keys

        size = next(
            (k for k in size_keys(scenario_document(self.scenario)) if k.key == self.param),
            None,
        )
        numbers: list[int | float] = []
        for text in texts:
            if not text.strip():
                raise ScenarioError(
                    option, None, f"an empty value in {','.join(texts)!r} (give e.g. 1,2,4)"
                )
            try:
                number = parse_quantity(text, self.param)
            except ValueError as exc:
                if size is None or size.unit == "GB":
                    raise ScenarioError(option, None, str(exc)) from None
                try:
                    number = convert(text.strip(), size)
                except SizeError as size_exc:
                    raise ScenarioError(option, None, size_exc.message) from None
            numbers.append(number)
            if any(c.isalpha() for c in text):
                self.given[float(number)] = text.strip()
        return numbers
