"""The fuzzer's own machinery: strategy arguments, mutations, expected outcomes, targets, mutants."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings

from kernel_oracle.harness.check import Case, case_from_dict, expected_outcome
from kernel_oracle.fuzz.targets.mutants import Mutant, MutantError, Patch, apply_patches
from kernel_oracle.harness.mutations import LORA_KINDS, VISION_KINDS, Mutation, MutationError
from kernel_oracle.harness.problems import LoRAProblem, VisionProblem, materialize
from kernel_oracle.fuzz.strategies import (InvalidArgument, cases, lora_problems, malformed_metadata, partial_metadata,
                             upstream_contract_cases, vision_problems)
from kernel_oracle.fuzz.targets import TargetError, resolve_target

FAST = settings(max_examples=15, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))


# ---- argument validation: one exception type, messages that say what was expected -----------------
BAD_ARGUMENTS = [
    (lambda: lora_problems(ops=["step_x"]), "Expected values from"),
    (lambda: lora_problems(ops="step_a_q"), "Expected a list of values"),
    (lambda: lora_problems(dtypes=[]), "Expected at least one value in dtypes"),
    (lambda: lora_problems(min_segments=5, max_segments=2), "min_segments=5 is larger than max_segments=2"),
    (lambda: lora_problems(max_segments=-1), "Expected a non-negative int but got max_segments=-1"),
    (lambda: lora_problems(limits="huge"), "Expected a Limits or one of"),
    (lambda: lora_problems(permute="yes"), "Expected True, False, None or a strategy but got permute='yes'"),
    (lambda: vision_problems(paths=["socket"]), "Expected values from"),
    (lambda: vision_problems(min_sequences=3, max_sequences=1), "min_sequences=3 is larger than max_sequences=1"),
    (lambda: cases("conv"), "Expected family='lora' or 'vision' but got family='conv'"),
    (lambda: cases("vision", ops=["step_a_q"]), "Expected ops=None or ['vision']"),
    (lambda: malformed_metadata(42, family="lora"), "Expected a strategy of problems but got problems=42"),
]


@pytest.mark.parametrize("make, text", BAD_ARGUMENTS)
def test_strategies_validate_arguments_up_front(make, text):
    with pytest.raises(InvalidArgument) as info:
        make()  # raised when the strategy is built, not when it is drawn from
    assert text in str(info.value)


def test_strategy_reprs_read_as_calls():
    assert repr(lora_problems(ops=("step_a_q",), max_segments=4)).startswith("lora_problems(")
    assert "max_segments=4" in repr(lora_problems(ops=("step_a_q",), max_segments=4))
    assert repr(vision_problems(limits="tiny")).startswith("vision_problems(")


@FAST
@given(lora_problems(limits="tiny"))
def test_lora_problems_respect_limits_and_materialize(p):
    assert len(p.seg_lens) <= 4 and len(p.weight_indices) == len(p.seg_lens)
    assert all(0 <= w < p.L for w in p.weight_indices) and p.H <= 2
    call = materialize(p)
    assert call.args[0].shape[0] == p.S


@FAST
@given(vision_problems(limits="tiny"))
def test_vision_problems_materialize(p):
    call = materialize(p)
    assert call.args[0].shape[-2:] == (p.H, p.D)


def test_problems_shrink_to_minimal_examples():
    p = find(lora_problems(limits="small"), lambda p: sum(p.seg_lens) >= 10,
             settings=settings(database=None, max_examples=500, derandomize=True))
    assert sum(p.seg_lens) == 10 and len(p.seg_lens) == 1 and p.dtype == "float32" and not p.permute
    v = find(vision_problems(limits="small"), lambda v: len([n for n in v.lengths if n]) >= 2,
             settings=settings(database=None, max_examples=500, derandomize=True))
    assert v.lengths == (1, 1) and v.H == 1


@FAST
@given(partial_metadata(lora_problems(limits="tiny"), family="lora"))
def test_partial_metadata_cases_carry_partial_mutations(case):
    assert case.category == "partial"
    assert expected_outcome(case).kind in ("result", "upstream")


@FAST
@given(upstream_contract_cases(vision_problems(limits="tiny"), family="vision"))
def test_upstream_cases_expect_upstream_or_result(case):
    assert case.category == "upstream"
    assert expected_outcome(case).kind in ("upstream", "result")


# ---- each mutation breaks what it says, on a problem where it can apply ----------------------------
LORA_BASE = LoRAProblem(op="step_b_q", seg_lens=(3, 4, 2), weight_indices=(0, 1, 1), lora_ranks=(16, 8),
                        scalings=(1.0, 0.5), permute=True, extra_rows=1, seed=3)
VISION_BASE = VisionProblem(lengths=(3, 5, 2), path="kwargs", seed=4)
EXPECTED_CATEGORY = {"partial": ("result", "upstream"), "upstream": ("upstream",), "malformed": ("strict",)}


@pytest.mark.parametrize("kind", sorted(LORA_KINDS))
def test_lora_mutation_outcomes(kind):
    case = Case(LORA_BASE, Mutation("lora", kind, index=1, amount=1))
    out = expected_outcome(case)
    assert out.kind in EXPECTED_CATEGORY[case.category], (kind, out)


@pytest.mark.parametrize("path", ["kwargs", "metadata"])
@pytest.mark.parametrize("kind", sorted(VISION_KINDS))
def test_vision_mutation_outcomes(kind, path):
    case = Case(dataclasses.replace(VISION_BASE, path=path), Mutation("vision", kind, index=1, amount=1))
    out = expected_outcome(case)
    if kind == "max_seqlen_none":  # the reference raises a bare TypeError (int(None)): outside the table
        assert out.kind == "error"
        return
    assert out.kind in EXPECTED_CATEGORY[case.category], (kind, path, out)


def test_mutation_records_are_plain_data():
    m = Mutation("lora", "slot_out_of_range", 2, 3)
    case = Case(LORA_BASE, m)
    assert case_from_dict(case.to_dict()) == case
    with pytest.raises(MutationError, match="the only valid values are"):
        Mutation("lora", "negative_length")
    with pytest.raises(MutationError, match="Expected amount >= 1 but got amount=0"):
        Mutation("lora", "slot_out_of_range", 0, 0)


# ---- targets -------------------------------------------------------------------------------------

def test_targets_report_what_they_have():
    ref = resolve_target("reference")
    assert ref.available and ref.precision == "ieee" and ref.strict
    assert set(ref.ops("lora")) == {"step_a_q", "step_b_q", "step_a_v", "step_b_v", "q_side_fused", "v_side_fused"}
    partial = resolve_target("kernel_oracle.reference.lora")  # a module with only the LoRA entry points
    assert partial.available and partial.ops("vision") == () and "vision" in partial.notes
    assert not partial.strict  # third-party code is not assumed to validate strictly
    with pytest.raises(TargetError, match="the only built-in targets are"):
        resolve_target("refrence")
    missing = resolve_target("no_such_pkg.kernels")
    assert not missing.available and "No module named" in missing.reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only reason")
def test_torch_varlen_unavailable_on_cpu_with_reason():
    t = resolve_target("torch-varlen", "cpu")
    assert not t.available and "CPU" in t.reason


def test_third_party_triton_excludes_bf16_under_the_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    (tmp_path / "thirdparty_lora_mod.py").write_text(
        "import triton  # a Triton kernel module\nfrom kernel_oracle.reference.lora import step_a_q_fwd\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from kernel_oracle.fuzz.targets.module_spec import _module_target

    t = _module_target("thirdparty_lora_mod", "cpu")
    assert t.available and t.has("step_a_q")
    assert "bfloat16" in t.excluded_dtypes and "interpreter" in t.excluded_dtypes["bfloat16"]


# ---- mutants -------------------------------------------------------------------------------------

def test_mutant_with_missing_anchor_names_itself_and_the_anchor():
    m = Mutant("stale_mutant", "lora", "anchor gone", (Patch("lora/_kernels.py", "no such line", "x"),))
    with pytest.raises(MutantError) as info:
        apply_patches(m, {"lora/_kernels.py": "def f():\n    pass\n"})
    assert "stale_mutant" in str(info.value) and "no such line" in str(info.value)
