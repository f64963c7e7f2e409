"""Metamorphic relations: changes of the metadata that must not change the results.

LoRA: shuffling the physical rows together with the permutation permutes the outputs the same way;
splitting a segment in two with the same slot changes nothing; CUDA-graph padding with zero-length
segments changes nothing.  Vision: reordering the images inside the packed buffer permutes the
outputs; padding the batch to a larger bucket changes nothing; v as a strided view into an
interleaved qkv buffer changes nothing.  The problems are fresh random data from the fuzz problem
types; results compare in float64 over the defined region (whose masks must transform alike).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.opinfo_lora import LORA_OPINFOS
from kernel_oracle.harness.problem_lora import LoRAProblem, materialize_lora
from kernel_oracle.harness.problem_vision import VisionProblem, materialize_vision
from kernel_oracle.reference.batch_info import LoRABatchInfo
from kernel_oracle.reference.vision import flashinfer_cudnn_oracle
from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

from oracle_tests._checks import assert_defined_close

LORA_OPS = [info.name for info in LORA_OPINFOS]

# (name, segment lengths, slots, ranks, scalings, extra problem fields)
LORA_BASES = [
    ("identity_routing", (6, 9, 4), (0, 1, 0), (16, 7), (1.0, -0.5), {"extra_rows": 3}),
    ("permuted", (5, 0, 8, 3), (1, 0, 1, 0), (12, 16), (2.0, 0.25), {"permute": True, "extra_rows": 2}),
]


def _problem(op, base, **changes) -> LoRAProblem:
    _, lens, slots, ranks, scal, extra = base
    p = LoRAProblem(op=op, seg_lens=lens, weight_indices=slots, lora_ranks=ranks, scalings=scal, seed=61, **extra)
    return dataclasses.replace(p, **changes)


def _bi(call):
    return next(a for a in call.args if isinstance(a, LoRABatchInfo))


@pytest.mark.parametrize("base", LORA_BASES, ids=[b[0] for b in LORA_BASES])
@pytest.mark.parametrize("op", LORA_OPS)
def test_lora_shuffle_rows_with_permutation(op, base, device):
    call = materialize_lora(_problem(op, base), device)
    want = OP_DB[op].oracle(*call.args)
    S = call.args[0].shape[0]
    pi = torch.randperm(S, generator=torch.Generator().manual_seed(67))  # physical row t moves to pi[t]
    bi = _bi(call)
    old = bi.permutation.cpu() if bi.permutation is not None else torch.arange(S)

    def move(t):
        # activations and base_output; the LoRA buffers (args 1 and, fused, 2) never move
        if not isinstance(t, torch.Tensor) or t is call.args[1] or t is call.args[2]:
            return t
        moved = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        moved[pi.to(t.device)] = t
        return moved

    new_bi = dataclasses.replace(bi, permutation=pi[old].to(device))
    args = tuple(new_bi if a is bi else move(a) for a in call.args)
    got = OP_DB[op].oracle(*args)
    assert_defined_close(got.value[pi], got.defined[pi], want.value, want.defined, what=f"{op} shuffled rows")


@pytest.mark.parametrize("base", LORA_BASES, ids=[b[0] for b in LORA_BASES])
@pytest.mark.parametrize("op", LORA_OPS)
def test_lora_split_segment_same_slot(op, base, device):
    """Segment 0 (5 or 6 rows) split into 2 + rest, both halves on segment 0's slot."""
    p = _problem(op, base)
    lens, slots = p.seg_lens, p.weight_indices
    split = _problem(op, base, seg_lens=(2, lens[0] - 2) + lens[1:], weight_indices=(slots[0],) + slots)
    want = OP_DB[op].oracle(*materialize_lora(p, device).args)
    got = OP_DB[op].oracle(*materialize_lora(split, device).args)  # same seed, same S: same tensors
    assert_defined_close(got.value, got.defined, want.value, want.defined, what=f"{op} split segment")


@pytest.mark.parametrize("pad_to", [5, 16])
@pytest.mark.parametrize("op", LORA_OPS)
def test_lora_cuda_graph_padding(op, pad_to, device):
    base = LORA_BASES[1]
    want = OP_DB[op].oracle(*materialize_lora(_problem(op, base), device).args)
    call = materialize_lora(_problem(op, base, cuda_graph_pad_to=pad_to), device)
    assert _bi(call).use_cuda_graph and _bi(call).weight_indices.shape[0] == pad_to
    got = OP_DB[op].oracle(*call.args)
    assert_defined_close(got.value, got.defined, want.value, want.defined, what=f"{op} padded to {pad_to}")


def _vision_call(q, k, v, lengths, device, *, batch_pad=None, v_stride=None):
    """Kwargs-path call for contiguous q/k/o; ``batch_pad`` extra zero-length entries."""
    T, H, D = q.shape
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    md = prepare_flashinfer_cudnn_metadata(cu, device, elem_per_token=H * D, v_elem_per_token=v_stride or H * D)
    packed, seq = md.packed_indptrs, md.sequence_lengths
    if batch_pad:
        B = seq.numel()
        parts = packed.reshape(3, B + 1)
        parts = torch.cat([parts, parts[:, -1:].expand(3, batch_pad)], dim=1)
        packed = parts.reshape(-1)
        seq = torch.cat([seq, torch.zeros(batch_pad, dtype=seq.dtype, device=seq.device)])
    return flashinfer_cudnn_oracle(q, k, v, packed, 1, T, sequence_lengths=seq, max_seqlen=md.flashinfer_max_seqlen)


def _qkv(lengths, device, H=2, D=16, seed=71):
    T = sum(lengths)
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(T, H, D, generator=g, dtype=torch.float32).to(device) for _ in range(3))


def test_vision_reorder_images(device):
    lengths = (5, 9, 3, 12)
    q, k, v = _qkv(lengths, device)
    want = _vision_call(q, k, v, lengths, device)
    order = [2, 0, 3, 1]
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    idx = torch.cat([torch.arange(starts[b], starts[b] + lengths[b]) for b in order])
    new_lengths = [lengths[b] for b in order]
    got = _vision_call(q[idx], k[idx], v[idx], new_lengths, device)
    # the token that moved to position j came from idx[j]
    assert_defined_close(got.value, got.defined, want.value[idx], want.defined[idx], what="vision reordered images")


@pytest.mark.parametrize("batch_pad", [1, 8, 20])
def test_vision_more_padding(batch_pad, device):
    lengths = (7, 0, 10)
    q, k, v = _qkv(lengths, device, seed=73)
    want = _vision_call(q, k, v, lengths, device)
    got = _vision_call(q, k, v, lengths, device, batch_pad=batch_pad)
    assert_defined_close(got.value, got.defined, want.value, want.defined, what=f"vision +{batch_pad} padding")


def test_vision_v_strided_view(device):
    lengths = (6, 11)
    q, k, v = _qkv(lengths, device, seed=79)
    want = _vision_call(q, k, v, lengths, device)
    qkv = torch.randn(v.shape[0], 3, *v.shape[1:], dtype=v.dtype).to(device)
    qkv[:, 2] = v
    v_view = qkv[:, 2]
    assert not v_view.is_contiguous()
    got = _vision_call(q, k, v_view, lengths, device, v_stride=v_view.stride(0))
    assert_defined_close(got.value, got.defined, want.value, want.defined, what="vision strided v")


def test_vision_problem_layouts_agree(device):
    """The fuzz problem's v_strided layout against a contiguous copy of the same v."""
    p = VisionProblem(lengths=(8, 5), layout="v_strided", v_shift=1, o_shift=2, seed=83)
    call = materialize_vision(p, device)
    want = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    q, k, v = call.args[:3]
    md = call.kwargs["forward_metadata"]
    B = md.sequence_lengths.numel()
    parts = md.packed_indptrs.reshape(3, B + 1).clone()
    parts[1] = parts[1] // v.stride(0) * (v.shape[1] * v.shape[2])  # same tokens, contiguous v
    new_md = dataclasses.replace(md, packed_indptrs=parts.reshape(-1))
    got = flashinfer_cudnn_oracle(q, k, v.contiguous(), call.args[3], 1, q.shape[0], forward_metadata=new_md)
    assert_defined_close(got.value, got.defined, want.value, want.defined, what="vision contiguous v")
