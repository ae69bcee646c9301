"""Outputs: summary metrics, result files, plots."""
