"""`hicache-sim calibrate --step-times`: the scenario's compute section fitted from measured
forward times, in the engine's own step model (`Timing.decode_batch_step_s`):

    decode step ms = decode_step_ms + decode_ms_per_request × batch
                     + decode_ms_per_ki_context_tokens × context tokens / 1024
    prefill ms     = tokens / prefill_tokens_per_s × 1000

Decode rows are fitted by non-negative least squares (a negative cost would make a bigger batch
faster); prefill rows through the origin. A coefficient the table cannot tell apart from
another is fixed at 0 and said so, never guessed; a phase the table lacks is left out of the
file, so the scenario's own value (or the roofline's) stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml
from pydantic import ValidationError
from scipy.optimize import nnls

from sim.core.spec import ScenarioError
from sim.scenario.sections import ComputeSpec
from sim.studies.calibrate import slug
from sim.studies.step_table import StepRow, StepTable

DECODE_KEYS = ("decode_step_ms", "decode_ms_per_ki_context_tokens", "decode_ms_per_request")
"""The decode coefficients in the order they are taken into the fit: when two columns of the
table move together, the later one is fixed at 0. With one prompt length a request's context
grows with the batch, so the per-request cost and the context's cannot be told apart: the
slope goes to the context, which is what a scenario with longer prompts must pay for."""
PREFILL_KEY = "prefill_tokens_per_s"
WORST_RESIDUAL_WARNING = 0.10
"""A row missed by more than this (relative) is worth a warning: the linear step model does
not describe the measurement there."""
SIGNIFICANT = 8
"""Figures the file's values keep: their rounding moves a step by under 1e-7 of itself."""

_UNDETERMINED = {
    "decode_ms_per_ki_context_tokens": "every decode row attends the same context tokens, or "
    "its context moves with nothing but the batch",
    "decode_ms_per_request": "every decode row has one batch size, or each row's context "
    "tokens are the same multiple of its batch (one prompt length): measure a second "
    "prompt length to tell the per-request cost from the context's",
}


@dataclass
class StepFit:
    table: StepTable
    compute: dict[str, float]
    """The fitted keys of the scenario's `compute:` section (rounded as the file writes them)."""
    fitted_ms: list[float]
    """What the engine charges for each of `table.rows` with `compute`."""
    warnings: list[str] = field(default_factory=list)

    @property
    def residuals(self) -> list[float]:
        """(fitted - measured) / measured, a row each."""
        return [(f - r.ms) / r.ms for f, r in zip(self.fitted_ms, self.table.rows, strict=True)]

    @property
    def worst(self) -> tuple[float, StepRow]:
        """The largest relative residual (by magnitude) and its row."""
        residual, row = max(
            zip(self.residuals, self.table.rows, strict=True), key=lambda pair: abs(pair[0])
        )
        return residual, row


def fit_steps(table: StepTable, source: str) -> StepFit:
    """Fit `table`; refuse (ScenarioError on `source`) coefficients the scenario's compute
    section would refuse."""
    warnings = list(table.warnings)
    compute: dict[str, float] = {}
    decode, prefill = table.phase("decode"), table.phase("prefill")
    if prefill:
        tokens = np.array([r.tokens for r in prefill])
        ms = np.array([r.ms for r in prefill])
        ms_per_token = float(tokens @ ms / (tokens @ tokens))
        compute[PREFILL_KEY] = _round(1000.0 / ms_per_token)
    else:
        warnings.append(
            f"no prefill rows: {PREFILL_KEY} is not written (the scenario's own or the "
            "roofline's stays)"
        )
    if decode:
        compute.update(_fit_decode(decode, warnings))
    else:
        warnings.append(
            "no decode rows: the decode_* keys are not written (the scenario's own or the "
            "roofline's stay)"
        )
    _check_compute(compute, source)
    fitted = [_charged_ms(row, compute) for row in table.rows]
    fit = StepFit(table, compute, fitted, warnings)
    residual, row = fit.worst
    if abs(residual) > WORST_RESIDUAL_WARNING:
        warnings.append(
            f"the fit misses {row.where} by {residual:+.1%}: the linear step model does not "
            "describe every row"
        )
    return fit


def _fit_decode(rows: list[StepRow], warnings: list[str]) -> dict[str, float]:
    """Non-negative least squares over the columns the table determines."""
    columns = {
        "decode_step_ms": np.ones(len(rows)),
        "decode_ms_per_ki_context_tokens": np.array([r.tokens / 1024 for r in rows]),
        "decode_ms_per_request": np.array([float(r.batch_size) for r in rows]),
    }
    ms = np.array([r.ms for r in rows])
    taken: list[str] = []
    for key in DECODE_KEYS:
        trial = np.column_stack([_unit(columns[k]) for k in [*taken, key]])
        if np.linalg.matrix_rank(trial, tol=1e-9) == len(taken) + 1:
            taken.append(key)
        else:
            why = _UNDETERMINED.get(key, "it moves with the columns before it")
            warnings.append(f"{key} is undetermined ({why}); fixed at 0")
    design = np.column_stack([columns[k] for k in taken])
    scale = np.linalg.norm(design, axis=0)
    solution, _ = nnls(design / scale, ms)
    coefficients = dict.fromkeys(DECODE_KEYS, 0.0)
    for key, value in zip(taken, solution / scale, strict=True):
        coefficients[key] = _round(float(value))
    free, *_ = np.linalg.lstsq(design / scale, ms, rcond=None)
    for key, value, unbounded in zip(taken, solution, free, strict=True):
        if value == 0 and unbounded < 0:
            warnings.append(f"{key} is held at 0: the unconstrained fit would make it negative")
    order = ("decode_step_ms", "decode_ms_per_request", "decode_ms_per_ki_context_tokens")
    return {key: coefficients[key] for key in order}


def _unit(column: np.ndarray) -> np.ndarray:
    return column / np.linalg.norm(column)


def _round(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT}g}")


def _charged_ms(row: StepRow, compute: dict[str, float]) -> float:
    """The engine's time for `row` (`Timing.decode_batch_step_s`, `Timing.prefill_s`), in ms:
    a decode step is never shorter than computing its batch's tokens at the prefill rate."""
    rate = compute.get(PREFILL_KEY)
    if row.phase == "prefill":
        return row.tokens / compute[PREFILL_KEY] * 1000.0
    linear = (
        compute["decode_step_ms"]
        + compute["decode_ms_per_request"] * row.batch_size
        + compute["decode_ms_per_ki_context_tokens"] * row.tokens / 1024
    )
    return max(linear, row.batch_size / rate * 1000.0) if rate else linear


def _check_compute(compute: dict[str, float], source: str) -> None:
    """The fitted values through the scenario's own bounds (`ComputeSpec`)."""
    try:
        ComputeSpec.model_validate(compute)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        raise ScenarioError(
            source,
            None,
            f"the fit gives compute.{key} = {compute.get(key)!r}, which a scenario refuses "
            f"({error['msg']})",
        ) from None


def format_fit(fit: StepFit) -> str:
    """Each row measured against fitted and the fitted values, for the console (the warnings
    are the caller's to print)."""
    head = ("row", "phase", "batch", "tokens", "measured ms", "fitted ms", "residual")
    rows = [head]
    for row, fitted, residual in zip(fit.table.rows, fit.fitted_ms, fit.residuals, strict=True):
        rows.append(
            (
                row.where,
                row.phase,
                str(row.batch_size),
                f"{row.tokens:g}",
                f"{row.ms:.4g}",
                f"{fitted:.4g}",
                f"{residual:+.2%}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    residual, worst = fit.worst
    lines += ["", *(f"compute.{key} = {value:g}" for key, value in fit.compute.items())]
    lines.append(f"worst residual {residual:+.2%} ({worst.where})")
    return "\n".join(lines)


def set_line(fit: StepFit) -> str:
    """The fitted values as `--set` options for `run`, `sweep` or `validate`."""
    return " ".join(f"--set compute.{key}={value!r}" for key, value in fit.compute.items())


def default_out(table: Path) -> Path:
    """`compute-<table's stem>.yaml` in the current directory."""
    return Path(f"compute-{slug(table.stem, 'steps')}.yaml")


HEADER = """\
# A compute section written by `hicache-sim calibrate --step-times` (docs/compute.md,
# "Calibrating compute from measured steps"): paste it into a scenario, or pass
#   {sets}
# fitted {when} from {name} ({form}, {rows} rows)
# sha256 {sha}
# worst residual {worst:+.2%} ({where})
"""


def fit_text(fit: StepFit, when: datetime | None = None) -> str:
    """The file: a comment header saying where the values came from, then `compute:`."""
    residual, worst = fit.worst
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    header = HEADER.format(
        sets=set_line(fit),
        when=stamp,
        name=" ".join(fit.table.name.splitlines()),
        form=fit.table.form,
        rows=len(fit.table.rows),
        sha=fit.table.sha256,
        worst=residual,
        where=worst.where,
    )
    header += "".join(f"# warning: {' '.join(w.splitlines())}\n" for w in fit.warnings)
    body = yaml.safe_dump({"compute": fit.compute}, sort_keys=False, default_flow_style=False)
    return header + body


def write_fit(fit: StepFit, path: Path, force: bool = False) -> Path:
    """Write the file through a temporary file and a rename; an existing `path` is replaced
    only with `force`."""
    from sim.outputs.files import replace_file

    if (path.exists() or path.is_symlink()) and not force:
        raise FileExistsError(f"{path} already exists (use --force to replace it)")
    text = fit_text(fit)
    return replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
