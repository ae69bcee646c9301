"""Every mistake in one pass: the file's schema errors, a missing trace and a bad `--set` (told
as the command line's) in one error, exit 2; an unknown preset without its follow-on errors."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import invoke

BAD = """\
name: bad
duration_s: 100
model: {preset: gpt-oss-120b}
device: {kv_pages: 40GiB, swa_pages: 4GiB}
host: {mode: buffer_only, pages: 64GiB, pcie_gbps: 50, bogus_key: 1}
storage:
  pools:
    kv: {capacity_gb: null}
    swa: {capacity_gb: null}
workload:
  kind: mooncake
  path: missing_trace.jsonl
"""


def write(tmp_path: Path, text: str = BAD) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def test_schema_error_missing_trace_and_bad_set_are_told_together(tmp_path: Path) -> None:
    path = write(tmp_path)
    for command in ("validate", "run"):
        args = [command, str(path), "--set", "device.kv_pages=abc"]
        if command == "run":
            args += ["--out", str(tmp_path / "out")]
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.splitlines()
        assert any(x.startswith("error: --set: device.kv_pages:") for x in lines)
        assert f"{path}: host.bogus_key: unknown key" in lines
        assert any(x.startswith(f"{path}: workload.path: trace file not found") for x in lines)
        assert not any(f"{path}: device.kv_pages" in x for x in lines), "not the file's"
        assert not (tmp_path / "out").exists()


def test_an_unknown_preset_brings_no_follow_on_errors(tmp_path: Path) -> None:
    path = write(tmp_path, BAD.replace("missing_trace.jsonl", str(tmp_path / "bad.yaml")))
    result = invoke("validate", str(path), "--set", "model.preset=gemma-3-27bx")
    assert result.exit_code == 2
    assert "--set: model.preset: unknown preset 'gemma-3-27bx'" in result.stderr
    assert "valid integer" not in result.stderr, "no complaint about the sizes it could not read"
    assert "host.bogus_key: unknown key" in result.stderr


def test_a_file_without_mistakes_but_a_bad_set_blames_the_command_line(tmp_path: Path) -> None:
    doc = yaml.safe_load(BAD)
    doc["host"].pop("bogus_key")
    doc["workload"]["path"] = str(tmp_path / "bad.yaml")
    path = write(tmp_path, yaml.safe_dump(doc))
    result = invoke("validate", str(path), "--set", "heal=keep_page")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --set: heal:"), result.stderr
