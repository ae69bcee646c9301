"""The end-to-end oracle: every case on real SGLang and on the simulator, compared field by field.

`python -m tests.real_sglang [--releases 0.5.23,0.5.19] [--write-docs] [-k SUBSTRING]` (run.sh
installs what it needs first; `--write-docs` writes the case table into docs/fidelity.md). Real
SGLang runs one process per release (`real.py`, with that release's unpacked wheel on the path);
the simulator runs here. A case passes when every field
of every step agrees; a case marked `simplification` must disagree (its reason says why the
driver or the model cannot match there), and fails if it agrees. The last line is
`N passed, M failed`; the exit status is 1 when M > 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.real_sglang.install import NothingSelected, parser, selected
from tests.real_sglang.model import run_case

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "real-sglang"
"""Each release's wheel installed with `pip install --no-deps --target` (run.sh)."""
DOC = ROOT / "docs" / "fidelity.md"
START, END = "<!-- real-sglang cases: start -->", "<!-- real-sglang cases: end -->"
"""Where `--write-docs` puts the case table in docs/fidelity.md."""

FIELDS = (
    "device_tokens",
    "query",
    "outcome",
    "completed_tokens",
    "aux_hit_pages",
    "loaded_tokens",
    "written",
    "skipped",
    "beliefs",
)
"""What each step records on both sides: the device match (tokens), the hit query's folded
answer and per-pool boundaries (pages), the outcome (device, miss, success, discarded), the
tokens the read completed (for a DSA stack, clamped to the indexer's run), the pages each
tail-keyed aux pool served (a sidecar reports none: SGLang's result leaves KV-derived pools out),
the tokens it loaded onto the device, the
objects the step's backup wrote and found already stored (page indices per pool), and the
beliefs per pool after the step (page indices)."""


def real_records(release: str, cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        cases_path, out_path = Path(tmp, "cases.json"), Path(tmp, "out.json")
        cases_path.write_text(json.dumps(cases))
        env = dict(os.environ, PYTHONPATH=f"{WHEELS / release}{os.pathsep}{ROOT}")
        command = [sys.executable, "-m", "tests.real_sglang.real", release]
        done = subprocess.run(
            [*command, str(cases_path), str(out_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"real SGLang {release} did not run:\n{done.stderr[-4000:]}")
        return {r["name"]: r for r in json.loads(out_path.read_text())}


def differences(real: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, (theirs, mine) in enumerate(zip(real, ours, strict=True)):
        for field in FIELDS:
            if theirs.get(field) != mine.get(field):
                out.append(f"step {i} {field}: sglang {theirs.get(field)} model {mine.get(field)}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        chosen = selected(args.releases, args.k)
    except NothingSelected as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    passed = failed = 0
    rows = []
    for release, cases in chosen.items():
        real = real_records(release, cases)
        for case in cases:
            result = real[case["name"]]
            simplified = case.get("simplification", {}).get(release)
            if result["error"]:
                verdict, notes = "error", [result["error"].strip().splitlines()[-1]]
            else:
                ours = run_case(case, release)
                notes = differences(result["steps"], ours)
                if args.v:
                    for i, (theirs, mine) in enumerate(zip(result["steps"], ours, strict=True)):
                        print(f"  step {i} sglang {theirs}\n  step {i} model  {mine}")
                verdict = "agree" if not notes else "disagree"
            ok = verdict == "agree" if simplified is None else verdict == "disagree"
            passed += ok
            failed += not ok
            label = verdict if simplified is None else f"{verdict} (listed)"
            print(f"{'PASS' if ok else 'FAIL'} {release} {case['name']}: {label}")
            for note in notes if (not ok or simplified) else []:
                print(f"    {note}")
            rows.append((case, release, label, simplified))
    if args.write_docs and not args.k:
        text = DOC.read_text()
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{START}\n{table(rows)}{END}{tail}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def table(rows: list[tuple[dict[str, Any], str, str, str | None]]) -> str:
    lines = [
        "| case | release | steps | fields compared | agreement |",
        "| --- | --- | --- | --- | --- |",
    ]
    for case, release, label, simplified in rows:
        agreement = label if simplified is None else f"{label}: {simplified}"
        fields = f"{len(FIELDS)} per step"
        lines.append(
            f"| {case['name']} | {release} | {len(case['steps'])} | {fields} | {agreement} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
