"""The healing contract `sim.heal.keep_pages` and the rule registry `sim.heal.RULES`.

The worked examples of docs/fidelity.md are checked literally; a property test compares the contract
function against an independent reading of the pseudo-code; and each registered rule is driven
through a `DiscardView` built from a real `PrefetchOp`, its `AuxTransfer`s and a `Storage`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.heal import RULES, DiscardView, keep_pages
from sim.model.prefetch import PrefetchOp, plan_aux_transfers
from sim.model.storage import Storage
from tests.model_helpers import layout
from tests.model_helpers import make_storage as _make_storage

PAGE = 64
WINDOW_TOKENS = 128
WINDOW_PAGES = math.ceil(WINDOW_TOKENS / PAGE)
SPAN = 100

AuxSpec = tuple[int | None, int]


# ---------------------------------------------------------------- worked examples


def test_window_of_128_tokens_is_two_tail_keys() -> None:
    """Page 64, window 128 tokens -> an SWA transfer for a 100-page hit asks for 2 tail keys."""
    assert WINDOW_PAGES == 2
    span = tuple(range(1000, 1000 + SPAN))
    aux = list(layout(["swa", "mamba"], WINDOW_PAGES).values())
    assert aux[0].tail_len(SPAN) == 2
    assert aux[0].tail_keys(span, SPAN) == span[98:100]
    op = PrefetchOp(rid=1, start_page=0, span=span, issued_s=0.0, hit_pages=SPAN)
    swa, mamba = plan_aux_transfers(aux, op)
    assert swa.keys == span[98:]
    assert mamba.keys == (span[-1],)


def test_swa_served_zero_of_two_keeps_98() -> None:
    """KV complete, SWA served 0 of its 2 tail keys -> keep 98."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 0)]) == 98


def test_swa_served_one_of_two_keeps_98() -> None:
    """A partial tail read vouches for nothing before the tail either -> still 98."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 1)]) == 98


def test_mamba_short_keeps_99() -> None:
    """KV complete, Mamba (1 key) not served -> keep 99."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(1, 0)]) == 99


def test_swa_ok_mamba_short_keeps_99() -> None:
    """A fully served SWA pool does not limit; the short Mamba pool does -> 99."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 2), (1, 0)]) == 99


def test_swa_and_mamba_short_keep_the_minimum() -> None:
    """Both aux pools short -> the tighter limit (the SWA window) wins -> 98."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 0), (1, 0)]) == 98


def test_terminated_after_50_kv_pages_keeps_50() -> None:
    """Terminated after 50 KV pages, aux not read (placeholders, hit 0) -> min(50, 98) = 50."""
    assert keep_pages(50 * PAGE, PAGE, SPAN, [(2, 0)]) == 50
    assert keep_pages(50 * PAGE, PAGE, SPAN, [(2, 0), (1, 0)]) == 50


def test_partial_page_of_completed_tokens_is_not_kept() -> None:
    """Only whole pages count: 50 pages and 63 tokens keep 50."""
    assert keep_pages(50 * PAGE + 63, PAGE, SPAN, [(2, 0)]) == 50


def test_no_aux_keys_keeps_nothing() -> None:
    """An aux pool that could form no transfer (keys None) -> keep 0."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(None, 0)]) == 0
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 2), (None, 0)]) == 0


def test_full_service_keeps_the_whole_span() -> None:
    """KV complete and every aux pool served -> nothing to drop."""
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, [(2, 2), (1, 1)]) == SPAN
    assert keep_pages(SPAN * PAGE, PAGE, SPAN, []) == SPAN


def test_tail_longer_than_span_keeps_zero_not_negative() -> None:
    """A short aux read whose keys cover the whole span keeps 0 (never negative)."""
    assert keep_pages(2 * PAGE, PAGE, 2, [(2, 1)]) == 0
    assert keep_pages(1 * PAGE, PAGE, 1, [(3, 0)]) == 0


# ---------------------------------------------------------------- property tests


def reference_keep(
    completed_tokens: int, page_size: int, span_pages: int, aux: Sequence[AuxSpec]
) -> int:
    """The rule read as "the leading pages every pool really served", written independently.

    KV vouches for its whole completed pages; a pool without keys vouches for nothing; a pool
    that served all its keys puts no limit; a short tail read vouches only for the pages before
    its tail. The answer is the minimum over all pools.
    """
    limits = [completed_tokens // page_size]
    for keys_len, hit in aux:
        if keys_len is None:
            limits.append(0)
        elif hit >= keys_len:
            continue
        else:
            before_tail = span_pages - keys_len
            limits.append(before_tail if before_tail > 0 else 0)
    return min(limits)


@st.composite
def keep_inputs(draw: st.DrawFn) -> tuple[int, int, int, list[AuxSpec]]:
    """Arbitrary (completed_tokens, page_size, span_pages, aux) in the contract's domain."""
    page_size = draw(st.sampled_from([1, 16, 64, 128]))
    span_pages = draw(st.integers(0, 300))
    completed_tokens = draw(st.integers(0, span_pages * page_size + page_size - 1))
    aux: list[AuxSpec] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()) and draw(st.booleans()):
            aux.append((None, 0))
        else:
            keys_len = draw(st.integers(0, span_pages + 2))
            aux.append((keys_len, draw(st.integers(0, keys_len))))
    return completed_tokens, page_size, span_pages, aux


@settings(max_examples=400, deadline=None)
@given(keep_inputs())
def test_keep_pages_matches_reference(args: tuple[int, int, int, list[AuxSpec]]) -> None:
    """The contract function agrees with the independent re-implementation on any input."""
    completed_tokens, page_size, span_pages, aux = args
    expected = reference_keep(completed_tokens, page_size, span_pages, aux)
    assert keep_pages(completed_tokens, page_size, span_pages, aux) == expected


@settings(max_examples=300, deadline=None)
@given(keep_inputs())
def test_keep_pages_bounds(args: tuple[int, int, int, list[AuxSpec]]) -> None:
    """0 <= keep <= completed_tokens // page_size, and adding a pool never raises keep."""
    completed_tokens, page_size, span_pages, aux = args
    keep = keep_pages(completed_tokens, page_size, span_pages, aux)
    assert 0 <= keep <= completed_tokens // page_size
    for i in range(len(aux)):
        assert keep <= keep_pages(completed_tokens, page_size, span_pages, aux[:i] + aux[i + 1 :])


@settings(max_examples=200, deadline=None)
@given(
    page_size=st.sampled_from([1, 16, 64]),
    span_pages=st.integers(0, 300),
    key_lens=st.lists(st.integers(0, 300), max_size=3),
)
def test_full_service_keeps_everything(
    page_size: int, span_pages: int, key_lens: list[int]
) -> None:
    """KV complete and every aux pool served all its keys -> keep the whole span."""
    aux = [(min(k, span_pages), min(k, span_pages)) for k in key_lens]
    assert keep_pages(span_pages * page_size, page_size, span_pages, aux) == span_pages


# ---------------------------------------------------------------- the rules, through DiscardView


def make_storage(
    contents: Mapping[str, Iterable[int]], window_pages: int = WINDOW_PAGES
) -> Storage:
    """A storage whose pools hold exactly `contents` (unbounded, fault-free)."""
    return _make_storage(contents, window_pages)


def read_op(
    storage: Storage,
    span: tuple[int, ...],
    hit_pages: int,
    *,
    kv_stop: int | None = None,
) -> PrefetchOp:
    """A prefetch of `span` read from `storage` the way the engine does.

    KV is read over the hit span (optionally stopped after `kv_stop` pages, a termination); the
    aux pools are read only if KV completed, otherwise their transfers keep hit 0.
    """
    op = PrefetchOp(rid=7, start_page=0, span=span, issued_s=0.0, hit_pages=hit_pages)
    hit_span = op.hit_span
    readable = hit_span if kv_stop is None else hit_span[:kv_stop]
    op.completed_pages = storage.pools["kv"].get(readable)
    op.terminated = kv_stop is not None
    op.aux = plan_aux_transfers(storage.aux, op)
    if op.completed_pages == op.hit_pages and not op.terminated:
        for transfer in op.aux:
            if transfer.keys is not None:
                transfer.hit_pages = storage.pools[transfer.pool].get(transfer.keys)
    return op


def drop(rule: str, storage: Storage, op: PrefetchOp) -> list[int]:
    view = DiscardView(op=op, page_size=PAGE, storage=storage)
    return RULES[rule](view)


def test_registry_has_the_five_rules() -> None:
    """The scenario key `heal` selects one of these."""
    assert set(RULES) == {"none", "keep_pages", "per_pool", "drop_chain", "exact"}


SPAN12 = tuple(range(101, 113))
"""A 12-page span; the prefetches below hit its first 10 pages (101..110)."""


def swa_tail_hole() -> tuple[Storage, PrefetchOp]:
    """KV complete, SWA holds only 109 of its tail (109, 110), Mamba holds 110."""
    storage = make_storage({"kv": SPAN12, "swa": [109], "mamba": [110]})
    op = read_op(storage, SPAN12, 10)
    assert op.completed_pages == 10
    assert [(t.pool, t.keys, t.hit_pages) for t in op.aux] == [
        ("swa", (109, 110), 1),
        ("mamba", (110,), 1),
    ]
    return storage, op


def kv_hole_terminated() -> tuple[Storage, PrefetchOp]:
    """KV is missing 105, so KV delivers 4 pages and the aux pools are not read."""
    storage = make_storage(
        {"kv": [k for k in SPAN12 if k != 105], "swa": [109, 110], "mamba": [110]}
    )
    op = read_op(storage, SPAN12, 10)
    assert op.completed_pages == 4
    assert all(t.hit_pages == 0 for t in op.aux)
    return storage, op


def test_rule_none_drops_nothing() -> None:
    """`none` (before the fix) never drops a belief."""
    for storage, op in (swa_tail_hole(), kv_hole_terminated()):
        assert drop("none", storage, op) == []


def test_rule_drop_chain_drops_the_whole_hit_span() -> None:
    """`drop_chain` drops every page of the hit span, and nothing past the hit."""
    for storage, op in (swa_tail_hole(), kv_hole_terminated()):
        assert drop("drop_chain", storage, op) == list(SPAN12[:10])


def test_rule_keep_pages_swa_tail_hole() -> None:
    """SWA short by one key: keep 10 - 2 = 8 and drop 109, 110."""
    storage, op = swa_tail_hole()
    assert drop("keep_pages", storage, op) == [109, 110]


def test_rule_keep_pages_kv_hole() -> None:
    """KV stopped at 4 pages: keep 4 and drop 105..110."""
    storage, op = kv_hole_terminated()
    assert drop("keep_pages", storage, op) == list(range(105, 111))


def test_rule_keep_pages_termination_overdrops_stored_pages() -> None:
    """A termination after 3 pages drops 104..110 although storage holds all of them."""
    storage = make_storage({"kv": SPAN12, "swa": SPAN12, "mamba": SPAN12})
    op = read_op(storage, SPAN12, 10, kv_stop=3)
    assert op.completed_pages == 3
    assert drop("keep_pages", storage, op) == list(range(104, 111))
    assert drop("exact", storage, op) == []


def test_rule_keep_pages_keys_none_drops_everything() -> None:
    """A mid-tree span shorter than the window forms no SWA transfer -> drop the whole hit."""
    span = (301, 302)
    storage = make_storage({"kv": span, "swa": span}, window_pages=3)
    op = PrefetchOp(rid=1, start_page=5, span=span, issued_s=0.0, hit_pages=2)
    op.completed_pages = storage.pools["kv"].get(op.hit_span)
    op.aux = plan_aux_transfers(storage.aux, op)
    assert op.aux[0].keys is None
    view = DiscardView(op=op, page_size=PAGE, storage=storage)
    assert RULES["keep_pages"](view) == [301, 302]


def test_rule_exact_swa_tail_hole() -> None:
    """`exact` drops only the tail page whose SWA object is missing."""
    storage, op = swa_tail_hole()
    assert drop("exact", storage, op) == [110]


def test_rule_exact_kv_hole() -> None:
    """`exact` drops only the missing KV page, not the stored pages after it."""
    storage, op = kv_hole_terminated()
    assert drop("exact", storage, op) == [105]


def test_rule_exact_mamba_hole_and_kv_hole() -> None:
    """Missing KV objects and a missing Mamba tail object are all dropped, in span order."""
    storage = make_storage(
        {"kv": [k for k in SPAN12 if k not in (102, 107)], "swa": SPAN12, "mamba": [109]}
    )
    op = read_op(storage, SPAN12, 10)
    assert drop("exact", storage, op) == [102, 107, 110]


def test_rule_exact_ignores_aux_objects_outside_the_tail() -> None:
    """SWA objects before the tail are not needed at the hit endpoint, so not dropped."""
    storage = make_storage({"kv": SPAN12, "swa": [109, 110], "mamba": [110]})
    op = read_op(storage, SPAN12, 10)
    assert drop("exact", storage, op) == []
    assert drop("keep_pages", storage, op) == []


@st.composite
def stored_spans(draw: st.DrawFn) -> tuple[dict[str, list[int]], int, int | None]:
    """Random pool contents over a 12-page span, a hit and an optional termination point."""
    contents = {
        pool: [k for k in SPAN12 if draw(st.integers(0, 6)) > 0] for pool in ("kv", "swa", "mamba")
    }
    hit = draw(st.integers(1, len(SPAN12)))
    stop = draw(st.one_of(st.none(), st.integers(0, hit)))
    return contents, hit, stop


@settings(max_examples=150, deadline=None)
@given(stored_spans())
def test_rules_on_real_reads(case: tuple[dict[str, list[int]], int, int | None]) -> None:
    """Each rule's drop set on arbitrary storage contents, and keep_pages covers the oracle."""
    contents, hit, stop = case
    storage = make_storage(contents)
    op = read_op(storage, SPAN12, hit, kv_stop=stop)
    hit_span = op.hit_span
    aux = [(None if t.keys is None else len(t.keys), t.hit_pages) for t in op.aux]
    keep = keep_pages(op.completed_pages * PAGE, PAGE, len(hit_span), aux)

    assert drop("none", storage, op) == []
    assert drop("drop_chain", storage, op) == list(hit_span)
    assert drop("keep_pages", storage, op) == list(hit_span[keep:])

    needed_swa = set(hit_span[len(hit_span) - min(WINDOW_PAGES, len(hit_span)) :])
    needed_mamba = {hit_span[-1]}
    missing = [
        k
        for k in hit_span
        if k not in contents["kv"]
        or (k in needed_swa and k not in contents["swa"])
        or (k in needed_mamba and k not in contents["mamba"])
    ]
    exact = drop("exact", storage, op)
    assert exact == missing
    assert set(exact) <= set(hit_span[keep:])


# ---------------------------------------------------------------- per_pool and the deadline


def test_rule_per_pool_swa_tail_hole_drops_only_the_swa_keys_not_served() -> None:
    """KV complete, SWA got 109 of (109, 110): only SWA's 110 is dropped; KV keeps all."""
    storage, op = swa_tail_hole()
    view = DiscardView(op=op, page_size=PAGE, storage=storage)
    assert RULES["per_pool"](view) == {"swa": [110]}


def test_rule_per_pool_kv_hole_drops_kv_past_completed_and_the_unread_tails() -> None:
    """KV stopped at 4 pages: KV past 4; the aux transfers never read served none of their keys."""
    storage, op = kv_hole_terminated()
    view = DiscardView(op=op, page_size=PAGE, storage=storage)
    assert RULES["per_pool"](view) == {
        "kv": list(range(105, 111)),
        "swa": [109, 110],
        "mamba": [110],
    }


def test_heal_after_deadline_is_a_prefetch_key_defaulting_to_true() -> None:
    """`prefetch.heal_after_deadline`: true is 0.5.19-0.5.22 (and the goldens), false 0.5.23."""
    from sim.scenario.sections import PrefetchSpec

    assert PrefetchSpec().heal_after_deadline is True
    assert PrefetchSpec(heal_after_deadline=False).heal_after_deadline is False
