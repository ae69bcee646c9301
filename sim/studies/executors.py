"""Where a sweep's runs execute: serially, in a process pool or on a Dask cluster.

The executor changes only where a task runs, never what it returns: a task is its resolved
document (`sim.studies.grid`), and a run that raises, or whose worker dies under it, becomes a
failure record while the others finish. Results come back in completion order; the task folder
(`sim.studies.tasks`) files them by task.
"""

from __future__ import annotations

import traceback
from collections.abc import Generator
from typing import Any

from sim.engine.runner import run
from sim.scenario.loading import build_scenario
from sim.scenario.schema import ScenarioError
from sim.studies.grid import Task
from sim.studies.pool import run_all

EXECUTORS = ("serial", "process", "dask")


def execute(doc: dict[str, Any]) -> dict[str, Any]:
    """Run one resolved scenario; any exception becomes a failure record (picklable)."""
    try:
        result = run(build_scenario(doc, "<sweep task>"))
    except Exception as exc:
        return {
            "summary": None,
            "loop_lengths": [],
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    return {
        "summary": result.summary,
        "loop_lengths": [loop.length for loop in result.loops],
        "error": None,
        "traceback": None,
    }


WORKER_DIED = (
    "BrokenProcessPool: the worker process running this run died (killed by a signal, or out "
    "of memory); a rerun retries it"
)


def worker_died() -> dict[str, Any]:
    """The failure record of a run whose worker was killed under it: one lost run, not a
    reason to abandon the sweep (it is retried like any failure)."""
    return {"summary": None, "loop_lengths": [], "error": WORKER_DIED, "traceback": None}


def _dispatch(
    tasks: list[Task], executor: str, workers: int, scheduler: str | None
) -> Generator[tuple[Task, dict[str, Any]], None, None]:
    if not tasks:
        return
    if executor == "serial":
        for task in tasks:
            yield task, execute(task.doc)
    elif executor == "process":
        for index, record in run_all(execute, [task.doc for task in tasks], workers):
            yield tasks[index], record if record is not None else worker_died()
    elif executor == "dask":
        yield from _dispatch_dask(tasks, workers, scheduler)
    else:
        raise ValueError(f"unknown executor {executor!r}")


def _dispatch_dask(
    tasks: list[Task], workers: int, scheduler: str | None
) -> Generator[tuple[Task, dict[str, Any]], None, None]:
    from distributed import Client, LocalCluster
    from distributed import as_completed as dask_completed

    if scheduler:
        client = connect_scheduler(scheduler)
        cluster = None
    else:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    try:
        futures = client.map(execute, [t.doc for t in tasks], key=[f"sim-{t.key}" for t in tasks])
        by_key = {f"sim-{t.key}": t for t in tasks}
        for future in dask_completed(futures):
            yield by_key[future.key], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


SCHEDULER_TIMEOUT_S = 10.0
"""How long joining a Dask scheduler may take, handshake included, before it is bad input."""


def check_scheduler_address(address: str) -> None:
    """Refuse (exit 2) an address Dask cannot join: a scheme it does not speak, no port."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in DASK_SCHEMES:
        raise ScenarioError(
            "--scheduler",
            None,
            f"{address!r}: unknown scheme {scheme!r}; a Dask scheduler address is "
            f"{' or '.join(s + '://' for s in DASK_SCHEMES)}HOST:PORT, e.g. tcp://10.0.0.5:8786",
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ScenarioError(
            "--scheduler",
            None,
            f"{address!r} is not HOST:PORT with a port in 1-65535 (e.g. tcp://10.0.0.5:8786)",
        )


def connect_scheduler(address: str, timeout_s: float | None = None) -> Any:
    """A Dask client joined to the scheduler at `address`, or a ScenarioError naming it.

    Dask's own timeout covers the connect but not the handshake, so a port that speaks another
    protocol (an HTTP server waits for a request forever) would hang the sweep: the client is
    made in a daemon thread that is abandoned after `timeout_s`. A peer that answers junk makes
    Dask raise whatever its decoder hits (a ValueError, a MemoryError for a frame of exabytes)."""
    import threading

    from distributed import Client

    check_scheduler_address(address)
    timeout_s = SCHEDULER_TIMEOUT_S if timeout_s is None else timeout_s
    box: dict[str, Any] = {}

    def join() -> None:
        try:
            box["client"] = Client(address, timeout=timeout_s)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=join, name="dask-connect", daemon=True)
    thread.start()
    thread.join(timeout_s + 1)
    if "client" in box:
        return box["client"]
    error = box.get("error")
    why = (
        f"no answer within {timeout_s:g} s"
        if error is None
        else f"{type(error).__name__}: {str(error)[:200]}"
    )
    raise ScenarioError(
        "--scheduler",
        None,
        f"cannot join a Dask scheduler at {address} ({why}); is `dask scheduler` running there, "
        "and is it a Dask port?",
    )
