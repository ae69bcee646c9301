"""What a capacity search found: each evaluated value's interval over the seeds, whether it
meets the target, and the answer as a sentence.

"Meets" means the whole 95 % confidence interval over seeds is on the right side of the bound
(`interval_meets`); `plan` judges its grid by the same rule, so the two commands agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Evaluation:
    value: float
    n: int
    mean: float
    ci_low: float
    ci_high: float
    meets: bool
    errors: int


@dataclass
class CapacityAnswer:
    param: str
    target: str
    answer: float | None
    largest_failing: float | None
    evaluations: list[Evaluation]

    def describe(self, given: dict[float, str] | None = None) -> str:
        """The answer as a sentence; `given` maps values to how the user wrote them ('8GiB'),
        which is said first, the key's unit beside it."""
        if self.answer is None:
            return f"no value in range meets {self.target} with 95 % confidence"
        from sim.outputs.answers import interval_text, quantity_text

        best = next(e for e in self.evaluations if e.value == self.answer)
        gap = None if self.largest_failing is None else self.answer - self.largest_failing
        shown = quantity_text(self.param, self.answer, gap)
        written = (given or {}).get(float(self.answer))
        if written:
            shown = f"{written} ({shown})"
        line = (
            f"{self.param} = {shown}: "
            f"{interval_text(self.target.split('>')[0].split('<')[0], asdict(best))} "
            f"over {best.n} seeds"
        )
        if self.largest_failing is not None:
            line += (
                f"; {quantity_text(self.param, self.largest_failing, gap)} does not meet it "
                f"(resolved to within {quantity_text(self.param, gap, gap)})"
            )
        return line


def interval_meets(stats: dict[str, float], op: str, bound: float) -> bool:
    """A target is met with 95 % confidence when the seeds' interval lies on its side of the
    bound (`ci_low >= bound` for `>=`, `ci_high <= bound` for `<=`); capacity and plan share it
    so that they agree."""
    if op == ">=":
        return bool(stats["ci_low"] >= bound)
    return bool(stats["ci_high"] <= bound)
