"""Reading the files of a result directory: a file this tool did not write as it is (junk JSON,
CSV or Parquet, a configuration that is not YAML) is bad input naming the file; a missing file
is the caller's to handle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.outputs.files import read_table
from sim.results.layout import CONFIG
from sim.spec import ScenarioError


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def read_parquet(path: Path) -> pd.DataFrame:
    try:
        return read_table(path)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None


def read_config(run_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """A run directory's resolved configuration: its text and the parsed mapping."""
    path = run_dir / CONFIG
    if not path.is_file():
        return None, {}
    text = path.read_text(encoding="utf-8")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(str(path), None, f"unreadable: {exc}") from None
    return text, doc if isinstance(doc, dict) else {}
