"""`hicache-sim calibrate` through its measuring seam: a fake GPU stands in for torch, so the
table, the fit, the file and the command are checked without a GPU (the torch path itself is
not run here)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.deployment.hardware import H200_LINK, link_rates, read_calibration
from sim.scenario.loading import build_scenario
from sim.studies import calibrate as cal_mod
from sim.studies.calibrate import (
    KERNEL_TO_BULK,
    CalibrationUnavailable,
    Measurer,
    calibrate,
    default_out,
    write_calibration,
)
from tests.conftest import invoke, make_doc

H200_MIB = 143771


class FakeH200:
    """Answers with `H200_LINK`'s figures: the kernel path at every size as its one row."""

    def __init__(self, kernel: bool = True) -> None:
        self.has_kernel = kernel
        self.rows = {(s.path, s.chunk_bytes): s for s in H200_LINK}
        self.kernel_row = next(s for s in H200_LINK if s.path == "kernel")

    def device_name(self) -> str:
        return "NVIDIA H200"

    def memory_mib(self) -> int:
        return H200_MIB

    def describe(self) -> str:
        return "fake torch, fake CUDA"

    def bulk(self, direction: str) -> float:
        return self._rate(next(s for s in H200_LINK if s.path == "bulk"), direction)

    def direct(self, chunk_bytes: int, direction: str) -> float:
        return self._rate(self.rows["direct", chunk_bytes], direction)

    def kernel(self, chunk_bytes: int, direction: str) -> float | None:
        return self._rate(self.kernel_row, direction) if self.has_kernel else None

    @staticmethod
    def _rate(sample: Any, direction: str) -> float:
        return float(sample.h2d_gbps if direction == "h2d" else sample.d2h_gbps)


def _fake(kernel: bool = True) -> Measurer:
    return FakeH200(kernel)


def test_the_h200_figures_give_back_the_h200_fit() -> None:
    cal = calibrate(_fake())
    assert cal.kernel_gbps == pytest.approx(50.8)
    assert cal.bulk_gbps == pytest.approx(55.3)
    assert cal.copy_overhead_us == pytest.approx(link_rates(H200_LINK)["copy_overhead_us"])
    assert cal.copy_overhead_us == pytest.approx(3.69, abs=0.01)
    assert (cal.gpu, cal.memory_mib) == ("NVIDIA H200", H200_MIB)
    assert [s.path for s in cal.samples] == ["bulk"] + ["kernel"] * 3 + ["direct"] * 5
    assert "UTC" in cal.measured and "fake torch" in cal.measured


def test_the_file_round_trips_and_a_scenario_takes_its_hardware(tmp_path: Path) -> None:
    cal = calibrate(_fake())
    path = write_calibration(cal, tmp_path / "hw.yaml")
    text = path.read_text()
    assert text.startswith("# ") and "hardware: {calibration: hw.yaml}" in text
    assert read_calibration(path) == cal
    assert not [p for p in tmp_path.iterdir() if p.name != "hw.yaml"], "temporary file left"

    doc = make_doc(**{"workload.requests": 10})
    doc["model"] = {"preset": "gpt-oss-120b"}
    doc["hardware"] = {"calibration": str(path)}
    scenario = build_scenario(doc, "<test>")
    assert scenario.hardware.memory_mib == H200_MIB
    assert scenario.hardware.kernel_gbps == pytest.approx(50.8)
    assert scenario.hardware.bulk_gbps == pytest.approx(55.3)
    assert scenario.hardware.copy_overhead_us == pytest.approx(cal.copy_overhead_us)
    for key in ("memory_mib", "kernel_gbps", "bulk_gbps", "copy_overhead_us"):
        assert scenario.sources[f"hardware.{key}"].startswith("calibration"), key


def test_the_writer_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text("mine\n")
    with pytest.raises(FileExistsError):
        write_calibration(calibrate(_fake()), path)
    assert path.read_text() == "mine\n"
    write_calibration(calibrate(_fake()), path, force=True)
    assert read_calibration(path).gpu == "NVIDIA H200"


def test_without_a_kernel_path_the_kernel_rate_is_the_h200_ratio_of_bulk() -> None:
    cal = calibrate(_fake(kernel=False))
    assert math.isclose(KERNEL_TO_BULK, 50.8 / 55.3)
    assert cal.kernel_gbps == pytest.approx(cal.bulk_gbps * 50.8 / 55.3, abs=0.01)
    assert "kernel io not measured" in cal.measured
    assert not [s for s in cal.samples if s.path == "kernel"], "an estimate is not a sample"
    assert cal.copy_overhead_us == pytest.approx(3.69, abs=0.01)


def test_the_default_file_name_is_the_device_name_made_safe() -> None:
    assert default_out("NVIDIA H200") == Path("hardware-nvidia-h200.yaml")
    assert default_out("NVIDIA A100-SXM4-80GB") == Path("hardware-nvidia-a100-sxm4-80gb.yaml")
    assert default_out("../../") == Path("hardware-gpu.yaml")


def _no_gpu(device_index: int = 0, repeats: int = 5) -> Measurer:
    raise CalibrationUnavailable("no module named 'torch'")


def test_without_torch_or_cuda_the_command_exits_1_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cal_mod, "open_measurer", _no_gpu)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "hw.yaml"
    for args in (["--out", str(out)], []):
        result = invoke("calibrate", *args)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(
            "error: calibrate needs PyTorch with a CUDA GPU "
            "(pip install 'hicache-sim[calibrate]'): no module named 'torch'"
        )
    assert list(tmp_path.iterdir()) == []


def test_an_existing_out_needs_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cal_mod, "open_measurer", lambda *a, **k: _fake())
    out = tmp_path / "hw.yaml"
    out.write_text("mine\n")
    result = invoke("calibrate", "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "already exists (use --force to replace it)" in result.stderr
    assert out.read_text() == "mine\n"

    result = invoke("calibrate", "--out", str(out), "--force")
    assert result.exit_code == 0, (result.output, result.stderr)
    assert f"wrote {out}" in result.output
    assert "copy_overhead_us 3.69" in result.output
    assert yaml.safe_load(out.read_text())["bulk_gbps"] == pytest.approx(55.3)


def test_the_command_names_the_file_after_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cal_mod, "open_measurer", lambda *a, **k: _fake())
    monkeypatch.chdir(tmp_path)
    result = invoke("calibrate")
    assert result.exit_code == 0, (result.output, result.stderr)
    assert read_calibration(tmp_path / "hardware-nvidia-h200.yaml").memory_mib == H200_MIB
    assert "direct  2.25 MiB" in result.output
