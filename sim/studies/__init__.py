"""Studies built from many runs: sweeps, capacity searches, deployment plans, compared
variants, the executors that run them, resuming one that stopped, and link calibration."""
