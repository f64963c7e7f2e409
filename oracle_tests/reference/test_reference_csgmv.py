"""The csgmv oracle (reference/csgmv.py) against an independent formulation, its defined region, its
error contracts and its comparison rule.

The independent formulation walks the batch one logical row at a time and sums each output entry with
``math.fsum`` over Python floats: no matmul, no slicing by segment, no tensor indexing by row lists.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kernel_oracle.reference.csgmv import CSGMV_CONTRACTS, csgmv_segments, expand_reference, shrink_reference

from oracle_tests._csgmv_cases import batch_info, random_case

CASES = [(seed, slices) for seed in range(3) for slices in (1, 2, 3)]


def _rows(bi):
    """(physical row, slot) of every logical row a launch processes, one row at a time."""
    indptr, slots, perm = bi.seg_indptr.tolist(), bi.weight_indices.tolist(), bi.permutation.tolist()
    count = len(slots) if bi.use_cuda_graph else bi.num_segments
    out = []
    for b in range(count):
        t = indptr[b]
        while t < indptr[b + 1]:
            if bi.lora_ranks.tolist()[slots[b]] > 0:
                out.append((perm[t], slots[b]))
            t += 1
    return out


def loop_shrink(x, w, bi, num_slices):
    """{(row, col): value} of every entry the shrink defines."""
    out = {}
    for row, slot in _rows(bi):
        r = bi.lora_ranks.tolist()[slot]
        for col in range(min(w.shape[1], r * num_slices)):
            out[(row, col)] = math.fsum(float(x[row, k]) * float(w[slot, col, k]) for k in range(x.shape[1]))
    return out


def loop_expand(x, w, bi, offsets, base):
    """The expand's whole output as nested lists."""
    out = [[float(v) for v in row] for row in base]
    R = w.shape[2]
    for row, slot in _rows(bi):
        r, scale = min(R, bi.lora_ranks.tolist()[slot]), float(bi.scalings[slot])
        for i in range(len(offsets) - 1):
            for col in range(offsets[i], offsets[i + 1]):
                out[row][col] += scale * math.fsum(float(x[row, i * r + k]) * float(w[slot, col, k])
                                                   for k in range(r))
    return out


@pytest.mark.parametrize("seed,slices", CASES)
@pytest.mark.parametrize("graph", [False, True])
def test_shrink_matches_a_per_row_loop(seed, slices, graph):
    c = random_case(seed, slices, graph_pad_to=12 if graph else None, host_ints=(1, 1) if graph else None)
    e = shrink_reference(c.x, c.a, c.batch_info, slices)
    want = loop_shrink(c.x, c.a, c.batch_info, slices)
    assert int(e.defined.sum()) == len(want)
    for (row, col), v in want.items():
        assert e.defined[row, col] and e.value[row, col].item() == pytest.approx(v, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed,slices", CASES)
@pytest.mark.parametrize("with_base", [False, True])
def test_expand_matches_a_per_row_loop(seed, slices, with_base):
    c = random_case(seed, slices)
    base = c.base if with_base else torch.zeros_like(c.base)
    e = expand_reference(c.h, c.b, c.batch_info, c.offsets, c.max_slice_size, c.base if with_base else None)
    want = torch.tensor(loop_expand(c.h, c.b, c.batch_info, c.offsets.tolist(), base), dtype=torch.float64)
    assert bool(e.defined.all())
    torch.testing.assert_close(e.value, want, rtol=1e-12, atol=1e-12)


def test_defined_region_and_untouched_rows():
    """Shrink: only routed rows of positive-rank slots, only the rank's packed columns; expand: rows no segment
    routes keep the base exactly."""
    bi = batch_info([3, 0, 2], [0, 1, 2], ranks=[4, 8, 0], scalings=[1.0, 2.0, 3.0], permutation=[5, 0, 2, 4, 1],
                    chunk=16)
    x, a = torch.randn(7, 48), torch.randn(3, 2 * 8, 48)
    e = shrink_reference(x, a, bi, 2)
    want = torch.zeros(7, 16, dtype=torch.bool)
    want[[5, 0, 2], :8] = True  # slot 0, rank 4, two slices: columns 0..8; rows 4, 1 are slot 2 (rank 0)
    assert torch.equal(e.defined, want)
    h, b, base = torch.randn(7, 16), torch.randn(3, 30, 8), torch.randn(7, 30)
    offsets = torch.tensor([0, 20, 30])
    ex = expand_reference(h, b, bi, offsets, 20, base)
    untouched = [1, 3, 4, 6]
    assert torch.equal(ex.value[untouched], base[untouched].double())
    assert not torch.equal(ex.value[[5, 0, 2]], base[[5, 0, 2]].double())
    fresh = expand_reference(h, b, bi, offsets, 20)
    assert torch.equal(fresh.value[untouched], torch.zeros(4, 30, dtype=torch.float64))


def test_segments_processed_eagerly_and_under_cuda_graph():
    """Eagerly the first num_segments; under CUDA graph every device segment, whatever the host ints say."""
    eager = batch_info([2, 3, 1], [0, 1, 0], [4, 4], [1.0, 1.0], permutation=range(6), host_ints=(3, 2))
    assert csgmv_segments(eager) == [(0, 2, 0), (2, 5, 1)]
    graph = batch_info([2, 3, 1], [0, 1, 0], [4, 4], [1.0, 1.0], permutation=range(6), graph_pad_to=5,
                       host_ints=(1, 1))
    assert csgmv_segments(graph) == [(0, 2, 0), (2, 5, 1), (5, 6, 0), (6, 6, 0), (6, 6, 0)]


def test_a_row_routed_twice_is_undefined():
    bi = batch_info([2, 2], [0, 1], [4, 4], [1.0, 0.5], permutation=[0, 1, 1, 2])
    e = shrink_reference(torch.randn(3, 48), torch.randn(2, 4, 48), bi, 1)
    assert e.defined[:, 0].tolist() == [True, False, True]
    ex = expand_reference(torch.randn(3, 4), torch.randn(2, 6, 4), bi, torch.tensor([0, 6]), 6, torch.randn(3, 6))
    assert ex.defined[:, 0].tolist() == [True, False, True]


def test_split_k_is_a_summation_order_only():
    c = random_case(4, 3)
    plain = shrink_reference(c.x, c.a, c.batch_info, 3)
    for split in (1, 2, 16):
        assert torch.equal(shrink_reference(c.x, c.a, c.batch_info, 3, split_k=split).value, plain.value)


# ---- error contracts: upstream's exact type and text -----------------------------------------------------------

@pytest.mark.parametrize("split_k", [0, -1])
def test_split_k_below_one_raises_upstreams_value_error(split_k):
    c = random_case(0, 1)
    with pytest.raises(ValueError) as info:
        shrink_reference(c.x, c.a, c.batch_info, 1, split_k=split_k)
    assert type(info.value) is ValueError and str(info.value) == "split_k must be positive"
    assert CSGMV_CONTRACTS["split_k"] == (ValueError, "split_k must be positive")


def _bare_assert(fn, *args):
    with pytest.raises(AssertionError) as info:
        fn(*args)
    assert type(info.value) is AssertionError and str(info.value) == ""


def test_upstream_asserts_are_bare_assertion_errors():
    c = random_case(0, 2)
    bi, ms = c.batch_info, c.max_slice_size
    _bare_assert(shrink_reference, c.x.t().contiguous().t(), c.a, bi, 2)  # non-contiguous x
    _bare_assert(shrink_reference, c.x[:, :40].contiguous(), c.a, bi, 2)  # K mismatch
    _bare_assert(shrink_reference, c.x, c.a[0], bi, 2)  # 2-D weights
    _bare_assert(expand_reference, c.h[:, :12].contiguous(), c.b, bi, c.offsets, ms)  # width != slices * R
    _bare_assert(expand_reference, c.h, c.b.transpose(1, 2).contiguous().transpose(1, 2), bi, c.offsets, ms)


def test_inputs_outside_the_contract_raise_value_error_with_the_fix():
    c = random_case(1, 3, tokens=30)
    long = batch_info([16, 3], [0, 1], [8, 8], [1.0, 1.0], permutation=range(19), chunk=8)
    with pytest.raises(ValueError) as info:
        shrink_reference(c.x, c.a, long, 3)
    assert str(info.value) == ("a segment has 16 rows but max_len (the kernels' row tile, BLOCK_M) is 8: the rows "
                               "past it are never computed; cut segments to at most max_len rows, as SGLang's "
                               "chunking does")
    with pytest.raises(ValueError) as info:
        expand_reference(c.h, c.b, c.batch_info, c.offsets, 39)
    assert str(info.value) == ("a slice is 40 columns wide but max_slice_size=39: the grid never reaches its last "
                               "columns; pass max_slice_size >= 40")
    with pytest.raises(ValueError) as info:
        expand_reference(c.h, c.b, c.batch_info, c.offsets, 40, None, torch.tensor([0, 40, 56, 73]))
    assert str(info.value) == ("slice_offsets_cpu=[0, 40, 56, 73] disagrees with slice_offsets=[0, 40, 56, 72]; "
                               "pass the same offsets (the CPU copy is the layer's metadata)")
    with pytest.raises(ValueError) as info:
        shrink_reference(c.x, c.a, dataclasses.replace(c.batch_info, permutation=None), 3)
    assert str(info.value) == ("csgmv batch_info.permutation must be a 1-D int32 or int64 tensor on cpu, got NoneType "
                               "None; build it with torch.tensor(values, dtype=torch.int32, device=x.device)")
    perm = c.batch_info.permutation
    row = int((perm >= 10).nonzero()[0])  # the first logical row whose physical row is not among x[:10]
    with pytest.raises(ValueError) as info:
        shrink_reference(c.x[:10].contiguous(), c.a, c.batch_info, 3)
    assert str(info.value) == (f"csgmv batch_info.permutation[{row}]={int(perm[row])} is outside [0, 10): x has 10 "
                               f"rows, and the kernels would read and write row {int(perm[row])} unchecked")


# ---- the comparison rule ---------------------------------------------------------------------------------------

def test_mismatch_passes_fp32_rounding_and_catches_defects():
    c = random_case(2, 3)
    e = shrink_reference(c.x, c.a, c.batch_info, 3)
    good = torch.where(e.defined, e.value, torch.nan).float()  # fp32 rounding of the exact value, NaN where undefined
    assert e.mismatch(good) is None
    row = int(e.defined.any(1).nonzero()[-1])
    dropped = good.clone()
    dropped[row] = torch.nan
    assert f"rows differing: [{row}]" in e.mismatch(dropped)
    nudged = good.clone()
    nudged[e.defined] *= 1 + 1e-4
    assert e.mismatch(nudged).endswith("; rows differing: " + str(sorted(set(e.defined.nonzero()[:, 0].tolist()))))
    assert e.mismatch(good[:, :-1]) == f"shape {tuple(good[:, :-1].shape)} != expected {tuple(good.shape)}"
