"""The CPU engine under SGLang's vision wrapper (Note [The CPU prefill engine]): each documented rule
of FlashInfer's ``cudnn_batch_prefill_with_kv_cache`` against a hand computation, and the refusals.

The hand computation is plain per-sequence softmax attention in float64 with explicit token slices,
written here, not the engine's code."""

from __future__ import annotations

import math

import pytest
import torch

from kernel_oracle.fuzz.targets.cudnn_prefill_torch import cudnn_batch_prefill_with_kv_cache as prefill
from kernel_oracle.fuzz.targets.sglang_vision import rearrange


def _by_hand(q, k, v, scale):
    """(n, Hq, D), (m, Hkv, D), (m, Hkv, Dv) -> (n, Hq, Dv) float64, query head h on kv head h // group."""
    n, Hq, _ = q.shape
    group = Hq // k.shape[1]
    out = torch.empty(n, Hq, v.shape[2], dtype=torch.float64)
    for h in range(Hq):
        s = q[:, h].double() @ k[:, h // group].double().T * scale
        p = torch.exp(s - s.max(dim=1, keepdim=True).values)
        out[:, h] = (p / p.sum(dim=1, keepdim=True)) @ v[:, h // group].double()
    return out


def _call(q, k, v, lens, off_q, off_k, off_v, off_o, *, max_s=64, scale=0.5, **kw):
    col = lambda xs: torch.tensor(xs, dtype=torch.int32).view(-1, 1, 1, 1)  # noqa: E731 - SGLang's views
    return prefill(q, k, v, scale, None, max_token_per_sequence=max_s, max_sequence_kv=max_s,
                   actual_seq_lens_q=col(lens), actual_seq_lens_kv=col(lens), causal=False,
                   return_lse=kw.pop("return_lse", True), batch_offsets_q=col(off_q), batch_offsets_k=col(off_k),
                   batch_offsets_v=col(off_v), batch_offsets_o=col(off_o), **kw)


def _randn(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sequences_at_their_own_element_offsets(dtype):
    H, D, Dv = 2, 8, 4
    q, k, v = _randn(12, H, D, dtype=dtype, seed=1), _randn(12, H, D, dtype=dtype, seed=2), \
        _randn(12, H, Dv, dtype=dtype, seed=3)
    out, lse = _call(q, k, v, [3, 5], [0, 3 * H * D, 8 * H * D], [0, 3 * H * D, 8 * H * D],
                     [0, 3 * H * Dv, 8 * H * Dv], [0, 3 * H * Dv, 8 * H * Dv])
    for s, e in ((0, 3), (3, 8)):
        torch.testing.assert_close(out[s:e].double(), _by_hand(q[s:e], k[s:e], v[s:e], 0.5), atol=1e-2, rtol=1e-2)
    assert out.shape == (12, H, Dv) and out.dtype == dtype
    s = q[3:8, 1].double() @ k[3:8, 1].double().T * 0.5
    torch.testing.assert_close(lse[1, :5, 1].double(), torch.logsumexp(s, dim=1), atol=1e-3, rtol=1e-3)
    assert lse.shape == (2, 64, H) and torch.isnan(lse[0, 3:]).all()  # rows past a sequence: none


def test_grouped_heads_read_their_kv_head():
    q, k, v = _randn(6, 4, 8, seed=4), _randn(6, 2, 8, seed=5), _randn(6, 2, 8, seed=6)
    out, _ = _call(q, k, v, [6], [0, 6 * 32], [0, 6 * 16], [0, 6 * 16], [0, 6 * 32])
    torch.testing.assert_close(out.double(), _by_hand(q, k, v, 0.5), atol=1e-2, rtol=1e-2)


def test_an_offset_is_applied_to_its_own_tensor_whatever_its_width():
    """GQA with k offsets counted in q's elements: sequence 1 reads k's tokens 2*start.., as on the GPU."""
    H, Hkv, D = 4, 2, 8
    q, k, v = _randn(12, H, D, seed=7), _randn(12, Hkv, D, seed=8), _randn(12, Hkv, D, seed=9)
    qo, ko = [0, 2 * H * D, 4 * H * D], [0, 2 * Hkv * D, 4 * Hkv * D]
    out, _ = _call(q, k, v, [2, 2], qo, qo, ko, qo)  # k given q's offsets (as SGLang's wrapper does)
    torch.testing.assert_close(out[2:4].double(), _by_hand(q[2:4], k[4:6], v[2:4], 0.5), atol=1e-2, rtol=1e-2)
    right, _ = _call(q, k, v, [2, 2], qo, ko, ko, qo)
    torch.testing.assert_close(right[2:4].double(), _by_hand(q[2:4], k[2:4], v[2:4], 0.5), atol=1e-2, rtol=1e-2)


def test_a_strided_view_is_read_with_its_own_strides():
    H, D = 2, 4
    qkv = _randn(10, 3, H, D, seed=10)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]  # token stride 3*H*D for all three
    w = 3 * H * D
    qkv_offsets, o_offsets = [0, 4 * w, 10 * w], [0, 4 * H * D, 10 * H * D]
    out, _ = _call(q, k, v, [4, 6], qkv_offsets, qkv_offsets, qkv_offsets, o_offsets, return_lse=False)
    for s, e in ((0, 4), (4, 10)):
        torch.testing.assert_close(out[s:e].double(), _by_hand(q[s:e], k[s:e], v[s:e], 0.5), atol=1e-2, rtol=1e-2)


def test_rows_past_max_token_per_sequence_are_not_computed():
    q, k, v = (_randn(6, 1, 4, seed=s) for s in (11, 12, 13))
    out = torch.full((6, 1, 4), float("nan"), dtype=torch.float16)
    _call(q, k, v, [6], [0, 24], [0, 24], [0, 24], [0, 24], max_s=4, out=out, return_lse=False)
    torch.testing.assert_close(out[:4].double(), _by_hand(q[:4], k[:4], v[:4], 0.5), atol=1e-2, rtol=1e-2)
    assert torch.isnan(out[4:]).all()


def test_scale_zero_is_uniform_attention_and_zero_lengths_write_nothing():
    q, k, v = (_randn(5, 1, 4, seed=s) for s in (14, 15, 16))
    out = torch.full((5, 1, 4), float("nan"), dtype=torch.float16)
    _call(q, k, v, [3, 0, 2], [0, 12, 12, 20], [0, 12, 12, 20], [0, 12, 12, 20], [0, 12, 12, 20], scale=0.0,
          out=out, return_lse=False)
    torch.testing.assert_close(out[:3].double(), v[:3].double().mean(0, keepdim=True).expand(3, 1, 4),
                               atol=1e-3, rtol=1e-3)
    assert not torch.isnan(out).any()


def test_out_of_bounds_is_an_error_not_garbage():
    q, k, v = (_randn(4, 1, 4, seed=s) for s in (17, 18, 19))
    with pytest.raises(IndexError) as info:
        _call(q, k, v, [3], [0, 12], [8, 20], [0, 12], [0, 12])
    assert str(info.value) == ("cudnn_batch_prefill_with_kv_cache (CPU engine): sequence 0 of k_cache spans elements "
                               "[8, 20) of a storage of 16 elements (batch_offsets_k[0] = 8): an out-of-bounds access, "
                               "on a GPU a read of other memory or a fault")
    _call(q, k, v, [3], [0, 12], [4, 16], [0, 12], [0, 12])  # the last three tokens: inside the storage


@pytest.mark.parametrize("change, error, match", [
    (dict(dtype=torch.float32), TypeError, "cuDNN SDPA takes torch.float16 and torch.bfloat16"),
    (dict(causal=True), NotImplementedError, "causal=True"),
    (dict(lens_shape=(2,)), ValueError, r"documents \(batch_size, 1, 1, 1\)"),
    (dict(no_offsets=True), ValueError, "batch_offsets_q and batch_offsets_o are required when batch_size > 1"),
    (dict(kv_heads=3), ValueError, "Hq a multiple of Hkv"),
])
def test_what_the_engine_refuses(change, error, match):
    dtype = change.get("dtype", torch.float16)
    q, v = _randn(4, 4, 4, dtype=dtype), _randn(4, change.get("kv_heads", 2), 4, dtype=dtype)
    lens = torch.tensor([2, 2], dtype=torch.int32).view(change.get("lens_shape", (2, 1, 1, 1)))
    offsets = None if change.get("no_offsets") else torch.tensor([0, 32, 64], dtype=torch.int32)
    with pytest.raises(error, match=match):
        prefill(q, v, v, 1.0, None, max_token_per_sequence=8, max_sequence_kv=8, actual_seq_lens_q=lens,
                actual_seq_lens_kv=lens, causal=change.get("causal", False), return_lse=False,
                batch_offsets_q=offsets, batch_offsets_o=offsets)


def test_an_empty_batch_returns_an_empty_output():
    q = torch.empty(0, 2, 4, dtype=torch.float16)
    lens = torch.zeros(8, 1, 1, 1, dtype=torch.int32)
    zeros = torch.zeros(9, dtype=torch.int32)
    out, lse = prefill(q, q, q, 1.0, None, max_token_per_sequence=4096, max_sequence_kv=4096, actual_seq_lens_q=lens,
                       actual_seq_lens_kv=lens, causal=False, return_lse=True, batch_offsets_q=zeros,
                       batch_offsets_k=zeros, batch_offsets_v=zeros, batch_offsets_o=zeros)
    assert out.shape == (0, 2, 4) and lse.shape == (8, 4096, 2)
    assert math.isnan(float(lse[0, 0, 0]))


# ---- the rearrange stand-in: einops' meaning of the wrapper's two patterns -----------------------------------

def test_rearrange_merges_and_splits_as_einops_does():
    x = torch.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    flat = rearrange(x, "b s ... -> (b s) ...")
    assert flat.shape == (6, 4, 5) and torch.equal(flat[4], x[1, 1])
    back = rearrange(flat, "(b s) h d -> b s h d", b=2)
    assert torch.equal(back, x)
    with pytest.raises(ValueError, match="first dim divides by b"):
        rearrange(flat, "(b s) h d -> b s h d", b=4)
    with pytest.raises(ValueError, match="has no stand-in"):
        rearrange(x, "b s h d -> b h s d")
