"""A finding's example is the smallest that shows it and names the metadata it depends on (Note [Minimal
examples]); a defect seen through malformed input is the valid input's (Note [One defect through
malformed input]).  Planted bugs in a user's plain-torch module (oracle_tests/_user_kernels.py)."""

from __future__ import annotations

import sys

import pytest

from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.headline import headline
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.simplify import minimise
from oracle_tests._user_kernels import unique_name, write_user_module


@pytest.fixture
def user_target(tmp_path, monkeypatch):
    """``user_target(plant)``: the resolved target of a user's module with that bug, from its folder."""
    monkeypatch.chdir(tmp_path)
    names = []

    def make(plant: str):
        name = unique_name()
        write_user_module(tmp_path, name, plant)
        names.append(name)
        target = resolve_target(name, "cpu")
        assert target.available, target.reason
        return target
    yield make
    for name in names:
        sys.modules.pop(name, None)


# a messy first failure, as a search finds it: three segments, drift, stale counts, a partial mutation
_MESSY = LoRAProblem("step_b_q", seg_lens=(15, 3, 9), weight_indices=(1, 0, 1), lora_ranks=(16, 8),
                     scalings=(-2.25, 3.5), H=2, qk=24, vd=16, C=32, R=16, extra_rows=2, permute=True,
                     seg_lens_drift="shorter", eager_counts=(4, 3), offset_views=True, poison_beyond_rank="huge",
                     seed=7)


def _minimal(target, case):
    runs = []

    def run(variant):
        runs.append(variant)
        verdict = check_case(target, variant, "cpu")
        return verdict, verdict.bucket
    verdict = check_case(target, case, "cpu")
    assert not verdict.ok, "the planted bug must show on the messy case"
    return minimise(case, verdict, verdict.bucket, run), runs


def test_a_dropped_segment_end_shrinks_to_one_short_segment_without_drift_or_mutation(user_target):
    least, runs = _minimal(user_target("drops_segment_end"), Case(_MESSY, Mutation("lora", "drop_permutation")))
    p = least.case.problem
    assert least.case.mutation is None, "the bug needs no mutation"
    assert len(p.seg_lens) == 1 and p.seg_lens[0] <= 2 and p.H == 1 and p.extra_rows == 0
    assert (p.seg_lens_drift, p.eager_counts, p.stale_host_ints, p.poison_beyond_rank) == (None, None, None, None)
    assert not p.offset_views and not p.permute and len(p.lora_ranks) == 1
    assert least.bucket.op == "step_b_q" and least.depends_on == []
    assert len(runs) <= 80


def test_an_ignored_permutation_is_named_in_the_headline(user_target):
    least, _ = _minimal(user_target("ignores_permutation"), Case(_MESSY))
    assert "permutation" in least.depends_on
    assert least.case.problem.permute
    finding = {"op": "step_b_q", "kind": "mismatch", "dtypes": ["float32"], "count": 1, "regions": ["everywhere"],
               "depends_on": least.depends_on, "bucket": least.bucket.to_dict()}
    assert "it depends on the permutation" in headline(finding)


def test_an_ignored_scaling_depends_on_the_scaling(user_target):
    least, _ = _minimal(user_target("ignores_scaling"), Case(_MESSY))
    assert least.depends_on == ["scaling"]
    assert len(least.case.problem.seg_lens) == 1


def test_a_missing_check_keeps_the_plainest_mutation_that_shows_it(user_target):
    """A missing max_len check seen through a malformed indptr that also dropped seg_lens: the minimal
    example is the upstream contract's own mutation (no malformation the defect does not need)."""
    problem = LoRAProblem("step_a_q", seg_lens=(6, 2), weight_indices=(0, 1), lora_ranks=(16, 16), scalings=(1., 1.),
                          H=2, qk=16, vd=16, C=24, R=16, with_max_len=False, seed=3)
    least, _ = _minimal(user_target("no_max_len_check"), Case(problem, Mutation("lora", "seg_indptr_negative_start")))
    assert least.case.mutation.category in ("upstream", "partial"), least.case.mutation
    assert least.bucket.cause == "contract lora.missing_max_len"
    assert len(least.case.problem.seg_lens) <= 1 and least.case.problem.H == 1


def test_a_mismatch_says_what_was_expected_in_numbers(user_target):
    verdict = check_case(user_target("drops_segment_end"), Case(_MESSY), "cpu")
    assert verdict.expected.startswith("base_output[") and "(float64 reference, allowed +-" in verdict.expected
    assert "; got " in verdict.expected


def test_a_bug_seen_through_malformed_input_is_the_valid_inputs_finding(user_target):
    """Every segment on one slot hides an ignored permutation; a negative slot in segment 0 moves that
    segment to another slot, and the intact segments' rows come out wrong.  The valid neighbour with
    segment 0 on another slot shows the same defect: the verdict is that mismatch, not a validation gap."""
    target = user_target("ignores_permutation")
    problem = LoRAProblem("step_b_q", seg_lens=(17, 16, 15), weight_indices=(2, 2, 2), lora_ranks=(10, 16, 16),
                          scalings=(3.5, 1.0, 1.5), H=1, qk=16, vd=15, C=33, R=16, permute=True, seed=100)
    assert check_case(target, Case(problem), "cpu").ok, "one slot: the bug does not show on the valid part"
    verdict = check_case(target, Case(problem, Mutation("lora", "negative_slot", 0, 3)), "cpu")
    assert (verdict.kind, verdict.seen_through) == ("mismatch", "negative_slot")
    assert verdict.valid_problem is not None and not check_case(target, Case(verdict.valid_problem), "cpu").ok


def test_a_malformation_that_alone_breaks_rows_stays_a_validation_gap(user_target):
    """A correct module on a case where the malformation itself changes the intact segments' rows: every
    valid neighbour passes, so the validation gap stands (and names its consequence)."""
    target = user_target("")
    problem = LoRAProblem("step_b_q", seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 16),
                          scalings=(1.0, 2.0), H=1, qk=16, vd=16, C=24, R=16, seed=5)
    verdict = check_case(target, Case(problem, Mutation("lora", "seg_indptr_past_rows", 0, 2)), "cpu")
    assert verdict.seen_through is None
    assert verdict.ok or verdict.kind == "validation-gap"


def test_an_example_of_a_family_without_words_of_its_own_lists_its_fields():
    """A csgmv example is its own fields (segments, slots, ranks, the graph padding), not a vision problem's
    words read from fields it does not have ("no sequence, H=None, D=None")."""
    from kernel_oracle.harness.headline import example_text
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem
    from kernel_oracle.harness.problems import problem_to_dict

    p = CsgmvProblem(op="csgmv_shrink", seg_lens=(3, 0, 2), weight_indices=(0, 1, 0), lora_ranks=(8, 0),
                     scalings=(1.0, 0.5), permutation=(4, 3, 2, 1, 0), use_cuda_graph=True, graph_pad_to=5)
    text = example_text({"op": p.op, "dtype": p.dtype, "problem": {"problem": problem_to_dict(p)}})
    assert text.startswith("csgmv_shrink float32: seg_lens [3, 0, 2], weight_indices [0, 1, 0], lora_ranks [8, 0]")
    assert "graph_pad_to 5" in text and "use_cuda_graph True" in text and "sequence" not in text
