"""Plots from result directories, as PNG and SVG, by kind of directory (one module a kind of
figure: plot_run, plot_compare, plot_sweep, plot_capacity; what they share is in figures)."""

from __future__ import annotations

from pathlib import Path

from sim.outputs.plot_capacity import plot_capacity
from sim.outputs.plot_compare import plot_comparison
from sim.outputs.plot_run import plot_run
from sim.outputs.plot_sweep import plot_sweep
from sim.results.layout import Kind, detect


def plot_directory(directory: Path) -> list[Path]:
    """The plots of whatever kind of result `directory` holds."""
    kind = detect(directory)
    if kind is Kind.CAPACITY:
        return plot_capacity(directory)
    if kind is Kind.SWEEP:
        return plot_sweep(directory)
    if kind is Kind.COMPARE:
        return [plot_comparison(directory)]
    return [plot_run(directory)]
