"""The SimPy layer: processes that add time and order to the plain model."""
