"""The package's layers, measured on its imports: no import circle, and at most two imports
from a lower layer to a higher one (each a type annotation or a late import, listed here)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

LAYERS = (
    ("sim.core", "sim.results.layout", "sim.results.directories"),
    ("sim.model", "sim.heal", "sim.workload", "sim.cluster", "sim.deployment"),
    ("sim.scenario",),
    ("sim.engine",),
    ("sim.outputs", "sim.results.reading"),
    ("sim.studies", "sim.results"),
    ("sim.cli", "sim.__main__", "sim"),
)
"""Lowest first: a module may import from its own layer and those below."""

UPWARD = {
    ("sim.model.build", "sim.scenario.schema"),
    ("sim.deployment.table", "sim.studies.published_runs"),
}
"""Known imports against the layers: a type annotation under TYPE_CHECKING, and the doc-table
writer's late import of the table of published measurements rerun through the engine."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in (REPO / "sim").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _layer(module: str) -> int:
    owners = [
        (len(prefix), i)
        for i, layer in enumerate(LAYERS)
        for prefix in layer
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert owners, f"{module} is in no layer"
    return max(owners)[1]


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other modules of the package (every import, late ones too)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sim"):
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def test_no_import_circle() -> None:
    graph = _imports(_modules())
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join((*path, name)))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_imports_go_down_the_layers() -> None:
    graph = _imports(_modules())
    upward = {
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if target != "sim" and _layer(target) > _layer(name)
    }
    assert upward <= UPWARD, sorted(upward - UPWARD)
    assert len(UPWARD) <= 2


TOP_LEVEL = {"sim", "sim.__main__", "sim.heal"}
"""The package's own modules outside any layer folder: the public API, `python -m sim`, and
`sim.heal`, whose `keep_pages` is a contract other tools import by that name."""


def test_every_module_is_in_a_layer_folder() -> None:
    loose = {name for name in _modules() if name.count(".") < 2} - TOP_LEVEL
    folders = {prefix for layer in LAYERS for prefix in layer}
    assert not loose - folders, sorted(loose - folders)
