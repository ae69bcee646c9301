"""The `hicache-sim` command group and what every command shares: loading a scenario (with its
trace read whole), the options, and the exit codes.

Exit codes: 0 success; 2 bad input (file, schema, unknown key: the message names both, and
nothing is written); 1 anything else.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import pandas as pd
import yaml

from sim.outputs.files import UnreadableTable
from sim.results.directories import check_path
from sim.scenario.loading import check_references, load_scenario
from sim.scenario.schema import Scenario, ScenarioError

F = TypeVar("F", bound=Callable[..., Any])

RESULTS_ROOT = Path("results")
DEBUG_ENV = "HICACHE_DEBUG"
"""Set (or `--debug`): an unexpected error (exit 1) prints its traceback, for bug reports."""


def debugging() -> bool:
    """`--debug` or HICACHE_DEBUG set to anything but empty, 0, false, no or off."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


debug_option = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, value: os.environ.__setitem__(DEBUG_ENV, "1") if value else None,
    help=f"Print the traceback behind an unexpected error (also {DEBUG_ENV}=1).",
)


def bad_input(fn: F) -> F:
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
            if debugging():
                traceback.print_exc()
            else:
                hint = f" (rerun with --debug or {DEBUG_ENV}=1 for the traceback)"
                click.echo(f"error: {type(exc).__name__}: {exc}{hint}", err=True)
                sys.exit(1)
            click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def load(
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
        trace_requests(scenario)
    return scenario


def sweep_tasks(
    scenario: Scenario, path: str, overrides: tuple[str, ...], seeds: int | None = None
) -> list[Any]:
    """The sweep's tasks (`sim.studies.grid.plan`); a refused target or grid point that a
    `--set` wrote is told under `--set`, not under the file."""
    from sim.scenario.loading import from_overrides
    from sim.studies.grid import plan

    try:
        return plan(scenario, path, seeds)
    except ScenarioError as exc:
        raise from_overrides(exc, overrides) from None


def warn_sizes(scenario: Scenario) -> None:
    """Sizes the schema takes but that cannot work (sim.outputs.sizing), on stderr."""
    from sim.outputs.sizing import sizing_warnings
    from sim.scenario.schema import scenario_document

    for warning in sizing_warnings(scenario_document(scenario)):
        click.echo(f"warning: {warning}", err=True)


def warn_overload(
    summary: Mapping[str, Any], scenario: Scenario, where: str = "the run", *, late: bool = True
) -> None:
    """A run whose server could not keep up (sim.outputs.overload), on stderr, and (`late`) a
    note of the requests that arrived too late to finish by the horizon, which are not
    overload."""
    from sim.outputs.overload import config_overload, late_note, overload_warning
    from sim.scenario.schema import scenario_document

    line = overload_warning(config_overload(summary, scenario_document(scenario)), where)
    if line:
        click.echo(f"warning: {line}", err=True)
    note = late_note(summary, where) if late else None
    if note:
        click.echo(f"note: {note}", err=True)


def note_late_variants(summaries: list[Mapping[str, Any]]) -> None:
    """One note for a comparison's runs: how many requests each left unfinished only for
    arriving too late to finish by the horizon (not overload)."""
    counts = [int(s.get("requests_unfinished_late") or 0) for s in summaries]
    if not any(counts):
        return
    low, high = min(counts), max(counts)
    many = f"{low:,}" if low == high else f"{low:,} to {high:,}"
    click.echo(
        f"note: {many} requests a run arrived too late to finish by the horizon (not counted "
        "as overload)",
        err=True,
    )


def warn_study_overload(tasks: Path, scenario: Scenario, what: str) -> None:
    """A sweep, capacity search or plan with overloaded runs among its finished ones, and a
    note of the requests its runs left unfinished only for arriving too late."""
    from sim.outputs.overload import study_late_note, study_overload
    from sim.scenario.schema import scenario_document

    line = study_overload(tasks, scenario_document(scenario), what)
    if line:
        click.echo(f"warning: {line}", err=True)
    note = study_late_note(tasks, what)
    if note:
        click.echo(f"note: {note}", err=True)


def trace_requests(scenario: Scenario) -> int:
    """Requests in the scenario's trace (0 without one); a malformed line raises ScenarioError."""
    return scenario.workload.scan()


set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario value by dotted key (repeatable); a relative path is relative to "
    "the current directory.",
)
out_option = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Result directory (default: a new one under results/<scenario name>/).",
)
force_option = click.option("--force", is_flag=True, help="Replace an existing --out directory.")


def executor_options(fn: F) -> F:
    """`--executor` and `--workers`, the same for every command that runs many simulations."""
    fn = click.option(
        "--workers", type=click.IntRange(min=1), default=None, help="Default: cores."
    )(fn)
    return click.option(
        "--executor",
        type=click.Choice(["serial", "process", "dask"]),
        default="process",
        show_default=True,
        help="Where the runs execute; results are identical whatever the choice.",
    )(fn)


class Commands(click.Group):
    """click's group, with click's own refusals (an unknown option, a missing argument) told
    under the same `error:` prefix as every other error of this tool, not click's `Error:`."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.ClickException as exc:
            told = io.StringIO()
            exc.show(file=told)
            click.echo(
                re.sub(r"^Error: ", "error: ", told.getvalue(), flags=re.M), err=True, nl=False
            )
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


@contextmanager
def reading(directory: Path) -> Iterator[None]:
    """A result directory this tool did not write as it is is bad input, exit 2: a file that is
    missing or is a folder, or that its parser refuses (junk JSON, CSV, Parquet or YAML). What
    the readers find wrong inside a parsed file they say themselves (ScenarioError). Any other
    exception is a bug of ours, exit 1."""
    try:
        yield
    except ScenarioError:
        raise
    except UNREADABLE as exc:
        raise ScenarioError(
            str(directory), None, f"not a readable result directory ({type(exc).__name__}: {exc})"
        ) from None


UNREADABLE = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    UnicodeDecodeError,
    json.JSONDecodeError,
    yaml.YAMLError,
    UnreadableTable,
    pd.errors.ParserError,
    pd.errors.EmptyDataError,
)
"""What a parser raises for a file that is not what its name says."""


def drawn(plot: Callable[[Path], list[Path]], directory: Path) -> list[Path]:
    """The plots of a result directory that is already complete: a figure that cannot be
    drawn is a warning, never a reason to fail a command whose runs are written."""
    try:
        return plot(directory)
    except Exception as exc:
        click.echo(f"warning: plots not drawn ({type(exc).__name__}: {exc})", err=True)
        return []


def interrupted(target: Path, work: Path) -> str:
    """What an interrupted search says: where its finished runs are kept for a rerun to reuse,
    or, when it was to replace another result (`--force`), that the old result is untouched."""
    from sim.results.layout import TASKS
    from sim.studies.tasks import finished_runs

    if work != target:
        return f"interrupted; nothing was replaced: {target} is as it was before"
    return (
        f"interrupted after {finished_runs(target / TASKS)} finished runs; they are kept in "
        f"{target / TASKS} and the same command again (the same --seeds and --set) with "
        f"--out {target} reuses them"
    )


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    cli(prog_name="hicache-sim")
