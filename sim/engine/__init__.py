"""The SimPy layer: processes that add time and order to the plain model, one scenario's run
(`runner`) and the summary measured from its records (`metrics`)."""
