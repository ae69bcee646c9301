"""Replays the cases on SGLang's real UnifiedRadixCache of one release, on CPU.

Run in its own process with that release's unpacked wheel first on `sys.path`:
`python -m tests.real_sglang.real RELEASE CASES_JSON OUT_JSON`. Each case builds one cache per
instance it names, all sharing one file-backend directory (`buffer_only` host mode, FULL+SWA or
FULL+Mamba), and plays its steps in order. A step is one request: match on the device, prefetch
the rest from storage, let the prefetch complete and admit it, insert the whole sequence, back
it up and wait for the write. That order is the driver's emulation of the scheduler (admission
and backup timing); every decision inside it is SGLang's own code.

Faults act on the storage objects of one step: `delete` removes the object before the hit
query, `vanish` removes it right after the query answered, `read_fail` makes its read return
nothing, `write_fail` makes its write fail.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import sys
import time
from typing import Any

from tests.real_sglang import cpu, kits
from tests.real_sglang.cases import POOLS, tokens_of

_DISCARD = re.compile(r"kv_beliefs_kept_pages=(\w+)")


class _Log(logging.Handler):
    """Keeps the cache's discard lines (where SGLang reports what the heal kept)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "prefetch discarded" in message:
            self.lines.append(message)


class Case:
    """One case on one release: its caches, its storage directory and what it observed."""

    def __init__(self, kit: Any, case: dict[str, Any]) -> None:
        self.kit = kit
        self.case = case
        self.page = case["page_size"]
        self.storage_dir = kit.storage_dir()
        self.instances: dict[str, Any] = {}
        self.hashes: dict[tuple[int, ...], str] = {}
        self.log = _Log()
        logger = logging.getLogger("sglang")
        logger.addHandler(self.log)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)  # 0.5.19 leaves it to the root's ERROR

    def instance(self, name: str) -> Any:
        if name not in self.instances:
            self.instances[name] = self.kit.build(self.storage_dir, self.case)
        return self.instances[name]

    # ------------------------------------------------------------------ faults

    def _files(self, pool: str, page_hash: str) -> list[str]:
        suffix = "" if pool == "kv" else f".{pool}"
        found = glob.glob(os.path.join(self.storage_dir, f"{page_hash}{suffix}_*.bin"))
        return found

    def _target(self, fault: dict[str, Any], tokens: list[int]) -> str:
        key = tuple(tokens[: (fault["page"] + 1) * self.page])
        return self.hashes[key]

    def _arm(self, step: int, tokens: list[int], backend: Any) -> list[Any]:
        """Arm this step's faults on `backend`; returns the undo actions."""
        undo: list[Any] = []
        for fault in self.case.get("faults", []):
            if fault["step"] != step:
                continue
            kind, pool = fault["kind"], fault["pool"]
            if kind == "write_fail":
                target = None
                prefix = tokens[: (fault["page"] + 1) * self.page]
                undo.append(self._fail_writes(backend, pool, prefix))
                continue
            target = self._target(fault, tokens)
            if kind == "delete":
                for path in self._files(pool, target):
                    os.remove(path)
            elif kind == "vanish":
                undo.append(self._vanish_after_query(backend, pool, target))
            elif kind == "read_fail":
                undo.append(self._fail_reads(backend, pool, target))
            else:
                raise ValueError(f"unknown fault kind {kind!r}")
        return undo

    def _vanish_after_query(self, backend: Any, pool: str, target: str) -> Any:
        original = backend.batch_exists_v2

        def exists(*args: Any, **kwargs: Any) -> Any:
            answer = original(*args, **kwargs)
            for path in self._files(pool, target):
                os.remove(path)
            return answer

        backend.batch_exists_v2 = exists
        return lambda: setattr(backend, "batch_exists_v2", original)

    def _fail_reads(self, backend: Any, pool: str, target: str) -> Any:
        original = backend.get
        key = target if pool == "kv" else f"{target}.{pool}"

        def get(storage_key: str, *args: Any, **kwargs: Any) -> Any:
            if storage_key == key:
                return None
            return original(storage_key, *args, **kwargs)

        backend.get = get
        return lambda: setattr(backend, "get", original)

    def _fail_writes(self, backend: Any, pool: str, prefix: list[int]) -> Any:
        """The write of the object of `pool` at the page ending `prefix` fails (its hash is
        only known once the step has inserted the sequence, so it is looked up at write time)."""
        original = backend.set

        def put(storage_key: str, *args: Any, **kwargs: Any) -> Any:
            page_hash = self.hashes.get(tuple(prefix))
            key = page_hash if pool == "kv" else f"{page_hash}.{pool}"
            if page_hash is not None and storage_key == key:
                return False
            return original(storage_key, *args, **kwargs)

        backend.set = put
        return lambda: setattr(backend, "set", original)

    # ------------------------------------------------------------------ steps

    def step(self, index: int, step: dict[str, Any]) -> dict[str, Any]:
        tokens = tokens_of(step["seq"], self.page)
        inst = self.instance(step["instance"])
        backend = self.kit.backend(inst)
        observed = _Observer(backend, self.kit, inst)
        undo = self._arm(index, tokens, backend)
        self.log.lines.clear()
        try:
            record = self.kit.request(inst, tokens, f"r{index}", observed)
            self.kit.insert(inst, tokens)
            self._learn_hashes(inst, tokens)
            self.kit.backup(inst, tokens)
        finally:
            for action in reversed(undo):
                action()
            observed.close()
        keep = None
        for line in self.log.lines:
            found = _DISCARD.search(line)
            if found and found.group(1) != "None":
                keep = int(found.group(1))
        page_hashes = [
            self.hashes[tuple(tokens[: (i + 1) * self.page])]
            for i in range(len(tokens) // self.page)
        ]
        record.update(
            keep_pages=keep,
            written=observed.written(page_hashes),
            skipped=observed.skipped(page_hashes),
            beliefs=self.kit.beliefs(inst, page_hashes),
        )
        return record

    def _learn_hashes(self, inst: Any, tokens: list[int]) -> None:
        for prefix, page_hash in self.kit.page_hashes(inst, tokens).items():
            self.hashes[prefix] = page_hash


class _Observer:
    """Records the hit query's answer and the writes one step makes on one backend."""

    def __init__(self, backend: Any, kit: Any, inst: Any) -> None:
        self.backend = backend
        self.queries: list[Any] = []
        self.puts: list[tuple[str, bool]] = []
        self._exists = backend.batch_exists_v2
        self._set = backend.set
        original_exists, original_set = self._exists, self._set

        def exists(*args: Any, **kwargs: Any) -> Any:
            answer = original_exists(*args, **kwargs)
            self.queries.append(answer)
            return answer

        def put(storage_key: str, *args: Any, **kwargs: Any) -> Any:
            stored = backend.exists(storage_key)
            ok = original_set(storage_key, *args, **kwargs)
            self.puts.append((storage_key, "skip" if stored else ("ok" if ok else "fail")))
            return ok

        backend.batch_exists_v2 = exists
        backend.set = put

    def close(self) -> None:
        self.backend.batch_exists_v2 = self._exists
        self.backend.set = self._set

    def _pages(self, page_hashes: list[str], verdict: str) -> dict[str, list[int]]:
        index = {h: i for i, h in enumerate(page_hashes)}
        out: dict[str, list[int]] = {pool: [] for pool in POOLS}
        for key, seen in self.puts:
            if seen != verdict:
                continue
            page_hash, _, pool = key.partition(".")
            if page_hash in index:
                out[pool or "kv"].append(index[page_hash])
        return {pool: sorted(pages) for pool, pages in out.items()}

    def written(self, page_hashes: list[str]) -> dict[str, list[int]]:
        return self._pages(page_hashes, "ok")

    def skipped(self, page_hashes: list[str]) -> dict[str, list[int]]:
        return self._pages(page_hashes, "skip")


def run_cases(release: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kit = kits.for_release(release)
    results = []
    for case in cases:
        started = time.perf_counter()
        try:
            state = Case(kit, case)
            steps = [state.step(i, step) for i, step in enumerate(case["steps"])]
            results.append({"name": case["name"], "steps": steps, "error": None})
        except Exception as error:  # one broken case is a failed case, not a broken run
            import traceback

            results.append(
                {"name": case["name"], "steps": [], "error": traceback.format_exc()[-3000:]}
            )
            del error
        finally:
            kit.cleanup()
        results[-1]["wall_s"] = round(time.perf_counter() - started, 3)
    return results


def main(argv: list[str]) -> int:
    release, cases_path, out_path = argv
    cpu.prepare(release)
    logging.basicConfig(level=logging.ERROR)
    with open(cases_path) as handle:
        cases = json.load(handle)
    results = run_cases(release, cases)
    with open(out_path, "w") as handle:
        json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
