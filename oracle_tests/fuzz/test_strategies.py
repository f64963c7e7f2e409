"""The fuzzer's own machinery: strategy arguments, mutations, expected outcomes, targets, mutants."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings

from kernel_oracle.harness.check import Case, case_from_dict, expected_outcome
from kernel_oracle.fuzz.targets.mutants import Mutant, MutantError, Patch, apply_patches
from kernel_oracle.harness.mutations import Mutation, MutationError
from kernel_oracle.harness.mutations_lora import LORA_KINDS
from kernel_oracle.harness.mutations_vision import VISION_KINDS
from kernel_oracle.harness.problems import batch_info_of, materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.fuzz.strategies import (InvalidArgument, cases, malformed_metadata, partial_metadata,
                                            upstream_contract_cases)
from kernel_oracle.fuzz.strategies_lora import lora_problems
from kernel_oracle.fuzz.strategies_vision import VISION_FEATURES, vision_problems
from kernel_oracle.harness.problem_vision import VISION_PATHS
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
    (lambda: cases("conv"), "Expected family='lora', 'vision' or 'csgmv' but got family='conv'"),
    (lambda: cases("vision", ops=["step_a_q"]), "Expected ops=None or ['vision']"),
    (lambda: malformed_metadata(42, family="lora"), "Expected a strategy of problems but got problems=42"),
    (lambda: vision_problems(declines=["gqa", "dropout"]), "Expected features from ['gqa', 'window_size', 's_aux', 'softmax_scale', 'forward_metadata']"),
    (lambda: cases("vision", declines="gqa"), "Expected a list of features"),
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


# Note [Fields that disagree] in fuzz.strategies: each draw exists (found within a search budget)
DISAGREEMENTS = [
    ("lora: more segments than requests", "lora", lambda p: p.eager_counts and p.eager_counts[0] < p.eager_counts[1]),
    ("lora: fewer segments than requests", "lora",
     lambda p: p.eager_counts and p.eager_counts[0] > p.eager_counts[1] > 0),
    ("lora: num_segments 0", "lora", lambda p: p.eager_counts is not None and p.eager_counts[1] == 0),
    ("lora: max_len across a 128-row tile", "lora", lambda p: p.max_len_slack >= 127),
    ("lora: seg_lens in a stale order", "lora", lambda p: p.seg_lens_drift == "rolled"),
    ("lora: seg_lens shorter beside max_len", "lora", lambda p: p.seg_lens_drift == "shorter" and p.with_max_len),
    ("vision: GQA", "vision", lambda p: p.H_kv is not None and 1 < p.H_kv < p.H),
    ("vision: MQA", "vision", lambda p: p.H_kv == 1 and p.H > 1),
    ("vision: rows of (b, s, H, D)", "vision", lambda p: p.four_d and p.batch > 1),
    ("vision: indptr gaps", "vision", lambda p: any(p.gaps)),
    ("vision: the release's helper", "vision", lambda p: p.metadata_source == "helper"),
    ("vision: a window", "vision", lambda p: p.window is not None and p.window != (-1, -1)),
    ("vision: large sinks", "vision", lambda p: p.sinks == "large"),
    ("vision: VisionAttention's whole call", "vision", lambda p: p.full_call),
    *[(f"vision: path {path}", "vision", lambda p, path=path: p.path == path) for path in VISION_PATHS],
]


@pytest.mark.parametrize("what,family,found", DISAGREEMENTS, ids=[d[0] for d in DISAGREEMENTS])
def test_fields_that_disagree_are_drawn(what, family, found):
    strategy = lora_problems(limits="tiny") if family == "lora" else vision_problems(limits="tiny")
    find(strategy, found, settings=settings(database=None, max_examples=1000, derandomize=True))


@FAST
@given(vision_problems(limits="tiny", declines=VISION_FEATURES))
def test_declined_features_are_never_drawn(p):
    assert p.H_kv is None and p.window is None and p.sinks is None and not p.full_call


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
    with pytest.raises(MutationError, match="Expected amount from 1 to 64 but got amount=0"):
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
    (tmp_path / "thirdparty_pkg").mkdir()
    (tmp_path / "thirdparty_pkg" / "__init__.py").write_text("")
    (tmp_path / "thirdparty_pkg" / "lora_mod.py").write_text(
        "import triton  # a Triton kernel module\nfrom kernel_oracle.reference.lora import step_a_q_fwd\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = resolve_target("thirdparty_pkg.lora_mod", "cpu")
    assert t.available and t.has("step_a_q")
    assert "bfloat16" in t.excluded_dtypes and "interpreter" in t.excluded_dtypes["bfloat16"]


# ---- mutants -------------------------------------------------------------------------------------

def test_mutant_with_missing_anchor_names_itself_and_the_anchor():
    m = Mutant("stale_mutant", "lora", "anchor gone", (Patch("lora/_kernels.py", "no such line", "x"),))
    with pytest.raises(MutantError) as info:
        apply_patches(m, {"lora/_kernels.py": "def f():\n    pass\n"})
    assert "stale_mutant" in str(info.value) and "no such line" in str(info.value)


# ---- tile edges and stale CUDA-graph host ints ---------------------------------------------------------

def test_tile_edges_are_n_times_tile_plus_minus_one():
    from kernel_oracle.fuzz.strategies import tile_edges

    assert tile_edges(0, 17) == (15, 16, 17)
    assert tile_edges(100, 130) == (111, 112, 113, 127, 128, 129)
    assert tile_edges(0, 14) == ()


EDGE_SETTINGS = settings(database=None, max_examples=400, derandomize=True, deadline=None,
                         suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("what, found", [
    ("a 17-row segment (one past a 16-row tile)", lambda p: 17 in p.seg_lens),
    ("a 15-row segment", lambda p: 15 in p.seg_lens),
    ("qk_nope at a tile edge off the preset's dims", lambda p: p.qk in (15, 17)),
    ("kv_lora_rank one past 32", lambda p: p.C == 33),
    ("a buffer rank of 17", lambda p: p.R == 17),
])
def test_tiny_lora_preset_reaches_tile_edges(what, found):
    """The interpreter's tiny preset (segments up to 16 rows, dims from a short list) still draws
    sizes on both sides of a tile edge."""
    p = find(lora_problems(limits="tiny"), found, settings=EDGE_SETTINGS)
    assert found(p), what


def test_tiny_vision_preset_reaches_tile_edges():
    v = find(vision_problems(limits="tiny"), lambda v: 17 in v.lengths, settings=EDGE_SETTINGS)
    assert 17 in v.lengths


@FAST
@given(lora_problems(limits="tiny"))
def test_stale_host_ints_only_under_cuda_graph_and_within_bounds(p):
    if p.stale_host_ints is None:
        return
    bs, num, max_len = p.stale_host_ints
    assert p.cuda_graph_pad_to is not None
    assert 0 <= bs <= max(len(p.seg_lens) - 1, 0) and 0 <= num <= max(len(p.seg_lens) - 1, 0)
    assert max_len >= max(p.seg_lens, default=0)
    bi = batch_info_of(materialize(p))
    assert (bi.bs, bi.num_segments) == (bs, num)
    assert bi.max_len == (max_len if p.with_max_len else None)


def test_stale_host_ints_are_drawn_smaller_than_the_replayed_batch():
    p = find(lora_problems(limits="tiny"),
             lambda p: p.stale_host_ints is not None and len([n for n in p.seg_lens if n]) >= 2
             and p.stale_host_ints[0] == 0 and p.stale_host_ints[2] > max(p.seg_lens),
             settings=EDGE_SETTINGS)
    assert p.cuda_graph_pad_to >= len(p.seg_lens)


def test_stale_host_ints_are_validated():
    from kernel_oracle.reference.batch_info import make_lora_batch_info

    with pytest.raises(ValueError, match=r"^stale_host_ints=\(1, 1, 4\) needs CUDA-graph mode"):
        make_lora_batch_info([2, 3], [0, 0], [16], [1.0], stale_host_ints=(1, 1, 4))
    with pytest.raises(ValueError, match=r"^stale_host_ints max_len=2 is smaller than the longest segment \(3\)"):
        make_lora_batch_info([2, 3], [0, 0], [16], [1.0], cuda_graph_pad_to=3, stale_host_ints=(1, 1, 2))
    with pytest.raises(ValueError, match=r"^stale_host_ints bs=4 is outside 0\.\.3"):
        make_lora_batch_info([2, 3], [0, 0], [16], [1.0], cuda_graph_pad_to=3, stale_host_ints=(4, 1, 3))


def test_generated_cases_expose_sglang_0_5_12_graph_replay_bug():
    """Without shrinking or a hint, the valid LoRA cases of the tiny preset hit PR #28371 in 0.5.12
    and the same cases pass on 0.5.23 (the fuzzer finds the bug on its own)."""
    from hypothesis import Phase

    from kernel_oracle.fuzz.strategies import cases
    from kernel_oracle.harness.check import check_case
    from oracle_tests._sglang_releases import release_target

    from oracle_tests.conftest import DEVICE  # the kernels run where this session runs Triton

    old, new = release_target("sglang==0.5.12", DEVICE), release_target("sglang==0.5.23", DEVICE)
    strategy = cases("lora", categories=("valid",), dtypes=("float32",), ops=("step_a_q", "step_b_v"),
                     limits="tiny")
    hit = find(strategy, lambda c: not check_case(old, c, DEVICE).ok,
               settings=settings(database=None, max_examples=150, derandomize=True, deadline=None,
                                 phases=(Phase.generate,), suppress_health_check=list(HealthCheck)))
    assert hit.problem.stale_host_ints is not None, hit
    assert check_case(new, hit, DEVICE).ok


def test_declined_call_features_are_never_drawn():
    """A release whose layer passes no softmax_scale and no forward_metadata (SGLang 0.5.10) gets neither."""
    from hypothesis import given, settings

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(vision_problems(limits="tiny", declines=["softmax_scale", "forward_metadata"]))
    def check(p):
        assert p.softmax_scale is None and p.path == "kwargs"

    check()
