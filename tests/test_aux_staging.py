"""The host SWA pool in buffer_only mode: a prefetch takes its window there when it is issued and
forfeits the whole fetch when the window does not fit (SGLang's `prefetch_from_storage`,
`log_prefetch_aux_alloc_failed_tokens`); writes stage their tails there only while a loads
margin stays free (`_aux_budget_blocked`); fewer than two windows is refused
(`validate_buffer_only_stack`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.core.spec import ScenarioError
from sim.engine.runner import run
from sim.model.host import AuxStaging
from tests.conftest import invoke, make_doc, make_scenario

BUSY = {
    "workload.arrival_rate_per_s": 8,
    "workload.requests": 300,
    "workload.prefixes": 100,
    "workload.prefix_tokens": 4096,
    "device.kv_pages": 600,
    "device.swa_pages": 600,
}
"""A device too small for the prefixes and arrivals fast enough that several prefetches wait
at once."""


def summary_with(swa_pages: int, **overrides: Any) -> dict[str, Any]:
    return run(make_scenario(**{**BUSY, "host.swa_pages": swa_pages, **overrides})).summary


def test_the_host_swa_pool_is_the_hicache_ratio_times_the_device_swa_pool() -> None:
    scenario = make_scenario(**{"device.swa_pages": 1000})
    assert scenario.host.swa_pages == 1000 * 64 * 12 // 10 // 64 + 1
    cache = make_scenario(**{"host.mode": "cache"})
    assert cache.host.swa_pages is None


def test_a_host_swa_pool_below_two_windows_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as refused:
        make_scenario(**{"host.swa_pages": 3})
    assert refused.value.key == "host.swa_pages"
    assert "two windows (4 pages" in str(refused.value)
    make_scenario(**{"host.swa_pages": 4})
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(make_doc(**{"host.swa_pages": 3})))
    out = tmp_path / "out"
    result = invoke("run", str(path), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert "host.swa_pages" in result.output + result.stderr
    assert not out.exists()


def test_a_prefetch_whose_window_does_not_fit_is_forfeited_and_counted() -> None:
    """Two windows hold at most two waiting prefetches; with more waiting the rest forfeit,
    each counted with the tokens it asked for, and retried."""
    small = run(make_scenario(**{**BUSY, "host.swa_pages": 4}))
    forfeited = small.tables["prefetches"].query("outcome == 'forfeited'")
    assert len(forfeited) > 0
    assert small.summary["prefetch_forfeited"] == len(forfeited)
    assert small.summary["prefetch_aux_alloc_failed_tokens"] == 64 * forfeited["span_pages"].sum()
    assert (forfeited[["hit_pages", "completed_pages", "read_bytes"]] == 0).all().all()
    retried = small.tables["prefetches"].query("attempt > 0")
    assert set(retried["rid"]) & set(forfeited["rid"])
    roomy = summary_with(64)
    assert roomy["prefetch_forfeited"] == roomy["prefetch_aux_alloc_failed_tokens"] == 0
    assert roomy["prefetch_issued"] > small.summary["prefetch_issued"]


def test_the_pool_never_overcommits_and_writes_leave_the_loads_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every allocation, window or tail, fits; a write never stages into the margin."""
    seen: list[AuxStaging] = []

    def checked_backup(self: AuxStaging, pages: int) -> None:
        assert pages <= self.free_pages - self.loads_margin_pages
        self.backup_pages += pages
        seen.append(self)

    original = AuxStaging.alloc_prefetch

    def checked_prefetch(self: AuxStaging, pages: int) -> bool:
        ok = original(self, pages)
        assert self.free_pages >= 0
        return ok

    monkeypatch.setattr(AuxStaging, "alloc_backup", checked_backup)
    monkeypatch.setattr(AuxStaging, "alloc_prefetch", checked_prefetch)
    summary = summary_with(6)
    assert seen and summary["written_swa_objects"] > 0


def test_the_loads_margin_is_a_window_or_a_tenth_of_the_pool() -> None:
    assert AuxStaging("swa", 4, 2).loads_margin_pages == 2
    assert AuxStaging("swa", 100, 2).loads_margin_pages == 10
    pool = AuxStaging("swa", 4, 2)
    assert not pool.write_blocked(2)
    assert pool.alloc_prefetch(pool.prefetch_window(10))
    assert pool.prefetch_pages == 2 and pool.write_blocked(1)
    assert pool.alloc_prefetch(pool.prefetch_window(1)) and pool.prefetch_pages == 3
    assert not pool.alloc_prefetch(2)
