"""The base every layer stands on: the strict pydantic base and its error (`spec`), registries
of extension points, units and size strings, YAML documents and `--set` overrides, bounded
reads of user files, and the confidence intervals of repeated runs (`stats`)."""
