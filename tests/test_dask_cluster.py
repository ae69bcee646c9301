"""Sweeps on a running Dask cluster joined by address (`sweep --scheduler ADDRESS`): a
scheduler and a worker started as separate processes on loopback, as a two-machine cluster
would be, give the same runs as the serial executor."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import invoke, make_doc


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and one worker process on 127.0.0.1; yields the scheduler's address."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("dask")
    python_m = [sys.executable, "-m"]
    scheduler = subprocess.Popen(
        [*python_m, "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--dashboard-address", ":0", "--no-show"],
        stdout=(logs / "scheduler.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [*python_m, "distributed.cli.dask_worker", address, "--nworkers", "1",
         "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
        stdout=(logs / "worker.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout=5) as client:
                    if client.scheduler_info()["workers"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local Dask cluster did not start; logs in {logs}")
            time.sleep(0.5)
        yield address
    finally:
        for proc in (worker, scheduler):
            proc.terminate()
        for proc in (worker, scheduler):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_sweep_on_a_running_cluster_equals_the_serial_sweep(cluster: str, tmp_path: Path):
    doc = make_doc(duration_s=20, **{"workload.requests": 20})
    doc["sweep"] = {"seeds": 2, "grid": {"heal": ["none", "keep_pages"]}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    tables = {}
    for name, extra in (("serial", ["--executor", "serial"]),
                        ("cluster", ["--executor", "dask", "--scheduler", cluster])):  # fmt: skip
        out = tmp_path / name
        result = invoke("sweep", str(path), *extra, "--out", str(out))
        assert result.exit_code == 0, result.output
        runs = pd.read_parquet(out / "runs.parquet").drop(columns=["wall_s"])
        tables[name] = runs.sort_values(["point", "seed_index"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(tables["serial"], tables["cluster"])
