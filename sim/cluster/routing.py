"""Routers: which server of a cluster each request goes to (SGLang model gateway's `--policy`).

A router is built once per run from its spec (`cluster.router`, told apart by its `policy`, each
policy's spec holding only its own knobs), the server count, the page size and its own random
stream, and is asked `route(request, servers, now_s)` at each arrival, with what the gateway
knows of each server's load. The gateway matches text; here a request is its chained page keys,
so prefixes are matched and hashed page by page.
Router specs are registered in `ROUTERS`, which is also the list `cluster.router.policy`
accepts. Beside the gateway's policies, `dynamo_kv` (NVIDIA Dynamo's KV router) and `llm_d`
(llm-d's scorer pipeline) read the servers' caches as their KV events report them. Every
router may decide on signals `signal_delay_s` old.
Sources and the exact rules: docs/model.md, "Routers".
"""

from __future__ import annotations

from sim.cluster.cache_aware import CacheAwareSpec
from sim.cluster.dynamo_kv import DynamoKvSpec
from sim.cluster.llm_d import LlmDSpec
from sim.cluster.power_of_two import PowerOfTwoSpec
from sim.cluster.prefix_hash import PrefixHashSpec
from sim.cluster.random_router import RandomSpec
from sim.cluster.round_robin import RoundRobinSpec
from sim.cluster.spec import RouterSpec
from sim.core.registry import Registry

DEFAULT_ROUTER = "cache_aware"

ROUTERS: Registry[type[RouterSpec]] = Registry("router")
"""Router specs by `policy`; the spec's `build` makes the router of one run."""

ROUTERS.register("cache_aware", CacheAwareSpec)
ROUTERS.register("round_robin", RoundRobinSpec)
ROUTERS.register("random", RandomSpec)
ROUTERS.register("power_of_two", PowerOfTwoSpec)
ROUTERS.register("prefix_hash", PrefixHashSpec)
ROUTERS.register("dynamo_kv", DynamoKvSpec)
ROUTERS.register("llm_d", LlmDSpec)
