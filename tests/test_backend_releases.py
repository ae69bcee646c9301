"""Every storage backend SGLang registers, by release: a backend a release does not register is
refused with the release that brought it, the hit queries the newer backends fold with (mori's
cascading minimum, shm's nothing, a query that raises), what a raising query does to a server
in the releases that do not catch it, and what `validate` warns of a backend that cannot serve
the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.deployment.profiles import STORAGE_BACKENDS, release_names, release_order
from sim.engine.runner import run
from sim.model.heals import query_cuts
from sim.model.storage import HIT_QUERIES, HitQueryRaised
from sim.scenario.loading import ScenarioError, build_scenario
from tests.conftest import invoke, make_doc, ok
from tests.model_helpers import make_storage

SINCE = {
    "file": "0.5.18",
    "hf3fs": "0.5.18",
    "nixl": "0.5.18",
    "mooncake": "0.5.18",
    "mori": "0.5.18",
    "shm": "0.5.18",
    "aibrix": "0.5.18",
    "eic": "0.5.18",
    "simm": "0.5.18",
    "sim": "0.5.19",
    "npu_memcache": "0.5.20",
    "tensorcast": "0.5.21",
    "seaweedfs": "0.5.22",
}
"""The first release whose backend_factory.py registers each backend (read from the wheels)."""

RUN = {"workload.requests": 80, "duration_s": 60, "host.mode": "cache"}


def doc(**keys: Any) -> dict[str, Any]:
    """The tests' base scenario with these keys, its hit query left to the backend."""
    written = make_doc(**keys)
    del written["storage"]["hit_query"]
    return written


def test_every_registered_backend_says_when_it_came() -> None:
    assert {name: STORAGE_BACKENDS[name].since for name in STORAGE_BACKENDS} == SINCE


@pytest.mark.parametrize("backend", sorted(SINCE))
@pytest.mark.parametrize("release", release_names())
def test_a_release_refuses_a_backend_it_does_not_register(release: str, backend: str) -> None:
    written = doc(**{"server.sglang": release, "storage.backend": backend, "host.mode": "cache"})
    if release_order(release) >= release_order(SINCE[backend]):
        assert build_scenario(written).storage.backend == backend
        return
    refused = rf"storage\.backend: {backend} came in {SINCE[backend]}"
    with pytest.raises(ScenarioError, match=refused):
        build_scenario(written)


@pytest.mark.parametrize("sglang", ["custom", None, "latest"])
def test_without_a_release_every_backend_is_accepted_as_the_newest_runs_it(
    sglang: str | None,
) -> None:
    for backend in SINCE:
        keys: dict[str, Any] = {"storage.backend": backend, "host.mode": "cache"}
        if sglang is not None:
            keys["server.sglang"] = sglang
        scenario = build_scenario(doc(**keys))
        assert scenario.storage.backend == backend


def test_the_cli_refuses_an_unreleased_backend_naming_the_key_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.yaml"
    written = doc(**{"server.sglang": "0.5.21", "storage.backend": "seaweedfs", **RUN})
    path.write_text(yaml.safe_dump(written))
    result = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "storage.backend: seaweedfs came in 0.5.22" in result.stderr
    assert str(path) in result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- hit queries

KNOWN = {"kv": [0, 1, 2, 3], "swa": [2, 3], "mamba": [2]}
"""4 pages, a 2-page window: SWA is legal only at 4, Mamba only at 3."""


def test_the_cascading_minimum_asks_each_pool_only_up_to_the_running_minimum() -> None:
    """SWA first: SWA 4, then Mamba asked up to 4 gives 3 (the minimum's answer). Mamba
    first: Mamba 3, then SWA asked only up to 3 is legal nowhere there: 0, where the minimum
    of the pools still says 3."""
    span = [0, 1, 2, 3]
    swa_first = make_storage(KNOWN)
    mamba_first = make_storage({"kv": KNOWN["kv"], "mamba": KNOWN["mamba"], "swa": KNOWN["swa"]})
    assert HIT_QUERIES["cascading_min"](swa_first, span, 0.0) == 3
    assert HIT_QUERIES["min_of_pools"](mamba_first, span, 0.0) == 3
    assert HIT_QUERIES["cascading_min"](mamba_first, span, 0.0) == 0
    assert HIT_QUERIES["intersect"](mamba_first, span, 0.0) == 0


def test_the_cascade_reports_each_pool_at_the_running_minimum_and_heals_from_there() -> None:
    mamba_first = make_storage({"kv": KNOWN["kv"], "mamba": KNOWN["mamba"], "swa": KNOWN["swa"]})
    span = [0, 1, 2, 3]
    cuts = query_cuts(mamba_first, span, 0, 0.0, "cascading_min")
    assert cuts == {"kv": 4, "mamba": 3, "swa": 0}
    assert query_cuts(mamba_first, span, 3, 0.0, "min_of_pools") == {
        "kv": 4,
        "mamba": 3,
        "swa": 4,
    }


def test_shm_reports_nothing_for_any_model() -> None:
    span = [0, 1, 2, 3]
    assert HIT_QUERIES["none"](make_storage(KNOWN), span, 0.0) == 0
    assert HIT_QUERIES["none"](make_storage({"kv": KNOWN["kv"]}), span, 0.0) == 0
    cuts = query_cuts(make_storage(KNOWN), span, 0, 0.0, "none")
    assert cuts == {"kv": 0, "swa": 0, "mamba": 0}


def test_a_query_without_a_hybrid_implementation_raises_only_for_a_hybrid_model() -> None:
    span = [0, 1, 2, 3]
    assert HIT_QUERIES["raises"](make_storage({"kv": [0, 1, 3]}), span, 0.0) == 2
    with pytest.raises(HitQueryRaised):
        HIT_QUERIES["raises"](make_storage(KNOWN), span, 0.0)


def test_npu_memcache_folds_the_minimum_but_raises_at_an_swa_pool_with_pages_left() -> None:
    span = [0, 1, 2, 3]
    mamba = make_storage({"kv": KNOWN["kv"], "mamba": KNOWN["mamba"]})
    assert HIT_QUERIES["min_of_pools_no_swa"](mamba, span, 0.0) == 3
    with pytest.raises(HitQueryRaised):
        HIT_QUERIES["min_of_pools_no_swa"](make_storage(KNOWN), span, 0.0)
    no_kv = make_storage({"kv": [1, 2], "swa": [0, 1]})
    assert HIT_QUERIES["min_of_pools_no_swa"](no_kv, span, 0.0) == 0


def test_each_release_says_what_a_raised_hit_query_does() -> None:
    for release in release_names():
        scenario = build_scenario(doc(**{"server.sglang": release, "host.mode": "cache"}))
        expected = "miss" if release_order(release) >= (0, 5, 22) else "stop"
        assert scenario.prefetch.hit_query_error == expected, release


# ---------------------------------------------------------------------- a raising query


def _outcomes(**keys: Any) -> tuple[dict[str, int], dict[str, Any]]:
    result = run(build_scenario(doc(**{**RUN, **keys})))
    return result.tables["prefetches"]["outcome"].value_counts().to_dict(), result.summary


def test_through_0_5_21_a_raising_hit_query_stops_every_later_prefetch() -> None:
    """aibrix has no hybrid `batch_exists_v2`: the first query ends the prefetch thread, so no
    prefetch of the run gets an answer, none reads storage, and each waits for its policy."""
    outcomes, summary = _outcomes(**{"server.sglang": "0.5.21", "storage.backend": "aibrix"})
    assert set(outcomes) == {"unanswered"}
    assert outcomes["unanswered"] > 10
    assert summary["hit_query_halts"] == 1
    assert summary["storage_kv_get_hits"] == 0
    assert summary["requests_finished"] > 0


def test_from_0_5_22_the_raising_query_counts_zero_and_prefetching_goes_on() -> None:
    outcomes, summary = _outcomes(**{"server.sglang": "0.5.22", "storage.backend": "aibrix"})
    assert set(outcomes) == {"revoked"}
    assert outcomes["revoked"] > 10
    assert summary["hit_query_halts"] == 0
    assert summary["storage_kv_get_hits"] == 0


def test_the_release_not_the_backend_decides_what_a_raised_query_does() -> None:
    """0.5.21 with the controller's catch written in behaves as 0.5.22 does."""
    caught, _ = _outcomes(
        **{
            "server.sglang": "0.5.21",
            "storage.backend": "tensorcast",
            "prefetch.hit_query_error": "miss",
        }
    )
    assert set(caught) == {"revoked"}


def test_a_kv_only_model_is_served_by_a_backend_without_a_hybrid_query() -> None:
    """A KV-only model is asked through `batch_exists`, which aibrix has: its prefetches go as
    nixl's (the same write, eviction and failed-read settings) and some restore pages."""
    kv_only = {
        "server.sglang": "0.5.21",
        "model.swa": None,
        "device.swa_pages": None,
        "device.kv_pages": 200,
        "host.pages": 200,
        "workload.requests": 200,
        "storage.pools": {"kv": {}},
    }
    aibrix, _ = _outcomes(**kv_only, **{"storage.backend": "aibrix"})
    nixl, _ = _outcomes(**kv_only, **{"storage.backend": "nixl"})
    assert aibrix == nixl
    assert aibrix.get("success", 0) > 0


# ---------------------------------------------------------------------- validate


def _validate(tmp_path: Path, **keys: Any) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc(**{**RUN, **keys})))
    return ok(invoke("validate", str(path))).stderr


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        (
            {"server.sglang": "0.5.21", "storage.backend": "tensorcast"},
            "storage.backend tensorcast in SGLang 0.5.21 cannot serve this model: "
            "batch_exists_v2 raises for a hybrid model and nothing catches it",
        ),
        (
            {"server.sglang": "0.5.22", "storage.backend": "eic"},
            "storage.backend eic in SGLang 0.5.22 cannot serve this model: batch_exists_v2 "
            "raises for a hybrid model; each query counts 0 pages",
        ),
        (
            {"server.sglang": "0.5.20", "storage.backend": "npu_memcache"},
            "storage.backend npu_memcache in SGLang 0.5.20 cannot serve this model: "
            "batch_exists_v2 raises for a model with an swa pool",
        ),
        (
            {"storage.backend": "shm"},
            "storage.backend shm in the newest SGLang cannot serve this model: its hit query "
            "reports 0 pages for every model",
        ),
    ],
)
def test_validate_warns_of_a_backend_that_cannot_serve_the_model(
    tmp_path: Path, keys: dict[str, Any], says: str
) -> None:
    assert f"warning: {says}" in _validate(tmp_path, **keys)


@pytest.mark.parametrize(
    "keys",
    [
        {"server.sglang": "0.5.21", "storage.backend": "mori"},
        {"server.sglang": "0.5.22", "storage.backend": "seaweedfs"},
        {
            "server.sglang": "0.5.21",
            "storage.backend": "simm",
            "model.swa": None,
            "device.swa_pages": None,
            "storage.pools": {"kv": {}},
        },
    ],
)
def test_validate_is_quiet_where_the_backend_serves_the_model(
    tmp_path: Path, keys: dict[str, Any]
) -> None:
    assert "cannot serve" not in _validate(tmp_path, **keys)
