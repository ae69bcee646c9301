"""One prefill pass: the model's `Scheduler._prefill_batch` against each release's `PrefillAdder`
(`managers/schedule_policy.py`), on the same seeded random passes, comparing which requests the
pass takes, in what order, and each one's chunk (where it starts and how many tokens it
computes), and that the default schedule policy (`fcfs` in every release) keeps the queue's
order, as the model's FIFO does.

A pass is a chunk budget (`--chunked-prefill-size`, a whole number of pages), maybe a chunked
request carried from the last pass (its prompt length and where its next chunk starts) and a
waiting queue (each request's prompt length and the device prefix it matched, whole pages).
SGLang's side runs for real: `PrefillAdder.add_chunked_req` for the carried request, then
`add_one_req` for each waiting request until one does not return CONTINUE, as
`Scheduler._get_new_batch_prefill_raw` drives it (from 0.5.21 the carried request's chunk is
first capped by the policy's `shortest_prefill_chunk_limit`, no cap under `fcfs`; 0.5.23 also
stops before a request once `budget_state` says OTHER). Its tree cache, allocator and
requests are stand-ins holding only what the adder reads. The model's side is the real
`_prefill_batch`, `_next_chunk`, `_next_admissible` and `_prefetch_settled` on a stand-in
scheduler (no prefetch in flight, a tree that tells each prompt's device prefix and has room for
any reservation) whose `_admit` starts a request's prefill at its device prefix.

Only the chunk budget is compared. Device memory is ample on both sides: the pass's memory
checks (SGLang's `rem_total_tokens` with the running requests' decode reservation scaled by
`new_token_ratio`, the model's whole-request page reservation) differ by design and are
described, with worked examples, in docs/fidelity.md ("The scheduler against SGLang's"), as are
the other differences (`max_prefill_tokens`, no chunking, the request cap, retraction).

Mutations tried, each failing the test: the batch charged its chunks' raw tokens, not whole
pages (`_prefill_batch`); the pass stopping after its first request; a chunk one page short of
the budget (`_next_chunk`); the waiting queue taken last first (`_next_admissible`); and, for
the policy property, `SchedulePolicy` built with `lof` instead of the release's default. Three
mutations cannot fail here, and are equivalent on every input SGLang accepts: not cutting a
joining request at a page, cutting the chunked request at one, and going on after a cut chunk.
SGLang refuses a `--chunked-prefill-size` that is not a whole number of pages, each chunk is
charged in whole pages and every prefix is page-aligned, so the budget left is always whole
pages and a cut chunk spends all of it.
"""

from __future__ import annotations

import ast
import functools
import random
import types
from types import SimpleNamespace
from typing import Any

import pytest

from sim.engine.scheduler import Scheduler
from tests.conformance import releases
from tests.conformance.tally import agree

CASES = 300
"""Passes a release."""
POLICY = "sglang.srt.managers.schedule_policy"
ENVIRON = ("sglang.srt.environ",)
AMPLE_TOKENS = 1 << 40
"""Free device tokens on SGLang's side: memory never decides a case."""
MAX_PREFILL_TOKENS = 1 << 30
"""SGLang's `rem_input_tokens`, above any pass here (see docs/fidelity.md)."""


def schedule_policy(release: str) -> types.ModuleType:
    """The release's `managers/schedule_policy.py`, imported for real, its settings module
    (`environ.py`) run from the wheel. The stubbed helpers it calls are given the answers of a
    plain server (a stub's answer is truthy): no context parallelism, not ROCm (so no exact
    chunk fill, a gfx95 tuning), no published
    server config (so no Mamba chunk grid), and `split_cached_prefix_by_tier`
    (`schedule_batch.py`, metrics only) the whole hit on the device."""
    mod = releases.real_module(release, POLICY, ENVIRON)
    for name, value in _PLAIN_SERVER.items():
        if name in vars(mod):
            setattr(mod, name, value)
    return mod


_PLAIN_SERVER: dict[str, Any] = {
    "is_dsa_prefill_cp_in_seq_split": lambda: False,
    "is_prefill_context_parallel_enabled": lambda: False,
    "_IS_HIP": False,
    "is_hip": lambda: False,
    "is_gfx95_supported": lambda: False,
    "get_context": lambda: SimpleNamespace(is_config_namespace_published=lambda _name: False),
    "split_cached_prefix_by_tier": lambda *, prefix_len, **_: (prefix_len, 0, 0),
}


def prefill_budget_class(release: str) -> type | None:
    """`mem_cache/prefill_budget.PrefillBudget`, where the release has it (0.5.21 on: the
    adder's memory checks moved into the allocator's budget object)."""
    if _order(release) < (0, 5, 21):
        return None
    mod = releases.real_module(release, "sglang.srt.mem_cache.prefill_budget", ENVIRON)
    return mod.PrefillBudget


def _order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


# ---------------------------------------------------------------------- SGLang's side


class _Tree:
    """A tree cache with nothing evictable and locks that change nothing (memory is ample)."""

    disable = False
    buffer_pipeline = None
    linker = None

    def evictable_size(self) -> int:
        return 0

    full_evictable_size = evictable_size

    def supports_mamba(self) -> bool:
        return False

    def supports_swa(self) -> bool:
        return False

    def supports_prefix_sharing(self) -> bool:
        return True

    def supports_fast_match_prefix(self) -> bool:
        return False

    def is_tree_cache(self) -> bool:
        return False

    def inc_lock_ref(self, node: Any) -> Any:
        return SimpleNamespace(to_dec_params=lambda: None)

    def dec_lock_ref(self, node: Any, params: Any = None) -> None:
        return None

    def lock(self, node: Any) -> Any:
        return node

    def unlock(self, lock: Any) -> None:
        return None

    def load_back_is_cache_owned(self) -> bool:
        return False

    def discard_storage_prefetch_accounting(self, handle: Any) -> None:
        return None

    def finish_storage_prefetch_admission(self, handle: Any, **kwargs: Any) -> None:
        return None


class _Allocator:
    """A plain KV allocator with `free_tokens` free (no SWA, no Mamba, no sharding)."""

    def __init__(self, page_size: int, free_tokens: int, budget_cls: type | None) -> None:
        self.page_size = page_size
        self.size = free_tokens
        self._free = free_tokens
        self._budget_cls = budget_cls

    def available_size(self) -> int:
        return self._free

    def create_prefill_budget(self, tree_cache: Any, *, num_mixed_decode_tokens: int = 0) -> Any:
        assert self._budget_cls is not None
        return self._budget_cls(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, *, has_req_pool_slot: bool, prefill_tokens: int = 0) -> int:
        return 0


class _Req:
    """A request as the adder reads it: prompt length, device prefix, decode budget, and the
    extend range the adder sets (both the older `set_extend_range` and the newer
    `extend_end` spellings)."""

    def __init__(self, rid: int, prompt_tokens: int, prefix_tokens: int) -> None:
        self.rid = rid
        self.full_untruncated_fill_ids = [0] * prompt_tokens
        self.prefix_indices = [0] * prefix_tokens
        self.prefix_len = prefix_tokens
        self.sampling_params = SimpleNamespace(max_new_tokens=16, ignore_eos=False)
        self.output_ids: list[int] = []
        self.host_hit_length = 0
        self.swa_host_hit_length = 0
        self.auxiliary_swa_host_hit_length = 0
        self.mamba_host_hit_length = 0
        self.storage_hit_length = 0
        self.storage_hit_start = 0
        self.host_hit_is_storage = False
        self.host_loaded_length = 0
        self.retracted_stain = False
        self.last_node = self.best_match_node = object()
        self.cache_request_handle = rid
        self.kv = SimpleNamespace(holds_mamba=False, req_pool_idx=None, holds_kv=False)
        self.extend_end: int | None = None

    def needs_host_load_back(self) -> bool:
        return False

    def materialized_host_hit_len(self) -> int:
        return 0

    def fulfilled_storage_hit_len(self, prefix_len: int) -> int:
        return 0

    def set_extend_range(self, start: int, end: int) -> None:
        self.extend_end = end

    @property
    def extend_range(self) -> Any:
        return SimpleNamespace(length=self.extend_len)

    @property
    def extend_len(self) -> int:
        assert self.extend_end is not None
        return self.extend_end - self.prefix_len


def theirs(release: str, case: dict[str, Any]) -> list[tuple[int, int, int]]:
    """The release's pass: (request, chunk start, chunk tokens) for each request it takes."""
    mod = schedule_policy(release)
    page = case["page"]
    allocator = _Allocator(page, AMPLE_TOKENS, prefill_budget_class(release))
    running = SimpleNamespace(reqs=[], batch_size=lambda: 0)
    adder = mod.PrefillAdder(
        page,
        _Tree(),
        allocator,
        running,
        1.0,
        MAX_PREFILL_TOKENS,
        case["chunk_tokens"],
    )
    chunked = case["chunked"]
    waiting = [_Req(rid, prompt, prefix) for rid, prompt, prefix in case["waiting"]]
    if chunked is not None:
        req = _Req(*chunked)
        if hasattr(mod.SchedulePolicy, "shortest_prefill_chunk_limit"):
            adder.chunked_req_limit = default_schedule_policy(release).shortest_prefill_chunk_limit(
                req, waiting, adder.rem_chunk_tokens or 0, page
            )
        adder.add_chunked_req(req)
    checks_first = _checks_budget_first(release)
    for req in waiting:
        if checks_first and adder.budget_state() == mod.AddReqResult.OTHER:
            break
        result = adder.add_one_req(
            req, has_chunked_req=chunked is not None, truncation_align_size=None
        )
        if result != mod.AddReqResult.CONTINUE:
            break
    return [(r.rid, r.prefix_len, r.extend_len) for r in adder.can_run_list]


@functools.cache
def default_schedule_policy(release: str) -> Any:
    """The release's `SchedulePolicy` under its default `--schedule-policy`."""
    return schedule_policy(release).SchedulePolicy(
        default_policy(release), _Tree(), False, False, False
    )


@functools.cache
def _checks_budget_first(release: str) -> bool:
    """Does the release's scheduler ask `budget_state` before each waiting request (0.5.23),
    not only after one is added?"""
    source = releases.source_dir(release) / "sglang/srt/managers/scheduler.py"
    return "if adder.budget_state() == AddReqResult.OTHER:" in source.read_text()


# ---------------------------------------------------------------------- the model's side


class _DeviceTree:
    """The model's tree as admission reads it: each prompt's device prefix, no host copy, and
    room for any reservation (memory is ample)."""

    def __init__(self, prefix_pages: dict[int, int]) -> None:
        self.prefix_pages = prefix_pages

    def match(self, prompt: list[tuple[int, int]]) -> Any:
        pages = self.prefix_pages[prompt[0][0]] if prompt else 0
        return SimpleNamespace(device_pages=pages, host_pages=pages, host_node=None)

    def lock(self, node: Any) -> None:
        return None

    unlock = lock

    def reserve(self, pages: int, mamba_slots: int) -> bool:
        return True


class _Server:
    """The scheduler's state one pass reads: the chunk budget, the chunked request and the
    waiting queue, admitted by the real `_next_admissible` (no prefetch in flight); `_admit`
    starts a request's prefill at its device prefix, as the real one does with nothing loaded
    from the host or storage."""

    _prefill_batch = Scheduler._prefill_batch
    _next_chunk = Scheduler._next_chunk
    _next_admissible = Scheduler._next_admissible
    _prefetch_settled = Scheduler._prefetch_settled

    def __init__(self, case: dict[str, Any]) -> None:
        page = case["page"]
        self.env = SimpleNamespace(now=0.0)
        self.model = SimpleNamespace(
            page_size=page,
            buffer_only=False,
            timing=SimpleNamespace(chunk_tokens=case["chunk_tokens"], shared_chunk_budget=True),
        )
        self.chunked = None
        if case["chunked"] is not None:
            rid, prompt, start = case["chunked"]
            self.chunked = _job(rid, prompt, page)
            self.chunked.next_token = start
        self.waiting = [_job(rid, prompt, page) for rid, prompt, _ in case["waiting"]]
        self.tree = _DeviceTree({rid: prefix // page for rid, _, prefix in case["waiting"]})

    def _admit(self, job: Any) -> None:
        job.next_token = self.tree.match(job.req.pages[: job.req.prompt_pages]).device_pages
        job.next_token *= self.model.page_size


def _job(rid: int, prompt_tokens: int, page: int) -> Any:
    prompt_pages = prompt_tokens // page
    req = SimpleNamespace(
        rid=rid,
        prompt_tokens=prompt_tokens,
        prompt_pages=prompt_pages,
        pages=[(rid, i) for i in range(prompt_pages + 1)],
    )
    return SimpleNamespace(req=req, op=None, next_token=0, load_pages=0, reserved_kv=0)


def ours(case: dict[str, Any]) -> list[tuple[int, int, int]]:
    """The model's pass, in the same terms as `theirs`."""
    batch = _Server(case)._prefill_batch()
    return [(c.job.req.rid, c.end_token - c.tokens, c.tokens) for c in batch]


# ---------------------------------------------------------------------- cases


def random_pass(rng: random.Random) -> dict[str, Any]:
    """A pass: page size, a page-multiple chunk budget, maybe a chunked request part-way
    through (its next chunk starting where a page-cut or budget-long chunk left it), and a
    waiting queue of prompts of any length with page-aligned device prefixes shorter than
    the prompt."""
    page = rng.choice((1, 16, 64))
    chunk_tokens = page * rng.randint(max(1, 256 // page), max(2, 8192 // page))
    chunked = None
    rid = 0
    if rng.random() < 0.5:
        prompt = rng.randint(chunk_tokens + 1, 4 * chunk_tokens)
        start = page * rng.randint(1, (prompt - 1) // page)
        chunked = (rid, prompt, start)
        rid += 1
    waiting = []
    for _ in range(rng.randint(0, 8)):
        prompt = rng.choice(
            (
                rng.randint(1, 2 * page),
                rng.randint(1, chunk_tokens),
                rng.randint(1, 3 * chunk_tokens),
            )
        )
        prefix = page * rng.randint(0, (prompt - 1) // page) if rng.random() < 0.5 else 0
        waiting.append((rid, prompt, prefix))
        rid += 1
    return {"page": page, "chunk_tokens": chunk_tokens, "chunked": chunked, "waiting": waiting}


@pytest.mark.parametrize("release", releases.RELEASES)
def test_one_pass_takes_the_same_chunks(release: str) -> None:
    """The same requests, in the same order, each computing the same chunk of its prompt."""
    rng = random.Random(f"scheduler-{release}")
    for _ in range(CASES):
        case = random_pass(rng)
        got, want = ours(case), theirs(release, case)
        agree(
            release,
            "prefill pass: requests taken",
            "PrefillAdder.add_chunked_req/add_one_req",
            case,
            [rid for rid, _, _ in got],
            [rid for rid, _, _ in want],
        )
        agree(
            release,
            "prefill pass: chunk start and length",
            "PrefillAdder.add_chunked_req/add_one_req",
            case,
            got,
            want,
        )


def default_policy(release: str) -> str:
    """The release's default `--schedule-policy`, read from its server arguments' source in the
    wheel (the `schedule_policy` field's default; `server_args.py` until the fields moved to
    `arg_groups/fields/schedule.py`)."""
    for path in ("sglang/srt/arg_groups/fields/schedule.py", "sglang/srt/server_args.py"):
        source = releases.wheel_source(release, path)
        if source is None:
            continue
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "schedule_policy"
                and isinstance(node.value, ast.Constant)
            ):
                return str(node.value.value)
    raise RuntimeError(f"no default schedule_policy in the sglang {release} wheel")


@pytest.mark.parametrize("release", releases.RELEASES)
def test_default_policy_keeps_the_queue_order(release: str) -> None:
    """The default `--schedule-policy` (`fcfs` in every release) leaves the waiting queue as it
    arrived, whatever the prompts and output budgets: the model's FIFO admission."""
    policy = default_schedule_policy(release)
    rng = random.Random(f"fcfs-{release}")
    for _ in range(CASES):
        queue = [_Req(rid, rng.randint(1, 4096), 0) for rid in range(rng.randint(0, 12))]
        for req in queue:
            req.sampling_params.max_new_tokens = rng.randint(1, 4096)
        before = [r.rid for r in queue]
        with releases.active(release):
            policy.calc_priority(queue)
        agree(
            release,
            "default schedule policy: FIFO order",
            "SchedulePolicy.calc_priority",
            before,
            before,
            [r.rid for r in queue],
        )
