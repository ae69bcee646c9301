"""A process pool for sweep runs that stops at once when interrupted and outlives a dead worker.

`concurrent.futures` alone gets three things wrong for a long sweep: leaving its `with` block
on Ctrl-C or SIGTERM waits for every queued run (whose results are then thrown away); one worker
killed by a signal breaks the whole pool, failing every queued run with it; and a parent killed
with SIGKILL leaves its workers blocked on the call queue forever. Here an interrupt cancels
what is queued and ends the workers, a dead worker fails only the runs that were in flight (the
queued ones go to a fresh pool), and a worker exits once its parent is gone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

PARENT_POLL_S = 0.5
"""How often a worker checks that the process that started it is still there."""

MAX_FRUITLESS_POOLS = 3
"""Pools in a row that may break before any run started (a worker that cannot even start)
before the remaining runs are given up as failed rather than retried forever."""

_started: Any = None
"""In a worker: the queue it announces each run on as the run starts."""


def _init_worker(parent: int, started: Any) -> None:
    """Leave Ctrl-C to the parent (which ends the pool), die on SIGTERM instead of running the
    command's handler (which would make a killed worker look like a user interrupt), and exit
    when the parent is gone."""
    global _started
    _started = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """An orphan is re-parented, so a changed parent pid means the sweep is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _announced(fn: Callable[[Any], Any], job: int, arg: Any) -> Any:
    _started.put(job)
    return fn(arg)


class _Pool:
    """One ProcessPoolExecutor over some jobs, knowing which jobs have started."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context()
        self.started_queue = context.SimpleQueue()
        self.executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(), self.started_queue),
        )
        self.futures: dict[Future[Any], int] = {}
        self.started: set[int] = set()
        self.broken: set[int] = set()
        self.yielded: set[int] = set()

    def submit(self, fn: Callable[[Any], Any], jobs: dict[int, Any]) -> None:
        """Queue the jobs; the workers start with the first, so this runs where an interrupt
        already ends them."""
        for job, arg in jobs.items():
            self.futures[self.executor.submit(_announced, fn, job, arg)] = job

    def results(self) -> Iterator[tuple[int, Any]]:
        for future in as_completed(self.futures):
            job = self.futures[future]
            try:
                result = future.result()
            except BrokenProcessPool:
                self.broken.add(job)
                continue
            self.yielded.add(job)
            yield job, result

    def finished_unseen(self) -> Iterator[tuple[int, Any]]:
        """Runs that returned but were not yet handed out when the pool was stopped."""
        for future, job in self.futures.items():
            if job in self.yielded or not future.done() or future.cancelled():
                continue
            if future.exception() is None:
                self.yielded.add(job)
                yield job, future.result()

    def died(self) -> set[int]:
        """The jobs that were running when the pool broke."""
        while not self.started_queue.empty():
            self.started.add(self.started_queue.get())
        return self.broken & self.started

    def stop(self) -> None:
        """End the workers now, with signals ignored so that a second Ctrl-C cannot leave them
        running (the interpreter would then wait for them at exit). The pool then breaks and
        fails every queued future, so nothing queued runs; the futures are not cancelled first
        because the broken pool would set an exception on a cancelled one, which Python 3.11
        reports as an error in its management thread."""
        with _signals_ignored():
            processes = list((self.executor._processes or {}).values())
            for process in processes:
                process.terminate()
            self.executor.shutdown(wait=False)

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def run_all(
    fn: Callable[[Any], Any], args: list[Any], workers: int
) -> Iterator[tuple[int, Any | None]]:
    """Yield (index into `args`, fn(arg)) as each job returns, and (index, None) for a job whose
    worker died under it; an interrupt (KeyboardInterrupt, or closing the generator) ends the
    workers at once, after handing out the jobs that had already returned."""
    pending = dict(enumerate(args))
    fruitless = 0
    while pending:
        pool = _Pool(workers)
        try:
            pool.submit(fn, pending)
            yield from pool.results()
        except KeyboardInterrupt:
            pool.stop()
            yield from pool.finished_unseen()
            raise
        except BaseException:
            pool.stop()
            raise
        pool.close()
        died = pool.died()
        for job in sorted(died):
            yield job, None
        pending = {job: pending[job] for job in sorted(pool.broken - died)}
        fruitless = 0 if died else fruitless + 1
        if fruitless >= MAX_FRUITLESS_POOLS:
            for job in pending:
                yield job, None
            return


@contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in saved:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
