"""SGLang's whole vision call in the reference: GQA/MQA, k's tokens from q's offsets, windows, sinks,
(b, s, H, D) rows, indptr gaps, every metadata path and the release's helper (docs/semantics.md#vision-attention; Note
[Grouped-query attention] in reference.vision_metadata, Note [Window and sinks] in
reference.vision_arguments).  Each definition is checked against a formulation written out here."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kernel_oracle.harness.problem_vision import VISION_PATHS, VisionProblem, materialize_vision
from kernel_oracle.reference.vision import flashinfer_cudnn_attention, flashinfer_cudnn_oracle
from kernel_oracle.reference.vision_arguments import window_mask
from kernel_oracle.reference.vision_metadata import (
    prepare_flashinfer_cudnn_metadata,
    prepare_flashinfer_cudnn_vision_attention_metadata,
)

# (window, sequence length, the keys each query attends: row i lists keys j); FlashAttention's convention
WINDOW_TABLE = [
    ((-1, -1), 3, [[0, 1, 2], [0, 1, 2], [0, 1, 2]]),  # full attention
    ((0, 0), 3, [[0], [1], [2]]),  # the diagonal only
    ((-1, 0), 3, [[0], [0, 1], [0, 1, 2]]),  # causal
    ((1, 0), 4, [[0], [0, 1], [1, 2], [2, 3]]),  # causal, one key back
    ((0, 1), 3, [[0, 1], [1, 2], [2]]),  # one key ahead
    ((1, -1), 3, [[0, 1, 2], [0, 1, 2], [1, 2]]),  # no limit ahead
    ((-5, 1), 3, [[0, 1], [0, 1, 2], [0, 1, 2]]),  # any negative side is no limit
]


@pytest.mark.parametrize("window,n,keys", WINDOW_TABLE, ids=[str(w) for w, _, _ in WINDOW_TABLE])
def test_window_mask_table(window, n, keys):
    pos = torch.arange(n)
    norm = tuple(x if x >= 0 else -1 for x in window)
    mask = window_mask(pos, pos, norm)
    assert [torch.nonzero(row).flatten().tolist() for row in mask] == keys


def _call(**fields):
    return materialize_vision(VisionProblem(**fields), "cpu")


def test_gqa_is_mha_on_repeated_heads():
    """Query head h attends key/value head h // (H // H_kv): the same output as MHA on k and v whose
    heads are repeated in place (repeat_interleave), and not as on heads tiled (repeat)."""
    call = _call(lengths=(6, 0, 9), H=6, H_kv=2, D=16, seed=5)
    q, k, v = call.args[:3]
    got = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    mha = prepare_flashinfer_cudnn_metadata([0, 6, 6, 15], "cpu", elem_per_token=6 * 16)  # v now has q's width
    rep = flashinfer_cudnn_oracle(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), None, 1, 15,
                                  forward_metadata=mha)
    tiled = flashinfer_cudnn_oracle(q, k.repeat(1, 3, 1), v.repeat(1, 3, 1), None, 1, 15, forward_metadata=mha)
    d = got.defined
    assert torch.allclose(got.value[d], rep.value[d], rtol=1e-12, atol=1e-14)  # float64, another memory layout
    assert not torch.allclose(got.value[d], tiled.value[d])


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_k_tokens_come_from_q_offsets_with_k_strides(kv_heads):
    """k is addressed from the token q's offset names, with k's own strides: a k that is a view into a
    wider buffer (another token stride than q's) gives what its contiguous copy gives."""
    call = _call(lengths=(5, 7), H=4, H_kv=kv_heads, seed=7)
    q, k = call.args[:2]
    wide = torch.full((k.shape[0], 3, *k.shape[1:]), float("nan"), dtype=k.dtype)
    wide[:, 1] = k
    strided = wide[:, 1]
    assert strided.stride(0) != q.stride(0) and strided.stride(0) != k.stride(0)
    want = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    got = flashinfer_cudnn_oracle(q, strided, *call.args[2:], **call.kwargs)
    assert torch.equal(got.value, want.value)


def test_sinks_add_one_term_to_the_denominator():
    """One key per sequence: softmax over one logit is 1, so the output is v * e^s / (e^s + e^sink)."""
    call = _call(lengths=(1, 1), H=2, D=4, seed=11)
    q, k, v = call.args[:3]
    sinks = torch.tensor([0.5, -2.0])
    out = flashinfer_cudnn_oracle(*call.args, **{**call.kwargs, "s_aux": sinks}).value
    scale = 4 ** -0.5
    for t in range(2):
        for h in range(2):
            s = float((q[t, h].double() * k[t, h].double()).sum()) * scale
            w = math.exp(s) / (math.exp(s) + math.exp(float(sinks[h])))
            assert torch.allclose(out[t, h], w * v[t, h].double(), rtol=1e-12, atol=0)


def test_window_and_sinks_change_the_function():
    """Neither argument is a no-op on a problem where it matters (a backend ignoring it would pass)."""
    call = _call(lengths=(9, 6), H=2, seed=13)
    base = flashinfer_cudnn_oracle(*call.args, **call.kwargs).value
    for extra in ({"window_size": (1, 1)}, {"s_aux": torch.zeros(2)}):
        assert not torch.allclose(base, flashinfer_cudnn_oracle(*call.args, **call.kwargs, **extra).value)
    same = flashinfer_cudnn_oracle(*call.args, **call.kwargs, window_size=(-1, -1), s_aux=None, attention_mask=None,
                                   output_ws=None).value
    assert torch.equal(base, same)


@pytest.mark.parametrize("path", VISION_PATHS)
def test_every_path_gives_the_same_output(path):
    """forward_metadata with or without packed indptrs, beside stale or None kwargs, or the kwargs path:
    upstream's resolution reads one set of fields, and the output is the same."""
    p = VisionProblem(lengths=(6, 0, 9), H=3, D=8, layout="v_strided", v_shift=1, o_shift=2, seed=41)
    ref = flashinfer_cudnn_oracle(*materialize_vision(p, "cpu").args, **materialize_vision(p, "cpu").kwargs)
    call = materialize_vision(dataclasses.replace(p, path=path), "cpu")
    got = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    assert torch.equal(got.value, ref.value) and torch.equal(got.defined, ref.defined)


def test_stale_kwargs_beside_forward_metadata_are_not_read():
    """The kwargs next to forward_metadata's packed indptrs disagree with it (and would be malformed if
    read: max_seqlen=1); upstream reads forward_metadata."""
    call = _call(lengths=(6, 5), path="metadata_and_kwargs", seed=17)
    assert call.kwargs["max_seqlen"] == 1
    assert not torch.equal(call.kwargs["sequence_lengths"], call.kwargs["forward_metadata"].sequence_lengths)
    res = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    assert res.defined.any()


def test_gaps_between_sequences_are_uncovered():
    """sequence_lengths (4, 7) with indptr gaps of 2 and 1 tokens: tokens 4-5 and 13 belong to no sequence."""
    call = _call(lengths=(4, 7), gaps=(2, 1), seed=19)
    res = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    covered = res.defined.flatten(1).all(1).tolist()
    assert covered == [True] * 4 + [False] * 2 + [True] * 7 + [False]


def test_rows_of_four_d_inputs():
    """(b, s, H, D) inputs of 3 rows: 14 tokens padded to 15 = 3 x 5; 4-D in, 4-D out, the same values as 3-D."""
    p = VisionProblem(lengths=(9, 5), four_d=True, batch=3, seed=23)
    call = materialize_vision(p, "cpu")
    assert call.args[0].shape[:2] == (3, 5) and call.args[4:6] == (3, 5)
    out = flashinfer_cudnn_attention(*call.args, **call.kwargs)
    flat = materialize_vision(dataclasses.replace(p, four_d=False, extra_tokens=1), "cpu")
    assert out.shape[:2] == (3, 5)
    assert torch.equal(out.flatten(0, 1), flashinfer_cudnn_attention(*flat.args, **flat.kwargs))


def test_release_helper_stand_in():
    """SGLang's helper signature: one element stride for q, v and o, sequence_lengths (B_pad,1,1,1)."""
    md = prepare_flashinfer_cudnn_vision_attention_metadata(torch.tensor([0, 480, 1200]), "cpu", elem_per_token=1536)
    one = [0, 480 * 1536, 1200 * 1536] + [1200 * 1536] * 6
    assert md.packed_indptrs.tolist() == one * 3
    assert md.sequence_lengths.shape == (8, 1, 1, 1)
    ours = prepare_flashinfer_cudnn_metadata([0, 480, 1200], "cpu", elem_per_token=1536, sequence_lengths_4d=True)
    assert torch.equal(md.sequence_lengths, ours.sequence_lengths) and md.flashinfer_max_seqlen == 4096


def test_helper_metadata_uses_the_targets_helper():
    """materialize_vision builds metadata_source='helper' problems with the helper it is given."""
    seen = []

    def helper(cu, device, *, elem_per_token):
        seen.append((cu.tolist(), elem_per_token))
        return prepare_flashinfer_cudnn_vision_attention_metadata(cu, device, elem_per_token=elem_per_token)

    p = VisionProblem(lengths=(5, 3), H=2, D=16, metadata_source="helper")
    call = materialize_vision(p, "cpu", helper)
    assert seen == [([0, 5, 8], 32)]
    assert flashinfer_cudnn_oracle(*call.args, **call.kwargs).defined.any()


@pytest.mark.parametrize("fields,field", [({"metadata_source": "helper", "layout": "v_strided"}, "layout"),
                                          ({"metadata_source": "helper", "H": 4, "H_kv": 2}, "H_kv"),
                                          ({"H": 4, "H_kv": 3}, "H_kv=3"),
                                          ({"path": "both"}, "path='both'"),
                                          ({"sinks": "huge"}, "sinks='huge'"),
                                          ({"gaps": (1,)}, "gaps=(1,)")])
def test_inconsistent_problems_name_the_field(fields, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
        _call(lengths=(5, 3), **fields)


def test_malformed_extras_without_strict():
    """Upstream's flashinfer_cudnn backend ignores window_size, s_aux and attention_mask: with strict
    validation off, a mask is ignored as it ignores it, and a window or sinks it cannot read leave the
    output unspecified (rather than a guess)."""
    call = _call(lengths=(5, 3), seed=29)
    base = flashinfer_cudnn_oracle(*call.args, **call.kwargs, strict=False)
    masked = flashinfer_cudnn_oracle(*call.args, **call.kwargs, strict=False, attention_mask=torch.ones(1, 8, 8))
    assert torch.equal(base.value, masked.value) and torch.equal(base.defined, masked.defined)
    for extra in ({"window_size": (3,)}, {"s_aux": torch.zeros(5)}):
        res = flashinfer_cudnn_oracle(*call.args, **call.kwargs, strict=False, **extra)
        assert not res.defined.any()
