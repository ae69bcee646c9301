"""Conservation of pages and bytes through prefetches, and what a keep_pages heal leaves behind."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.runner import run
from sim.heal import RULES, DiscardView, keep_pages
from sim.model.existence import ExistenceCache
from sim.model.prefetch import AuxTransfer, PrefetchOp
from tests.conftest import make_scenario
from tests.model_helpers import make_storage


def test_bytes_read_are_what_was_served_and_pages_stay_within_their_bounds() -> None:
    scenario = make_scenario(
        **{
            "model.mamba": {"state_bytes": 1 << 20},
            "device.kv_pages": 400,
            "device.mamba_slots": 8,
            "storage.pools.mamba": {"put_fail_prob": 0.2},
            "storage.pools.swa": {"put_fail_prob": 0.2},
            "storage.pools.kv": {"get_fail_prob": 0.02},
            "prefetch.policy": "best_effort",
            "workload.requests": 400,
        }
    )
    result = run(scenario)
    model = scenario.model
    kv_bytes = model.page_size * model.kv.bytes_per_token
    swa_bytes = model.page_size * model.swa.bytes_per_token  # type: ignore[union-attr]
    mamba_bytes = model.mamba.state_bytes  # type: ignore[union-attr]
    pf = result.tables["prefetches"]
    issued = pf[pf["outcome"].isin(["success", "discarded"])]
    assert (issued["outcome"] == "discarded").any() and (issued["outcome"] == "success").any()
    assert (issued["completed_pages"] <= issued["hit_pages"]).all()
    assert (issued["hit_pages"] <= issued["span_pages"]).all()
    for row in issued.itertuples():
        for keys, hit in ((row.swa_keys, row.swa_hit_pages), (row.mamba_keys, row.mamba_hit_pages)):
            assert hit <= (0 if keys is None else len(keys))
        served = (
            row.completed_pages * kv_bytes
            + row.swa_hit_pages * swa_bytes
            + row.mamba_hit_pages * mamba_bytes
        )
        assert row.read_bytes == served, row
    success = issued[issued["outcome"] == "success"]
    assert (success["completed_pages"] == success["hit_pages"]).all()
    loaded = int(success["completed_pages"].sum()) * model.page_size
    assert loaded == int(result.tables["requests"]["l3_loaded_tokens"].sum())
    discarded = issued[issued["outcome"] == "discarded"]
    assert result.summary["wasted_read_bytes"] == int(discarded["read_bytes"].sum())


def test_bytes_written_are_the_new_keys_times_their_object_bytes() -> None:
    """Write dedup: the backend writes only keys it does not report as stored, so with no faults
    the bytes crossing the write channel are each pool's inserts times its object size, while
    the bytes staged (which cross PCIe) count every key of every node written."""
    scenario = make_scenario(
        **{
            "model.mamba": {"state_bytes": 1 << 20},
            "device.kv_pages": 400,
            "device.mamba_slots": 8,
            "host.pages": 800,
            "heal": "drop_chain",
            "storage.hit_query": "kv_only",
            "storage.pools.swa": {"put_outage_s": [0, 30]},
            "workload.requests": 300,
        }
    )
    result = run(scenario)
    summary, writes = result.summary, result.tables["writes"]
    inserted = sum(
        summary[f"storage_{pool}_put_inserts"] * size
        for pool, size in (
            ("kv", 64 * scenario.model.kv.bytes_per_token),
            ("swa", 64 * scenario.model.swa.bytes_per_token),  # type: ignore[union-attr]
            ("mamba", 1 << 20),
        )
    )
    failed_swa = int(writes["swa_failed"].sum()) * 64 * scenario.model.swa.bytes_per_token  # type: ignore[union-attr]
    assert summary["rewrite_pages"] > 0 and summary["storage_kv_put_hits"] > 0
    assert summary["written_bytes"] == inserted + failed_swa
    assert summary["written_bytes"] < summary["staged_write_bytes"]
    assert summary["written_kv_pages"] == summary["storage_kv_put_inserts"]
    assert 0 < summary["rewrite_bytes"] <= summary["written_bytes"]


@settings(max_examples=200, deadline=None)
@given(
    span_pages=st.integers(1, 40),
    believed=st.sets(st.integers(1, 60)),
    completed=st.integers(0, 40),
    swa_hit=st.integers(0, 2),
    mamba_hit=st.integers(0, 1),
)
def test_a_keep_pages_heal_leaves_no_belief_beyond_the_kept_prefix(
    span_pages: int, believed: set[int], completed: int, swa_hit: int, mamba_hit: int
) -> None:
    span = tuple(range(1, span_pages + 1))
    completed = min(completed, span_pages)
    op = PrefetchOp(0, 0, span, 0.0, hit_pages=span_pages, completed_pages=completed)
    swa_keys = span[-min(2, span_pages) :]
    op.aux = [
        AuxTransfer("swa", swa_keys, min(swa_hit, len(swa_keys))),
        AuxTransfer("mamba", span[-1:], mamba_hit),
    ]
    cache = ExistenceCache(1000)
    cache.add(sorted(believed))
    view = DiscardView(op, 64, make_storage({"kv": [], "swa": [], "mamba": []}, window_pages=2))
    cache.invalidate(RULES["keep_pages"](view))
    aux = [(len(t.keys) if t.keys is not None else None, t.hit_pages) for t in op.aux]
    keep = keep_pages(completed * 64, 64, span_pages, aux)
    assert not any(key in cache for key in span[keep:])
    assert all(key in cache for key in span[:keep] if key in believed)
    assert all(key in cache for key in believed if key not in span)


def test_every_request_s_tokens_add_up_to_its_prompt() -> None:
    """device hit + host hit + what the device gained or lost before admission + storage +
    recomputed = prompt, for every admitted request (a prefix may reach the device, or leave
    it, while the request waits)."""
    scenario = make_scenario(
        **{"device.kv_pages": 300, "workload.requests": 400, "workload.arrival_rate_per_s": 20}
    )
    req = run(scenario).tables["requests"]
    admitted = req[req["admitted_s"].notna()]
    parts = (
        admitted["device_hit_tokens"]
        + admitted["host_hit_tokens"]
        + admitted["device_change_tokens"]
        + admitted["l3_loaded_tokens"]
        + admitted["recomputed_tokens"]
    )
    assert (parts == admitted["prompt_tokens"]).all()
    assert (admitted["device_change_tokens"] != 0).any(), "the load must make the device change"
