"""Every notebook runs top to bottom in small mode (HICACHE_SMALL=1) and is stored clean."""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO

NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if ".ipynb_checkpoints" not in p.parts}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_small_mode(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel inherits this process's environment.
    monkeypatch.setenv("HICACHE_SMALL", "1")
    assert os.environ["HICACHE_SMALL"] == "1"
    nb = nbformat.read(path, as_version=4)
    before = _files(NOTEBOOK_DIR)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell's traceback, if a cell fails
    elapsed = time.perf_counter() - started
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert not errors, errors
    # Small mode writes to a temporary directory, never beside the notebooks.
    assert _files(NOTEBOOK_DIR) == before
    print(f"{path.name}: {elapsed:.1f} s")


def test_notebooks_exist() -> None:
    names = {p.stem for p in NOTEBOOKS}
    assert {
        "heal_rate_curves",
        "capacity_planning",
        "checkpoint_interval",
        "cluster_sharing",
        "trace_replay",
        "deployments",
        "failure_kinds",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: code cells {dirty} have outputs or an execution count"
