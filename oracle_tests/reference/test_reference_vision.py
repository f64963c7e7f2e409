"""The ``flashinfer_cudnn`` vision reference against SDPA with a block-diagonal mask, and its metadata.

The independent formulation (:func:`kernel_oracle.independent.vision_independent`) gathers every
covered token through ``as_strided`` from the element offsets and runs one masked SDPA call; the
reference must agree on the value and on the covered region, for every sample of the OpInfo
database (strided v, distinct v/o offsets, 3-D and 4-D inputs, max_seqlen as int or tensor).
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from kernel_oracle.harness.opinfo_vision import VISION_OPINFO
from kernel_oracle.harness.problem_vision import VisionProblem, materialize_vision
from kernel_oracle.reference.independent_vision import vision_independent
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import flashinfer_cudnn_attention, flashinfer_cudnn_oracle
from kernel_oracle.reference.vision_metadata import (
    VisionAttentionMetadata,
    bucket_batch_size,
    bucket_max_seqlen,
    prepare_flashinfer_cudnn_metadata,
)

from oracle_tests._checks import assert_defined_close

VISION_CASES = [
    pytest.param(dtype, sample, id=f"{str(dtype)[6:]}-{sample.name}")
    for dtype in VISION_OPINFO.dtypes
    for sample in VISION_OPINFO.sample_inputs("cpu", dtype)
]

# (real batch size, bucketed size): SGLang pads batches to 8, 16, 32, 64 with zero-length entries
BATCH_BUCKET_TABLE = [(1, 8), (2, 8), (8, 8), (9, 16), (16, 16), (17, 32), (33, 64), (64, 64)]
# (longest sequence, bucketed max_seqlen): 4K .. 128K
MAX_SEQLEN_TABLE = [(0, 4096), (1, 4096), (4096, 4096), (4097, 8192), (9000, 16384), (20000, 32768),
                    (40000, 65536), (131072, 131072)]


@pytest.mark.parametrize("dtype,sample", VISION_CASES)
def test_oracle_matches_sdpa(dtype, sample, device):
    call = sample.call(device)
    result = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    assert result.value.dtype == torch.float64
    value, defined = vision_independent(*call.args, **call.kwargs)
    assert_defined_close(result.value, result.defined, value, defined, what=f"vision {sample.name}")


@pytest.mark.parametrize("dtype,sample", VISION_CASES)
def test_attention_in_input_dtype(dtype, sample, device):
    call = sample.call(device)
    value, defined = vision_independent(*call.args, **call.kwargs)
    baseline = flashinfer_cudnn_oracle(*call.args, faithful=True, **call.kwargs)
    out = flashinfer_cudnn_attention(*call.args, **call.kwargs)
    q = call.args[0]
    assert out.dtype == q.dtype and out.device == q.device
    assert out.shape == (*q.shape[:-1], call.args[2].shape[-1]), "4-D in, 4-D out; v's head dim"
    cmp = compare(out, value, defined, family="vision", baseline=baseline.baselines, out_dtype=q.dtype)
    assert cmp.ok, cmp.message


def test_prepare_metadata_example():
    """The issue's worked example: two images of 480 and 720 tokens, 1536 elements per token."""
    md = prepare_flashinfer_cudnn_metadata(torch.tensor([0, 480, 1200]), "cpu", elem_per_token=1536)
    one = [0, 480 * 1536, 1200 * 1536] + [1200 * 1536] * 6
    assert md.packed_indptrs.tolist() == one * 3
    assert md.packed_indptrs.dtype == torch.int32
    assert md.sequence_lengths.reshape(-1).tolist() == [480, 720] + [0] * 6
    assert md.flashinfer_max_seqlen == 4096
    assert md.cu_seqlens.tolist() == [0, 480, 1200]
    assert md.seq_lens.tolist() == [480, 720]
    assert md.max_seqlen == 720


def test_prepare_metadata_separate_v_and_o_offsets():
    """v inside an interleaved qkv buffer (stride 3*H*D) and o at its own offset."""
    md = prepare_flashinfer_cudnn_metadata([0, 3, 5], "cpu", elem_per_token=8, v_elem_per_token=24,
                                           v_elem_offset=16, o_elem_offset=40)
    qk, v, o = md.packed_indptrs.reshape(3, -1).tolist()
    assert qk == [0, 24, 40] + [40] * 6
    assert v == [16, 16 + 72, 16 + 120] + [16 + 120] * 6
    assert o == [40, 64, 80] + [80] * 6


@pytest.mark.parametrize("real,bucket", BATCH_BUCKET_TABLE)
def test_batch_buckets(real, bucket):
    assert bucket_batch_size(real) == bucket
    md = prepare_flashinfer_cudnn_metadata(list(range(real + 1)), "cpu", elem_per_token=4,
                                           sequence_lengths_4d=True)
    assert md.sequence_lengths.shape == (bucket, 1, 1, 1)
    assert md.packed_indptrs.numel() == 3 * (bucket + 1)
    assert md.sequence_lengths[real:].eq(0).all()


@pytest.mark.parametrize("longest,bucket", MAX_SEQLEN_TABLE)
def test_max_seqlen_buckets(longest, bucket):
    assert bucket_max_seqlen(longest) == bucket


@pytest.mark.parametrize("max_seqlen_kind", ["int", "cpu_tensor", "device_tensor"])
@pytest.mark.parametrize("path", ["metadata", "kwargs"])
@pytest.mark.parametrize("four_d", [False, True])
def test_paths_and_layouts_agree(max_seqlen_kind, path, four_d, device):
    """Every way of passing the same problem gives the same output."""
    p = VisionProblem(lengths=(6, 0, 9), H=3, D=8, layout="v_strided", v_shift=1, o_shift=2, seed=41)
    base = materialize_vision(p, device)
    ref = flashinfer_cudnn_oracle(*base.args, **base.kwargs)
    q = dataclasses.replace(p, max_seqlen_kind=max_seqlen_kind, path=path, four_d=four_d)
    call = materialize_vision(q, device)
    got = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    assert torch.equal(got.value.reshape(ref.value.shape), ref.value)
    assert torch.equal(got.defined.reshape(ref.defined.shape), ref.defined)


def test_duck_typed_metadata(device):
    p = VisionProblem(lengths=(5, 7), seed=43)
    call = materialize_vision(p, device)
    md = call.kwargs["forward_metadata"]
    duck = types.SimpleNamespace(**{k: getattr(md, k) for k in VisionAttentionMetadata.__dataclass_fields__})
    want = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    got = flashinfer_cudnn_oracle(*call.args, **{**call.kwargs, "forward_metadata": duck})
    assert torch.equal(got.value, want.value)


def test_uncovered_tokens_are_undefined(device):
    p = VisionProblem(lengths=(4, 6), o_shift=2, extra_tokens=3, seed=47)
    call = materialize_vision(p, device)
    res = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    covered = res.defined.flatten(1).all(1)
    assert covered.tolist() == [False] * 2 + [True] * 10 + [False] * 3


def test_faithful_modes_vision(device):
    p = VisionProblem(lengths=(40, 23), H=2, D=32, dtype="float32", seed=53)
    call = materialize_vision(p, device)
    exact = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    fp32 = flashinfer_cudnn_oracle(*call.args, faithful=True, **call.kwargs)
    tf32 = flashinfer_cudnn_oracle(*call.args, faithful="tf32", **call.kwargs)
    d = exact.defined
    err32 = (fp32.value.double() - exact.value)[d].abs().max().item()
    err_tf32 = (tf32.value.double() - exact.value)[d].abs().max().item()
    assert fp32.value.dtype == torch.float32
    assert 0 < err32 < err_tf32 < 1e-2
