"""Whether a result directory may be resumed: one rule for sweep, capacity and plan.

A rerun into a directory may add runs to it, never mix in runs another command made: every
finished run the directory holds (in `tasks/` of `--out`, or of a sweep's hidden
`.<out>.partial`) must be one this command would make, from the same scenario and `--set`, at
a seed this command runs. The readers (report, plots, loop tables) read every run in `tasks/`,
so one leftover run of another scenario, `--set` or `--seeds` would be averaged into an answer
without a word. More seeds, or more grid or axis values, only add runs, and are resumed as a
sweep always was; anything else is refused (exit 2), or replaced with `--force` by capacity
and plan.

The rule is decided by the runs themselves (a run's key is a hash of its resolved document),
not by what the directory says made it: a repriced plan or a scenario edit that changes no run
resumes, and a directory written before the record existed is checked as well. The record,
`tasks/origin` (the scenario file's digest, `--set`, `--seeds` and the command's own
arguments), only names what differs in the refusal: "--seeds: 2 here, 3 in the directory".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

from sim.core.safe_io import read_text_bounded
from sim.outputs.files import replace_file
from sim.results.layout import TASKS

ORIGIN = "origin"
"""In `tasks/`: what made the directory's runs (JSON; no `.json` suffix, so that no reader of
`tasks/*.json` takes it for a run)."""

Belongs = Callable[[str, dict[str, Any]], bool]
"""Whether a finished run (its file's key, its record) is one this command would make."""


def origin(
    command: str, scenario_file: str, overrides: Iterable[str], seeds: int, **arguments: Any
) -> dict[str, Any]:
    """The record of what a command makes its runs from."""
    try:
        digest = hashlib.sha256(read_text_bounded(Path(scenario_file)).encode()).hexdigest()
    except (OSError, ValueError):
        digest = None
    return {
        "command": command,
        "scenario_sha256": digest,
        "set": list(overrides),
        "seeds": seeds,
        **arguments,
    }


def write_origin(work: Path, record: dict[str, Any]) -> None:
    """Record what the runs about to be made in `work` are made from (replaced, never written
    through a link planted at its path, nor into a `tasks/` that is a link: exit 2, as the
    runs would be)."""
    from sim.studies.tasks import check_task_dir

    check_task_dir(work / TASKS, [])
    (work / TASKS).mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, default=str) + "\n"
    replace_file(work / TASKS / ORIGIN, lambda tmp: tmp.write_text(text))


def finished_records(
    task_dir: Path, known: Container[str] = ()
) -> Iterable[tuple[str, dict[str, Any]]]:
    """The finished runs a reader would take from `task_dir`: (key, record) for each file
    holding the finished run its name says (the readers leave anything else out); a file
    named for a `known` key is not read (a resume reuses or reruns it: it is this command's)."""
    if not task_dir.is_dir() or task_dir.is_symlink():
        return
    for path in sorted(task_dir.glob("*.json")):
        if path.stem in known:
            continue
        try:
            record = json.loads(read_text_bounded(path))
        except (OSError, ValueError, RecursionError):
            continue
        if (
            isinstance(record, dict)
            and record.get("key") == path.stem
            and record.get("error") is None
            and isinstance(record.get("summary"), dict)
            and isinstance(record.get("values"), dict)
            and isinstance(record.get("seed_index"), int)
        ):
            yield path.stem, record


def foreign(
    directory: Path,
    belongs: Belongs,
    here: dict[str, Any],
    noun: str,
    known: Container[str] = (),
) -> str | None:
    """Why `directory`'s runs may not be resumed by this command (None: every finished run in
    it is one this command would make), naming what differs from the directory's record.
    `known`: keys this command plans, whose files need not be read (a sweep of 100,000 runs
    reads only the files it does not plan)."""
    records = finished_records(directory / TASKS, known)
    strangers = sum(not belongs(key, record) for key, record in records)
    if not strangers:
        return None
    differs = differences(_read_origin(directory), here)
    why = "; ".join(differs) if differs else "another scenario file, --set or --seeds"
    runs = "1 run" if strangers == 1 else f"{strangers:,} runs"
    return f"holds {runs} of another {noun}, which this one would not make ({why})"


def differences(there: dict[str, Any] | None, here: dict[str, Any]) -> list[str]:
    """What differs between the record in a directory and this command's, as the options say
    it; nothing when the directory has no record (one written before it existed)."""
    if there is None:
        return []
    said = [
        f"{option}: {_shown(here.get(field))} here, {_shown(there.get(field))} in the directory"
        for field, option in FIELDS
        if _shown(there.get(field)) != _shown(here.get(field))
    ]
    if there.get("scenario_sha256") != here.get("scenario_sha256"):
        said.append("the scenario changed since the directory was written")
    return said


FIELDS = (
    ("command", "the command"),
    ("param", "--param"),
    ("axes", "--axis"),
    ("seeds", "--seeds"),
    ("set", "--set"),
)
"""The arguments a record holds, as the messages name them."""


def _shown(value: Any) -> str:
    if value in (None, [], {}):
        return "none"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _read_origin(directory: Path) -> dict[str, Any] | None:
    path = directory / TASKS / ORIGIN
    try:
        record = json.loads(read_text_bounded(path))
    except (OSError, ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def planned(keys: Container[str]) -> Belongs:
    """A sweep's or plan's runs: the keys of its tasks, known before anything runs."""
    return lambda key, record: key in keys


def capacity_runs(scenario: Any, source: str, param: str, seeds: int) -> Belongs:
    """A capacity search's runs: its values are found as it bisects, so a run belongs when it
    is the run the search would make at its own value and seed (its key is the one planned for
    that value and seed index, which is below --seeds)."""
    from sim.scenario.schema import ScenarioError, SweepSpec
    from sim.studies.grid import plan

    keys: dict[str, list[str] | None] = {}

    def belongs(key: str, record: dict[str, Any]) -> bool:
        values, index = record["values"], record["seed_index"]
        if set(values) != {param} or not 0 <= index < seeds:
            return False
        value = values[param]
        name = json.dumps(value)
        if name not in keys:
            sweep = SweepSpec(seeds=seeds, grid={param: [value]})
            try:
                tasks = plan(scenario.model_copy(update={"sweep": sweep}), source)
            except (ScenarioError, ValueError, TypeError):
                keys[name] = None
            else:
                keys[name] = [task.key for task in tasks]
        made = keys[name]
        return made is not None and made[index] == key

    return belongs
