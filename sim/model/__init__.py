"""The plain-object model of hybrid HiCache: no SimPy, no I/O, no pandas.

Every class here can be driven directly from a unit test; the engine only adds time and order.
"""

from sim.model import presets_mla  # noqa: F401  (importing it registers its presets)
