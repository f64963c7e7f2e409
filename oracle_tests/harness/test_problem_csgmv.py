"""The csgmv problem (harness.problem_csgmv): its call's shapes and metadata, fresh data per seed, the
round trip through a file, the size bounds, its simplifications staying valid, and the oracle hookup of
harness.check (a right answer passes, a wrong one is a mismatch)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.harness.problems import materialize, problem_from_dict, problem_to_dict
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference import csgmv as ref_csgmv


def _problem(op="csgmv_expand", **kw) -> CsgmvProblem:
    fields = dict(op=op, seg_lens=(3, 0, 2), weight_indices=(0, 1, 2), lora_ranks=(4, 0, 10), scalings=(0.5, 1.0, -2.0),
                  permutation=(4, 0, 5, 2, 3), num_slices=2, slice_offsets=(0, 10, 16), K=24, R=8, unrouted_rows=1)
    return CsgmvProblem(**{**fields, **kw})


def test_the_shrink_call_has_the_entry_points_shapes_and_metadata():
    call = materialize(_problem("csgmv_shrink", split_k=2))
    x, w, bi, num_slices = call.args
    assert call.entry == "chunked_sgmv_lora_shrink_forward" and call.inplace is None
    assert x.shape == (6, 24) and w.shape == (3, 16, 24) and num_slices == 2 and call.kwargs == {"split_k": 2}
    assert bi.seg_indptr.tolist() == [0, 3, 3, 5] and bi.weight_indices.tolist() == [0, 1, 2]
    assert bi.permutation.tolist() == [4, 0, 5, 2, 3] and bi.max_len == 16 and not bi.use_cuda_graph


@pytest.mark.parametrize("base", ["buffer", "view", "none"])
def test_the_expand_call_accumulates_into_its_base(base):
    call = materialize(_problem(base=base, cpu_offsets=True))
    x, w, bi, offsets, max_slice_size, out = call.args
    assert x.shape == (6, 16) and w.shape == (3, 16, 8) and offsets.tolist() == [0, 10, 16] and max_slice_size == 10
    assert call.kwargs["slice_offsets_cpu"].tolist() == [0, 10, 16]
    if base == "none":
        assert out is None and call.inplace is None
    else:
        assert out.shape == (6, 16) and call.inplace == 5 and out.is_contiguous() == (base == "buffer")


def test_graph_padding_and_stale_host_ints():
    bi = materialize(_problem(use_cuda_graph=True, graph_pad_to=5, stale_host_ints=(2, 1))).args[2]
    assert bi.use_cuda_graph and (bi.bs, bi.num_segments) == (2, 1)
    assert bi.seg_indptr.tolist() == [0, 3, 3, 5, 5, 5] and bi.weight_indices.tolist() == [0, 1, 2, 0, 0]


def test_fresh_data_per_seed_and_the_same_data_for_the_same_seed():
    a, b = materialize(_problem(seed=1)).args[0], materialize(_problem(seed=1)).args[0]
    assert torch.equal(a, b) and not torch.equal(a, materialize(_problem(seed=2)).args[0])


def test_a_problem_round_trips_through_its_dict_and_bad_ones_are_refused():
    p = _problem(use_cuda_graph=True, graph_pad_to=4, stale_host_ints=(1, 1))
    assert problem_from_dict(problem_to_dict(p)) == p
    with pytest.raises(ValueError, match="permutation has 4 rows but the segments 5"):
        _problem(permutation=(0, 1, 2, 3))
    with pytest.raises(ValueError, match=r"seg_lens=\(-1, 0, 2\) is negative"):
        problem_from_dict({**problem_to_dict(_problem()), "seg_lens": [-1, 0, 2], "permutation": [0]})
    with pytest.raises(ValueError, match="more than the 2147483648 a case may have"):
        problem_from_dict({**problem_to_dict(_problem()), "K": 2**31})


# metadata a problem read from data may not carry (a mutation breaks metadata; a problem never does): the
# field, its value and the exact refusal
MALFORMED_PROBLEMS = [
    ({"num_slices": 0, "slice_offsets": [0]},
     "num_slices=0; a layer has 1 or more slices (q, k, v: 3)"),
    ({"slice_offsets": [0, 16, 10]},
     "slice_offsets=(0, 16, 10) must not decrease: each slice's columns start where the one before ends"),
    ({"permutation": [4, 0, 6, 2, 3]},  # a row past x: the kernels would write there (heap corruption)
     "permutation[2]=6 is outside 0..5 (the rows of x: the segments' rows and unrouted_rows)"),
    ({"permutation": [4, 0, -1, 2, 3]},
     "permutation[2]=-1 is outside 0..5 (the rows of x: the segments' rows and unrouted_rows)"),
    ({"weight_indices": [0, 3, 2]}, "weight_indices[1]=3 is outside 0..2 (the slots of lora_ranks)"),
    ({"weight_indices": [0, 1]}, "weight_indices has 2 slots but seg_lens 3 segments; pass one slot per segment"),
    ({"scalings": [1.0]}, "scalings has 1 values but lora_ranks 3 slots; pass one per slot"),
    # counts that size a launch grid or a loop: refused before anything is allocated or looped over
    ({"use_cuda_graph": True, "graph_pad_to": 30_000_000},
     "graph_pad_to: 30000000, more than the 8192 a case may have (it sizes a kernel's launch grid and the "
     "harness's loops)"),
    ({"max_len": 10**6}, "max_len: 1000000, more than the 8192 a case may have (it sizes a kernel's launch grid "
                         "and the harness's loops)"),
    ({"op": "csgmv_shrink", "base": "buffer", "split_k": 10**6},
     "split_k: 1000000, more than the 8192 a case may have (it sizes a kernel's launch grid and the harness's loops)"),
]


@pytest.mark.parametrize("changes,why", MALFORMED_PROBLEMS, ids=[next(iter(c)) for c, _ in MALFORMED_PROBLEMS])
def test_a_problem_with_metadata_no_batch_has_is_refused_naming_the_field(changes, why):
    with pytest.raises(ValueError) as refused:
        problem_from_dict({**problem_to_dict(_problem()), **changes})
    assert str(refused.value) == why


def test_every_simplification_is_a_valid_problem():
    p = _problem(use_cuda_graph=True, graph_pad_to=5, stale_host_ints=(2, 1), base="view", cpu_offsets=True)
    variants = list(p.simplifications())
    assert len(variants) == 5 + len(p.seg_lens)
    for v in variants:
        c = materialize(v)
        ref_csgmv.expand_reference(*c.args, **c.kwargs)  # raises for an invalid batch
    assert all(v is not None for v in p.feature_variants().values())


def _wrong_reference(scale: float) -> Target:
    """The oracle's own entry points, the expand's delta scaled by ``scale``."""
    def expand(x, weights, batch_info, slice_offsets, max_slice_size, base_output=None, slice_offsets_cpu=None):
        before = base_output.clone()
        out = ref_csgmv.chunked_sgmv_lora_expand_forward(x, weights, batch_info, slice_offsets, max_slice_size,
                                                         base_output, slice_offsets_cpu)
        return out.copy_(before + scale * (out - before))

    return Target("wrong", {"csgmv_shrink": ref_csgmv.chunked_sgmv_lora_shrink_forward, "csgmv_expand": expand})


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_check_passes_the_oracle_and_fails_a_doubled_scaling(dtype):
    case = Case(_problem(dtype=dtype))
    assert check_case(_wrong_reference(1.0), case).ok
    verdict = check_case(_wrong_reference(2.0), case)
    assert not verdict.ok and verdict.kind == "mismatch" and verdict.message.startswith("output: ")
    assert verdict.bucket.family == "csgmv" and verdict.bucket.op == "csgmv_expand"
    # a rank-0 slot's rows and unrouted rows are untouched: a plain buffer with no routed row passes both
    empty = Case(dataclasses.replace(_problem(dtype=dtype), lora_ranks=(0, 0, 0)))
    assert check_case(_wrong_reference(2.0), empty).ok
