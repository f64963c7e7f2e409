"""Canaries: each interpreter defect that ``kernels.vision`` works around is real.

A tiny kernel per defect shows the defect itself (and, where there is one, that the workaround
fixes it).  When a canary fails, Triton fixed the defect: the matching workaround in
``kernels/vision/_kernel.py`` (and ``kernels/interpreter.py``) can go.  On a GPU there is no
interpreter, so these are skipped there.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import triton
import triton.language as tl

from kernel_oracle.kernels.interpreter import interpreting, round_bf16_rne

pytestmark = pytest.mark.skipif(not interpreting(), reason="interpreter canaries: kernels are compiled, not interpreted, "
                                "here (TRITON_INTERPRET is not 1)")


@triton.jit
def _cast_store(X, Y, RNE: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    if RNE:
        x = round_bf16_rne(x)
    tl.store(Y + offs, x.to(tl.bfloat16))


def test_fp32_to_bf16_cast_truncates():
    """The output store and the probabilities before PV need round-to-nearest-even."""
    # 1 + 3/256 lies 3/4 of the way from bf16 1.0078125 to 1.015625: RNE rounds up, truncation down
    x = torch.full((16,), 1.0 + 3 / 256, dtype=torch.float32)
    y = torch.empty(16, dtype=torch.bfloat16)
    _cast_store[(1,)](x, y, RNE=False, N=16)
    assert float(y[0]) == 1.0078125 != float(x.to(torch.bfloat16)[0]), "fp32->bf16 casts round now: drop the RNE fix"
    _cast_store[(1,)](x, y, RNE=True, N=16)
    assert torch.equal(y, x.to(torch.bfloat16))


@triton.jit
def _bf16_dot(A, B, C, UPCAST: tl.constexpr):
    r = tl.arange(0, 16)
    a = tl.load(A + r[:, None] * 16 + r[None, :])
    b = tl.load(B + r[:, None] * 16 + r[None, :])
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    tl.store(C + r[:, None] * 16 + r[None, :], tl.dot(a, b))


def test_bf16_dot_computes_on_bit_patterns():
    """QK^T and PV on bf16 tiles are garbage unless the tiles are upcast after loading."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(16, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    want = a.float() @ b.float()
    c = torch.empty(16, 16, dtype=torch.float32)
    _bf16_dot[(1,)](a, b, c, UPCAST=False)
    assert not torch.allclose(c, want, rtol=1e-2, atol=1e-2), "bf16 tl.dot is right now: the fp32 upcast can go"
    _bf16_dot[(1,)](a, b, c, UPCAST=True)
    torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-5)


@triton.jit
def _sub_running_max(X, Y, GUARD: tl.constexpr):
    offs = tl.arange(0, 16)
    m = tl.load(X + offs)  # a running max that is still -inf (no valid key yet)
    if GUARD:
        safe = tl.where(m == float("-inf"), 0.0, m)
    else:
        safe = m
    tl.store(Y + offs, tl.math.exp2(m - safe))


def test_minus_inf_minus_minus_inf_warns():
    """The online softmax guards its running max: -inf - -inf warns (an error under -W error)."""
    x = torch.full((16,), float("-inf"))
    y = torch.empty(16)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        _sub_running_max[(1,)](x, y, GUARD=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _sub_running_max[(1,)](x, y, GUARD=True)
    assert torch.equal(y, torch.zeros(16))


def test_autotune_with_several_configs_fails():
    """The interpreter path uses one fixed config instead of @triton.autotune."""

    @triton.autotune(configs=[triton.Config({"N": 16}), triton.Config({"N": 32})], key=[])
    @triton.jit
    def _copy(X, Y, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(Y + offs, tl.load(X + offs))

    x = torch.randn(32)
    with pytest.raises(RuntimeError, match="0 active drivers"):
        _copy[(1,)](x, torch.empty(32))
