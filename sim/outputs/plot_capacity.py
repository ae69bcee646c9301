"""The figure of a capacity search: the metric at every value tried against the target."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from sim.core.stats import parse_target
from sim.core.units import param_text, param_unit
from sim.outputs.figures import save_figure, scale_x
from sim.results.reading import (
    read_capacity,
)


def plot_capacity(directory: Path) -> list[Path]:
    return save_figure(capacity_figure(directory), directory, "capacity")


def capacity_figure(directory: Path) -> Figure:
    """A capacity search's evaluations: the metric's mean with its 95 % interval at every value
    tried, the target's bound, and the answer (the smallest value whose interval clears it)."""
    search = read_capacity(directory)
    meta = search.answer
    evals = search.evaluations.sort_values("value")
    metric, op, bound = parse_target(search.target)
    param, answer = search.param, meta.get("answer")
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(evals["value"], evals["mean"], color="0.7", linewidth=0.8, zorder=0)
    for meets, color, verdict in ((True, "C2", "meets"), (False, "C3", "fails")):
        part = evals[evals["meets"] == meets]
        if part.empty:
            continue
        below = (part["mean"] - part["ci_low"]).clip(lower=0)
        above = (part["ci_high"] - part["mean"]).clip(lower=0)
        ax.errorbar(
            part["value"],
            part["mean"],
            yerr=[below, above],
            fmt="o",
            color=color,
            capsize=3,
            label=f"{verdict} the target ({len(part)})",
        )
    ax.axhline(
        bound, color="black", linestyle="--", linewidth=1, label=f"target {metric} {op} {bound:g}"
    )
    if answer is not None:
        ax.axvline(answer, color="C2", linestyle=":", label=f"answer {_rounded(param, answer)}")
        at = evals[evals["value"] == answer]
        ax.plot(at["value"], at["mean"], marker="*", markersize=16, color="C2", linestyle="")
    scale_x(ax, evals["value"].astype(float).tolist())
    unit = param_unit(param)
    ax.set_xlabel(f"{param} ({unit})" if unit else param)
    ax.set_ylabel(f"{metric} (mean, 95 % CI over {meta.get('seeds')} seeds)")
    found = "no value meets it" if answer is None else f"answer {_rounded(param, answer)}"
    ax.set_title(
        f"{meta.get('scenario', directory.name)}\nsmallest {param.split('.')[-1]} "
        f"with {search.target}: {found}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return fig


def _rounded(key: str, value: float) -> str:
    """An answer as a figure's title shows it: three significant digits and the key's unit
    (the exact value is in capacity.json and the report)."""
    return param_text(key, float(f"{value:.3g}"))
