"""Deployments: SGLang releases, storage backends and GPUs as profiles of scenario defaults,
SGLang's memory rules, and the resolution of a scenario's layers with the source of every value."""

from sim.deployment import (  # noqa: F401  (importing them registers the profiles)
    backends,
    other_backends,
    releases,
)
