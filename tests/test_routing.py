"""The routers' rules, one case each, against what SGLang's model gateway does."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from sim.cluster.cache_aware import CacheAware, CacheAwareSpec, PrefixTree
from sim.cluster.dynamo_kv import DynamoKvSpec, dynamo_cost, softmax_pick
from sim.cluster.llm_d import LlmDSpec, llm_d_scores
from sim.cluster.routing import ROUTERS
from sim.cluster.signals import CacheView, Router, Signals, observe
from sim.cluster.staleness import StaleLoads
from sim.engine.runner import run
from sim.scenario.schema import ScenarioError
from sim.workload.kinds import Request
from tests.conftest import make_scenario

PAGE = 64


@dataclass
class Load:
    in_flight: int = 0
    load_tokens: int = 0


def request(pages: list[int], rid: int = 0) -> Request:
    return Request(rid, 0.0, len(pages) * PAGE, 0, pages, len(pages))


def chain(start: int, n: int) -> list[int]:
    """n page keys of one prefix chain (distinct per start)."""
    return [start * 1000 + i for i in range(n)]


def router(policy: str, servers: int, **spec: object) -> Router:
    return ROUTERS[policy](**spec).build(servers, PAGE, np.random.default_rng(0))


def test_round_robin_takes_each_server_in_turn() -> None:
    r = router("round_robin", 3)
    loads = [Load(9), Load(0), Load(0)]
    assert [r.route(request(chain(1, 4)), loads, 0.0) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_spreads_uniformly() -> None:
    r = router("random", 4)
    picks = Counter(r.route(request(chain(1, 4)), [Load()] * 4, 0.0) for _ in range(4000))
    assert set(picks) == {0, 1, 2, 3}
    assert all(800 < count < 1200 for count in picks.values())


def test_power_of_two_picks_the_lower_polled_load_and_polls_on_its_interval() -> None:
    r = router("power_of_two", 2, load_poll_interval_s=30.0)
    loads = [Load(load_tokens=100), Load(load_tokens=5)]
    assert all(r.route(request(chain(1, 4)), loads, 0.0) == 1 for _ in range(20))
    loads[1].load_tokens = 1000  # not seen until the next poll
    assert r.route(request(chain(1, 4)), loads, 29.0) == 1
    assert r.route(request(chain(1, 4)), loads, 30.0) == 0


def test_prefix_hash_keeps_a_prefix_on_one_server_until_it_is_overloaded() -> None:
    r = router("prefix_hash", 4, prefix_tokens=2 * PAGE)
    loads = [Load() for _ in range(4)]
    # Requests that agree on their first two pages go to one server, whatever follows.
    home = r.route(request([7, 8, 100]), loads, 0.0)
    assert all(r.route(request([7, 8, 200 + i]), loads, 0.0) == home for i in range(10))
    homes = {r.route(request(chain(k, 3)), loads, 0.0) for k in range(1, 60)}
    assert homes == {0, 1, 2, 3}
    # Bounded load: above 1.25 x the mean (this request included) the least loaded server.
    loads[home].in_flight = 10
    other = (home + 1) % 4
    loads[other].in_flight = 1
    chosen = r.route(request([7, 8, 300]), loads, 0.0)
    assert chosen != home and loads[chosen].in_flight == 0


def test_prefix_tree_matches_the_longest_routed_prefix_and_trims_leaves_first() -> None:
    tree = PrefixTree()
    tree.insert(chain(1, 6))
    tree.insert(chain(1, 3) + chain(2, 2))
    assert tree.match(chain(1, 6)) == 6
    assert tree.match([*chain(1, 4), 5]) == 4
    assert tree.match(chain(9, 3)) == 0
    tree.trim(4)
    # Least recently routed first, and a page never before a page that extends it: the first
    # request's tail, then the second's last page.
    assert tree.match(chain(1, 6)) == 3
    assert tree.match(chain(1, 3) + chain(2, 2)) == 4
    assert set(tree.pages) == {*chain(1, 3), chain(2, 1)[0]}


def test_prefix_tree_refreshes_exactly_like_one_move_per_page() -> None:
    """insert's C-level refresh of a prompt the tree holds, and its fallback for a prompt it
    holds only the end of, leave the recency order the plain per-page loop leaves."""

    def reference(order: list[int], prompt: list[int]) -> list[int]:
        for key in reversed(prompt):
            if key in order:
                order.remove(key)
            order.append(key)
        return order

    rng = np.random.default_rng(3)
    tree, order = PrefixTree(), []
    prompts = [chain(int(rng.integers(1, 5)), 6)[: int(rng.integers(1, 7))] for _ in range(200)]
    for prompt in prompts:
        tree.insert(prompt)
        assert list(tree.pages) == reference(order, prompt)
    tree.insert(chain(1, 6))
    del tree.pages[chain(1, 6)[0]]  # not prefix-closed (insert never leaves a tree so)
    tree.insert([9, *chain(1, 6)[1:]])
    assert list(tree.pages)[-6:] == [*chain(1, 6)[:0:-1], 9]
    tree.insert(chain(1, 6))
    assert list(tree.pages)[-6:] == chain(1, 6)[::-1]
    assert tree.match(chain(1, 6)) == 6


def test_cache_aware_follows_the_cache_above_its_threshold() -> None:
    r = router("cache_aware", 3)
    assert isinstance(r, CacheAware)
    loads = [Load(), Load(), Load()]
    first = r.route(request(chain(1, 10)), loads, 0.0)
    assert first == 0, "a miss goes to the least loaded server, the lowest index on a tie"
    loads[0].in_flight = 5
    # 4 of 10 pages match (0.4 > 0.3): back to server 0 although it is busier.
    assert r.route(request(chain(1, 4) + chain(3, 6)), loads, 0.0) == 0
    # 2 of 10 (0.2): a miss, to the least loaded server.
    assert r.route(request(chain(1, 2) + chain(4, 8)), loads, 0.0) == 1


def test_cache_aware_balances_when_both_imbalance_tests_pass() -> None:
    r = router("cache_aware", 2)
    r.route(request(chain(1, 10)), [Load(), Load()], 0.0)
    # 65 - 0 > 64 and 65 > 0 x 1.5: imbalanced, to the idlest despite the full match.
    assert r.route(request(chain(1, 10)), [Load(65), Load(0)], 0.0) == 1
    # 64 - 0 is not more than 64: balanced, the match wins.
    assert r.route(request(chain(1, 10)), [Load(64), Load(0)], 0.0) == 0
    # 200 - 140 = 60: not more than 64, balanced.
    assert r.route(request(chain(1, 10)), [Load(200), Load(140)], 0.0) == 0


def test_cache_aware_miss_rule_before_sglang_pr_14650_picks_the_smallest_tree() -> None:
    r = router("cache_aware", 2, cache_aware_miss="smallest_tree")
    r.route(request(chain(1, 10)), [Load(), Load()], 0.0)  # server 0 now holds 10 pages
    assert r.route(request(chain(5, 10)), [Load(0), Load(3)], 0.0) == 1
    current = router("cache_aware", 2)
    current.route(request(chain(1, 10)), [Load(), Load()], 0.0)
    assert current.route(request(chain(5, 10)), [Load(0), Load(3)], 0.0) == 0


@pytest.mark.parametrize("policy", ROUTERS.names())
def test_one_server_always_gets_everything(policy: str) -> None:
    r = router(policy, 1)
    assert {r.route(request(chain(k, 5)), [Load(k)], float(k)) for k in range(1, 30)} == {0}


def test_each_router_spec_holds_only_its_own_knobs() -> None:
    """`cluster.router` is told apart by `policy`; a knob of another policy is refused, naming
    the policy it belongs to, and a router without a policy is the gateway's default."""
    plain = make_scenario(**{"cluster.router": {"cache_threshold": 0.5}})
    assert isinstance(plain.cluster.router, CacheAwareSpec)
    assert plain.cluster.router.cache_threshold == 0.5
    with pytest.raises(ScenarioError) as bad:
        make_scenario(**{"cluster.router": {"policy": "round_robin", "cache_threshold": 0.5}})
    assert bad.value.key == "cluster.router.cache_threshold"
    assert "policy cache_aware" in str(bad.value)
    with pytest.raises(ScenarioError) as misspelt:
        make_scenario(**{"cluster.router.policy": "cache_awre"})
    assert misspelt.value.key == "cluster.router.policy"
    assert "did you mean 'cache_aware'" in str(misspelt.value)


def test_power_of_two_polls_loads_as_often_as_the_gateway_s_python_launcher() -> None:
    """`RouterArgs.worker_load_check_interval` is 10 s (the load monitor's period)."""
    r = router("power_of_two", 2)
    loads = [Load(load_tokens=100), Load(load_tokens=5)]
    assert r.route(request(chain(1, 4)), loads, 0.0) == 1
    loads[1].load_tokens = 1000
    assert r.route(request(chain(1, 4)), loads, 9.9) == 1
    assert r.route(request(chain(1, 4)), loads, 10.0) == 0


# ---------------------------------------------------------------- KV-event routers


@dataclass
class Cached:
    """A server as the KV-event routers read it: its tree's match, its queue and its KV use."""

    device_pages: int = 0
    host_pages: int = 0
    waiting_prompts: tuple[int, ...] = ()
    held_pages: int = 0
    load_tokens: int = 0
    storage_pages: int = 0

    @property
    def in_flight(self) -> int:
        return len(self.waiting_prompts)

    @property
    def waiting(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(req=SimpleNamespace(prompt_tokens=t)) for t in self.waiting_prompts]

    @property
    def running(self) -> dict[int, SimpleNamespace]:
        return {}

    @property
    def tree(self) -> SimpleNamespace:
        def match(prompt: list[int]) -> SimpleNamespace:
            return SimpleNamespace(
                device_pages=min(self.device_pages, len(prompt)),
                host_pages=min(max(self.host_pages, self.device_pages), len(prompt)),
            )

        return SimpleNamespace(
            match=match, kv=SimpleNamespace(used=0, reserved=self.held_pages, capacity=100)
        )

    @property
    def storage(self) -> SimpleNamespace:
        run = self.storage_pages
        return SimpleNamespace(kv=SimpleNamespace(leading_run=lambda p, now: min(run, len(p))))


def test_dynamo_cost_is_prefill_blocks_after_tier_credits_plus_decode_blocks() -> None:
    """selector/default.rs `worker_logit`, by hand: 10-page prompt (640 tokens), 3 device
    pages, the host 2 further, the shared storage 4 beyond those; 128 active prefill tokens
    and 5 pages of active prompts."""
    spec = DynamoKvSpec()
    view = CacheView(device_pages=3, host_pages=5, storage_pages=9)
    load = Signals(load_tokens=5 * PAGE, prefill_tokens=2 * PAGE)
    credit = 1.0 * 3 + 0.75 * 2 + 0.5 * 4
    prefill = (2 * PAGE + 10 * PAGE) / PAGE
    assert dynamo_cost(spec, 10 * PAGE, 10, PAGE, view, load) == pytest.approx(
        1.0 * (prefill - credit) + 5 + 10
    )
    # Credits beyond the prefill blocks leave no negative prefill cost.
    flooded = CacheView(device_pages=10, host_pages=10, storage_pages=10)
    scaled = DynamoKvSpec(prefill_load_scale=2.0)
    assert dynamo_cost(scaled, 10 * PAGE, 10, PAGE, flooded, Signals()) == 10


def test_dynamo_at_temperature_zero_picks_the_cheapest_worker() -> None:
    r = router("dynamo_kv", 3)
    prompt = request(chain(1, 10))
    # Server 2 holds most of the prompt but has a deep queue of prefill: server 0 is cheapest.
    servers = [
        Cached(device_pages=4),
        Cached(device_pages=0),
        Cached(device_pages=10, waiting_prompts=(40 * PAGE,), load_tokens=40 * PAGE),
    ]
    views = [CacheView(4), CacheView(0), CacheView(10)]
    costs = [
        dynamo_cost(DynamoKvSpec(), 10 * PAGE, 10, PAGE, v, observe(s))
        for v, s in zip(views, servers, strict=True)
    ]
    assert costs.index(min(costs)) == 0 and len(set(costs)) == 3
    assert all(r.route(prompt, servers, 0.0) == 0 for _ in range(20))


def test_dynamo_softmax_draws_each_worker_with_its_normalised_weight() -> None:
    rng = np.random.default_rng(3)
    costs = [10.0, 12.0, 20.0]
    picks = Counter(softmax_pick(costs, 0.5, rng) for _ in range(20000))
    weights = np.exp(-(np.array(costs) - 10.0) / (10.0 * 0.5))
    expected = weights / weights.sum() * 20000
    assert all(abs(picks[i] - expected[i]) < 0.05 * 20000 for i in range(3))
    assert softmax_pick([5.0, 5.0], 0.0, rng) in (0, 1)


def test_llm_d_scores_are_the_weighted_scorers_by_hand() -> None:
    """Prefix: min-max over the servers holding any (6 -> 1, 2 -> 0, none -> 0); queue:
    min-max, shortest 1; KV: 1 - usage; weights 2 : 1 : 1."""
    loads = [
        Signals(waiting=4, kv_usage=0.5),
        Signals(waiting=0, kv_usage=0.1),
        Signals(waiting=2, kv_usage=0.0),
    ]
    scores = llm_d_scores(LlmDSpec(), [6, 2, 0], loads)
    assert scores == pytest.approx([2 * 1 + 0.5 + 0, 2 * 0 + 0.9 + 1, 0 + 1.0 + 0.5])
    r = router("llm_d", 3)
    servers = [
        Cached(device_pages=6, waiting_prompts=(1,) * 4, held_pages=50),
        Cached(device_pages=2, held_pages=10),
        Cached(waiting_prompts=(1, 1)),
    ]
    assert r.route(request(chain(1, 8)), servers, 0.0) == 0


def test_llm_d_reads_queue_and_kv_metrics_only_at_each_refresh() -> None:
    r = router("llm_d", 2, metrics_refresh_interval_s=1.0)
    servers = [Cached(waiting_prompts=(1,) * 3), Cached()]
    assert r.route(request(chain(1, 4)), servers, 0.0) == 1
    servers[1].waiting_prompts = (1,) * 9  # scraped at the next refresh, at 1 s
    assert r.route(request(chain(2, 4)), servers, 0.9) == 1
    assert r.route(request(chain(3, 4)), servers, 1.0) == 0


def test_a_stale_router_decides_on_the_loads_noted_that_long_ago() -> None:
    """cache_aware's imbalance rule on loads 5 s old: before any note that old the servers
    look idle; the loads noted at the routing at 0 s are seen at 5.5 s, those of 1 s at 6 s."""
    r = router("cache_aware", 2, balance_abs_threshold=1, signal_delay_s=5.0)
    assert r.route(request(chain(1, 4)), [Load(100), Load(0)], 0.0) == 0  # idle view
    assert r.route(request(chain(2, 4)), [Load(0), Load(100)], 1.0) == 0
    assert r.route(request(chain(3, 4)), [Load(0), Load(100)], 5.5) == 1  # sees 0 s
    assert r.route(request(chain(4, 4)), [Load(0), Load(100)], 6.0) == 0  # sees 1 s
    fresh = router("cache_aware", 2, balance_abs_threshold=1)
    assert fresh.route(request(chain(1, 4)), [Load(100), Load(0)], 0.0) == 1
    assert fresh.route(request(chain(3, 4)), [Load(0), Load(100)], 5.5) == 0


@pytest.mark.parametrize("policy", ["dynamo_kv", "llm_d"])
def test_kv_event_routers_see_a_routed_prefix_only_after_the_event_lag(policy: str) -> None:
    """Both servers' caches hold the prompt, but the router knows server 1 holds it only once
    the store events of its routing there, `signal_delay_s` later, have come."""
    r = router(policy, 2, signal_delay_s=1.0)
    prompt = chain(1, 10)
    servers = [Cached(), Cached(device_pages=10)]
    first = r.route(request(prompt), servers, 0.0)
    assert first in (0, 1)  # neither cache known yet: a tie on load
    servers[first].device_pages = 10
    servers[1 - first].device_pages = 0
    picks = {r.route(request(prompt), servers, 0.5 + i / 100) for i in range(20)}
    assert picks == {0, 1}, "within the lag the routed prefix is not seen"
    assert r.route(request(prompt), servers, 1.0) == first


@pytest.mark.parametrize("policy", ["dynamo_kv", "llm_d"])
def test_kv_events_report_a_routed_request_s_output_pages_too(policy: str) -> None:
    """The server stores a request's output in its tree as well, so a follow-up turn, whose
    prompt holds the earlier output, is seen whole once the lag has passed."""
    r = router(policy, 2, signal_delay_s=1.0)
    turn = Request(0, 0.0, 4 * PAGE, 2 * PAGE, chain(1, 6), 4)
    chosen = r.route(turn, [Cached(), Cached()], 0.0)
    events = r.router.events  # type: ignore[attr-defined]
    assert events.visible(chosen, [*chain(1, 6), 7], 0.5) == 0
    assert events.visible(chosen, [*chain(1, 6), 7], 1.0) == 6
    assert events.visible(1 - chosen, chain(1, 6), 9.0) == 0


def test_a_tiny_delay_hides_no_decision_older_than_it() -> None:
    """A request routed (and noted on arrival at its server) 1 s ago is seen by a router whose
    signals are 1 ns late: the next request goes to the other server, as with no delay."""
    r = router("cache_aware", 2, balance_abs_threshold=0, signal_delay_s=1e-9)
    stale = cast(StaleLoads, r)
    servers = [Load(), Load()]
    for i in range(6):
        chosen = r.route(request(chain(i + 1, 4)), servers, float(i))
        servers[chosen].in_flight += 1
        stale.observed(chosen, servers[chosen], float(i))
    assert [server.in_flight for server in servers] == [3, 3]


def test_a_stale_router_keeps_only_the_notes_a_later_routing_can_read() -> None:
    """Routings 1 s apart under a 0.5 s delay keep at most two notes a server (the one read and
    the one after it); a delay past the horizon keeps none."""
    servers = [Load(in_flight=i) for i in range(8)]
    kept = cast(StaleLoads, router("cache_aware", 8, signal_delay_s=0.5))
    past = ROUTERS["cache_aware"](signal_delay_s=200.0).build(
        8, PAGE, np.random.default_rng(0), horizon_s=100.0
    )
    for t in range(100):
        for server in servers:
            server.in_flight += 1
        for stale in (kept, cast(StaleLoads, past)):
            stale.route(request(chain(t + 1, 4)), servers, float(t))
            stale.observed(t % 8, servers[t % 8], float(t))
    assert max(len(notes) for notes in kept.notes) <= 2
    assert sum(len(notes) for notes in cast(StaleLoads, past).notes) == 0


@pytest.mark.parametrize("policy", ["cache_aware", "prefix_hash", "power_of_two"])
def test_a_cluster_routes_at_a_tiny_delay_as_at_none(policy: str) -> None:
    """Arrivals further apart than the delay: every routing sees every earlier decision and
    departure, so each request goes where it goes with no delay."""
    knobs = {"balance_abs_threshold": 1} if policy == "cache_aware" else {}
    if policy == "power_of_two":
        knobs = {"load_poll_interval_s": 0.5}

    def instances(delay_s: float) -> list[int]:
        scenario = make_scenario(
            **{
                "cluster.instances": 4,
                "cluster.router": {"policy": policy, "signal_delay_s": delay_s, **knobs},
                "workload.arrival_rate_per_s": 20,
                "workload.requests": 600,
            }
        )
        requests = run(scenario).tables["requests"].sort_values("rid")
        return requests["instance"].tolist()

    fresh = instances(0.0)
    assert len(set(fresh)) == 4
    assert instances(1e-9) == fresh
