"""Deployments: SGLang eras, storage backends and GPUs as profiles of scenario defaults, SGLang's
memory rules, and the resolution of a scenario's layers with the source of every value."""
