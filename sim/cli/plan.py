"""The `plan` command: the cheapest deployment that meets every target (sim.studies.plan)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

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
    warn_study_overload,
)
from sim.results.directories import only_writer, replaced_at_end
from sim.results.layout import TASKS
from sim.studies.resume import foreign, origin, planned, write_origin


@cli.command("plan")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option(
    "--axis",
    "axes",
    multiple=True,
    metavar="KEY=A,B,...",
    help="A dotted key and its values to search (repeatable), e.g. cluster.instances=1,2,4,8 "
    "or storage.pools.kv.capacity_gb=500GB,1TB.",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    help="METRIC>=VALUE or METRIC<=VALUE (repeatable; every one must be met), e.g. ttft_p99_s<=2.",
)
@click.option("--seeds", type=click.IntRange(min=2), default=3, show_default=True)
@executor_options
@out_option
@set_option
@click.option(
    "--force", is_flag=True, help="Replace an existing --out that is not a plan of this scenario."
)
@bad_input
def plan_cmd(
    scenario: str,
    axes: tuple[str, ...],
    targets: tuple[str, ...],
    seeds: int,
    executor: str,
    workers: int | None,
    out: Path | None,
    overrides: tuple[str, ...],
    force: bool,
) -> None:
    """The cheapest deployment of the --axis grid meeting every --target with 95 % confidence.

    Prices come from the scenario's costs: section. Every argument and every point's price is
    checked before the first run; a refused one exits 2 and writes nothing.
    """
    from sim.outputs.answers import SAME_NOTE, same_every_seed
    from sim.outputs.plot_plan import plot_plan
    from sim.outputs.report_plan import write_plan_page
    from sim.results.directories import default_out
    from sim.scenario.schema import scenario_document
    from sim.studies.plan import PlanSearch, check_plan_out, parse_axis

    sc = load(scenario, overrides)
    target_dir = out or default_out(RESULTS_ROOT, sc.name, "plan")
    search = PlanSearch(
        sc,
        scenario,
        [parse_axis(text) for text in axes],
        list(targets),
        seeds,
        target_dir,
        executor=executor,
        workers=workers,
    )
    made = origin("plan", scenario, overrides, seeds, axes=list(axes))
    keys = {task.key for task in search.tasks}
    why = partial(foreign, belongs=planned(keys), here=made, noun="plan", known=keys)
    replace = check_plan_out(target_dir, sc.name, force, why)  # after every check
    points = search.runs // seeds
    click.echo(
        f"{points} deployments × {seeds} seeds = {search.runs} runs into {target_dir}", err=True
    )
    with only_writer(target_dir), replaced_at_end(target_dir, replace) as work:
        search.out = work
        write_origin(work, made)
        try:
            answer = search.run()
        except KeyboardInterrupt:
            click.echo(interrupted(target_dir, work), err=True)
            sys.exit(130)
        tables = search.save(answer)
    search.out = target_dir
    doc = search.document(answer)
    for point in sorted(answer.points, key=lambda p: (p.cost_usd_per_hour, p.point)):
        where = " ".join(f"{k}={v}" for k, v in point.values.items())
        verdicts = "; ".join(
            f"{t.metric} {point.stats[t.metric]['mean']:.4g} "
            f"[{point.stats[t.metric]['ci_low']:.4g}, {point.stats[t.metric]['ci_high']:.4g}]"
            + (f" ({SAME_NOTE})" if same_every_seed(point.stats[t.metric]) else "")
            for t in answer.targets
        )
        verdict = "meets" if point.meets_all else "fails"
        click.echo(f"${point.cost_usd_per_hour:,.2f}/h {where}: {verdicts} n={point.n} {verdict}")
    click.echo(answer.describe())
    if doc["overloaded"]:
        click.echo(f"WARNING: {doc['overloaded']['statement']}")
    for path in drawn(lambda d: plot_plan(d, tables, doc), target_dir):
        click.echo(f"wrote {path}")
    config = scenario_document(sc)
    for path in drawn(lambda d: [write_plan_page(d, tables, doc, config)], target_dir):
        click.echo(f"wrote {path}")
    failed = sum(p.errors for p in answer.points)
    click.echo(f"evidence in {target_dir}")
    warn_study_overload(target_dir / TASKS, sc, "plan")
    if failed:
        click.echo(f"{failed} runs failed (their errors are in {target_dir / TASKS})", err=True)
        raise SystemExit(1)
