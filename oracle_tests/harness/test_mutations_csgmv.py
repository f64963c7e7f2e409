"""The csgmv metadata mutations (harness/mutations_csgmv.py) and how the strategy draws them (csgmv_cases).

Each kind breaks one thing of the error sample (harness/opinfo_csgmv.py: ``x`` (6, 16), ``weights`` (2, 16, 16)
or (2, 16, 8), segments of 3 and 2 rows, permutation (4, 0, 2, 1, 3), slices at (0, 10, 16)): the oracle then
raises a row of the kind's category.  The kinds that make SGLang's kernels address memory outside a tensor
(``UNCHECKED_BOUNDS``, a permutation row at or past ``x.shape[0]`` among them) are declined by every
``sglang-csgmv`` target and never drawn for it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, given, settings

from kernel_oracle.fuzz.strategies import cases
from kernel_oracle.fuzz.strategies_csgmv import csgmv_cases
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.mutations import Mutation, MutationError, kinds
from kernel_oracle.harness.mutations_csgmv import CSGMV_ERROR_INPUT_KINDS, CSGMV_KINDS, UNCHECKED_BOUNDS, UNCHECKED_BOUNDS_FEATURE
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.opinfo_csgmv import _error_sample
from kernel_oracle.reference.contracts import contract

from oracle_tests._sglang_releases import wheel_or_skip

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
EXPAND_ONLY = {"slice_offsets_decreasing", "slice_offsets_past_output", "max_slice_size_too_small",
               "slice_offsets_cpu_mismatch"}


def _raised(op: str, kind: str, index: int = 0, amount: int = 1):
    """The contract row the oracle raises on the error sample broken by ``kind`` (None: it returned)."""
    call = _error_sample(op, cpu_offsets=op == "csgmv_expand" and kind == "slice_offsets_cpu_mismatch").call("cpu")
    Mutation("csgmv", kind, index, amount).apply(call)
    try:
        OP_DB[op].reference(*call.args, **call.kwargs)
    except Exception as exc:  # noqa: BLE001 - which row it is, is the point
        return getattr(exc, "contract_id", f"no row: {type(exc).__name__}: {exc}")
    return None


CASES = [(op, kind) for kind in CSGMV_KINDS for op in ("csgmv_shrink", "csgmv_expand")
         if not (op == "csgmv_shrink" and kind in EXPAND_ONLY)
         and not (op == "csgmv_expand" and kind == "split_k_below_one")]


@pytest.mark.parametrize("op,kind", CASES)
@pytest.mark.parametrize("index,amount", [(0, 1), (5, 3)])
def test_each_kind_raises_a_row_of_its_category(op, kind, index, amount):
    cid = _raised(op, kind, index, amount)
    assert cid is not None and not cid.startswith("no row"), cid
    origin = {"upstream": "upstream", "malformed": "strict"}[CSGMV_KINDS[kind][0]]
    assert contract(cid).origin == origin and contract(cid).api == "csgmv"


@pytest.mark.parametrize("kind", sorted(EXPAND_ONLY))
def test_expand_only_kinds_leave_a_shrink_unchanged(kind):
    assert _raised("csgmv_shrink", kind) is None
    assert _raised("csgmv_expand", "split_k_below_one") is None


def test_a_kind_that_breaks_nothing_is_seen():
    """Planted defect: a mutation that changes nothing leaves the oracle returning, which the check above fails."""
    assert _raised("csgmv_shrink", "slice_offsets_cpu_mismatch") is None


def test_the_unchecked_bounds_kinds_are_malformed_and_the_permutation_row_past_x_is_one():
    assert UNCHECKED_BOUNDS <= set(kinds("csgmv", ("malformed",)))
    assert "permutation_out_of_range" in UNCHECKED_BOUNDS
    call = _error_sample("csgmv_shrink").call("cpu")
    Mutation("csgmv", "permutation_out_of_range", 0, 1).apply(call)
    assert int(call.args[2].permutation.max()) == call.args[0].shape[0]  # row 6 of x's 6 rows


def test_unknown_kinds_are_named():
    with pytest.raises(MutationError) as info:
        Mutation("csgmv", "nope")
    valid = sorted({*CSGMV_KINDS, *CSGMV_ERROR_INPUT_KINDS})  # metadata_device: error inputs only
    assert str(info.value) == f"kind='nope' is not a csgmv mutation; the only valid values are {valid}"
    with pytest.raises(MutationError) as info:
        Mutation("toy", "nope")
    assert str(info.value) == "family='toy' is unknown; the only valid values are lora, vision, csgmv"


def _kind(case):
    return None if case.mutation is None else case.mutation.kind


@FAST
@given(cases("csgmv", declines=(UNCHECKED_BOUNDS_FEATURE, "csgmv.split_k")))
def test_declined_kinds_are_never_drawn(case):
    assert _kind(case) not in UNCHECKED_BOUNDS and _kind(case) != "split_k_below_one"


def test_undeclined_the_strategy_draws_the_out_of_bounds_row():
    """Planted defect: a target that does not decline the feature is given the permutation row past x."""
    find(csgmv_cases(), lambda c: _kind(c) == "permutation_out_of_range",
         settings=settings(max_examples=3000, database=None))


def test_every_category_is_drawn():
    for category in ("valid", "upstream", "malformed"):
        find(csgmv_cases(), lambda c, cat=category: c.category == cat, settings=settings(max_examples=500,
                                                                                          database=None))


def test_the_sglang_target_declines_the_out_of_bounds_mutation_with_the_reason():
    wheel_or_skip("0.5.23")
    target = resolve_target("sglang-csgmv==0.5.23", "cpu")
    assert target.declines[UNCHECKED_BOUNDS_FEATURE] == (
        "an unchecked precondition, not a defect: the kernels read and write the rows the batch info names without "
        "bounds checks, so a permutation row at or past x.shape[0] (or a slot, segment bound or count past its "
        "tensor) addresses memory outside the tensors (heap corruption); never sent")
    drawn = cases("csgmv", declines=tuple(target.declines))
    find(drawn, lambda c: c.category == "malformed", settings=settings(max_examples=500, database=None))

    @FAST
    @given(drawn)
    def never_out_of_bounds(case):
        assert _kind(case) not in UNCHECKED_BOUNDS

    never_out_of_bounds()
