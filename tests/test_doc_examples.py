"""The docs' examples, beyond docs/api.md's Python (tests/test_api_doc.py): every scenario a
command in the README or docs/ names exists and validates with the options the command gives;
every YAML example validates; and the resolved-configuration lines docs/scenarios.md shows are
what that example resolves to."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from sim.core.documents import apply_override
from sim.outputs.results import resolved_yaml
from sim.scenario.loading import build_scenario, load_scenario
from tests.conftest import REPO, make_doc

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND = re.compile(
    r"hicache-sim (?:run|compare|sweep|capacity|plan|validate) (\S+\.yaml)([^`\n]*)"
)


def _commands() -> list[tuple[str, str, list[str]]]:
    """(page, scenario path, its --set overrides) of every command naming a scenario file."""
    found = []
    for page in PAGES:
        for path, rest in COMMAND.findall(page.read_text()):
            words = shlex.split(rest.split("#")[0].replace("\\", " "))
            sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
            found.append((page.name, path.removeprefix("../"), sets))
    return found


COMMANDS = _commands()


def test_the_docs_name_scenarios_in_commands() -> None:
    assert len({path for _, path, _ in COMMANDS}) >= 10


@pytest.mark.parametrize(
    ("page", "path", "sets"), COMMANDS, ids=[f"{p}:{s}" for p, s, _ in COMMANDS]
)
def test_every_scenario_a_command_names_validates(page: str, path: str, sets: list[str]) -> None:
    scenario = load_scenario(REPO / path, sets)
    assert scenario.name


def _yaml_blocks(page: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / page).read_text(), re.S)


def test_the_deployment_example_runs_and_resolves_as_shown() -> None:
    """docs/scenarios.md's deployment by name, and the resolved lines it shows."""
    text = (REPO / "docs" / "scenarios.md").read_text()
    example = next(b for b in _yaml_blocks("scenarios.md") if "hardware:" in b)
    scenario = build_scenario(yaml.safe_load(example), "docs/scenarios.md")
    resolved = resolved_yaml(scenario)
    shown = re.search(r"where it came from:\n\n```\n(.*?)```", text, re.S)
    assert shown is not None
    for line in shown.group(1).splitlines():
        assert line in resolved.splitlines(), line


@pytest.mark.parametrize("page", ["scenarios.md", "sweeps.md", "plan.md"])
def test_every_yaml_fragment_validates_in_a_scenario(page: str) -> None:
    """A fragment (a `model:` or `sweep:` section) validates merged into a small scenario."""
    for block in _yaml_blocks(page):
        fragment = yaml.safe_load(block)
        doc = make_doc() if "name" not in fragment else {}
        for key, value in fragment.items():
            if key == "sweep" or "name" in fragment:
                doc[key] = value
            else:
                apply_override(doc, key, value)
        if "model" in fragment:
            doc.pop("device", None)
            doc["hardware"] = {"gpu": "h200"}
        build_scenario(doc, f"docs/{page}")


def test_the_commands_run_from_the_repository_root() -> None:
    assert all((REPO / path).is_file() for _, path, _ in COMMANDS), [
        path for _, path, _ in COMMANDS if not (REPO / path).is_file()
    ]


def test_docs_metrics_documents_every_summary_key() -> None:
    """Every key a summary can have (every pool kind registered) is in docs/metrics.md, by name
    or by a pattern such as `storage_<pool>_<counter>`."""
    from sim.engine.metrics import summary_keys
    from sim.model.pools import POOL_KINDS

    names: set[str] = set()
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        tokens = re.findall(r"`([a-z0-9_<>]+)`", line)
        names.update(tokens)
        if tokens and ">" in tokens[0]:  # `storage_<pool>_get_hits`, `_get_misses`: suffixes
            stem = tokens[0][: tokens[0].rindex(">") + 1]
            names.update(stem + t for t in tokens[1:] if t.startswith("_"))
    patterns = [
        re.compile(re.sub(r"<[a-z_]+>", "[a-z0-9_]+", name) + "$") for name in names if "<" in name
    ]
    undocumented = [
        key
        for key in sorted(summary_keys(POOL_KINDS))
        if key not in names and not any(p.match(key) for p in patterns)
    ]
    assert not undocumented, undocumented
