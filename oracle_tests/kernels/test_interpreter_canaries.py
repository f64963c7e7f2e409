"""Canaries: the Triton-interpreter defects that ``kernels.interpreter`` works around are real.

Note [Canaries]
---------------
Each canary runs a tiny kernel under the interpreter and asserts the WRONG result that the defect
produces (docs/semantics.md#where-the-triton-interpreter-is-wrong; upstream triton-lang/triton #11584, #10945, #4972).  When a
canary fails, Triton fixed that defect: remove the matching workaround (``UPCAST`` /
``FIX_BF16`` switches, :mod:`kernels.interpreter`) and the canary.  On a GPU the canaries are
skipped (the defect is the interpreter's).

The workaround tests below them run everywhere: :func:`kernels.interpreter.cast_rounded` must round
fp32 -> bf16 exactly as torch does (nearest even), ties, subnormals, NaN and overflow included, and
:func:`kernels.interpreter.to_f32` must widen bf16 exactly.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernel_oracle.kernels.interpreter import (cast_rounded, interpreting, needs_bf16_fix, round_tf32, rounded_f32,
                                                to_f32)

from oracle_tests.conftest import DEVICE

canary = pytest.mark.skipif(not interpreting(),
                            reason="interpreter canary: compiled kernels on a GPU do not have this defect")


@triton.jit
def _add_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.load(a_ptr + i) + tl.load(b_ptr + i))


@triton.jit
def _cast_kernel(x_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.load(x_ptr + i).to(tl.bfloat16))


@triton.jit
def _dot_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    idx = i[:, None] * N + i[None, :]
    tl.store(o_ptr + idx, tl.dot(tl.load(a_ptr + idx), tl.load(b_ptr + idx)))


@triton.jit
def _cast_rounded_kernel(x_ptr, o_ptr, f_ptr, w_ptr, N: tl.constexpr, FIX_BF16: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    tl.store(o_ptr + i, cast_rounded(x, tl.bfloat16, FIX_BF16))
    tl.store(f_ptr + i, rounded_f32(x, tl.bfloat16, FIX_BF16))
    tl.store(w_ptr + i, to_f32(cast_rounded(x, tl.bfloat16, FIX_BF16), FIX_BF16))


@pytest.mark.interpreter
@canary
def test_canary_bf16_add_computes_on_bit_patterns():
    a = torch.full((16,), 1.5, dtype=torch.bfloat16)
    b = torch.full((16,), 2.25, dtype=torch.bfloat16)
    out = torch.empty(16, dtype=torch.bfloat16)
    _add_kernel[(1,)](a, b, out, N=16)
    assert not torch.equal(out, a + b), (
        "bf16 + bf16 is right under the interpreter now: drop the UPCAST workaround for arithmetic")


@pytest.mark.interpreter
@canary
def test_canary_bf16_dot_computes_on_bit_patterns():
    a = torch.full((16, 16), 0.5, dtype=torch.bfloat16)
    b = torch.full((16, 16), 2.0, dtype=torch.bfloat16)
    out = torch.empty(16, 16, dtype=torch.float32)
    _dot_kernel[(1,)](a, b, out, N=16)
    assert not torch.equal(out, a.float() @ b.float()), (
        "tl.dot on bf16 is right under the interpreter now: drop the UPCAST workaround for tl.dot")


@pytest.mark.interpreter
@canary
def test_canary_fp32_to_bf16_cast_truncates():
    # 1 + 2^-8 + 2^-12 lies above the midpoint between bf16 neighbours 1 and 1 + 2^-7
    x = torch.full((16,), 1.0 + 2 ** -8 + 2 ** -12, dtype=torch.float32)
    out = torch.empty(16, dtype=torch.bfloat16)
    _cast_kernel[(1,)](x, out, N=16)
    assert torch.equal(out.float(), torch.ones(16)), "the cast no longer truncates: see the next assert"
    assert not torch.equal(out, x.to(torch.bfloat16)), (
        "fp32 -> bf16 rounds to nearest even under the interpreter now: drop FIX_BF16 / round_bf16_rne")


@pytest.mark.interpreter
@canary
def test_canary_fp32_to_bf16_cast_mangles_subnormals():
    x = torch.full((16,), 1e-40, dtype=torch.float32)  # an fp32 subnormal, representable in bf16 up to rounding
    out = torch.empty(16, dtype=torch.bfloat16)
    _cast_kernel[(1,)](x, out, N=16)
    assert not torch.equal(out, x.to(torch.bfloat16)), (
        "fp32 -> bf16 casts of subnormals are right under the interpreter now (see FIX_BF16)")


def _rounding_inputs() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1234)
    rnd = torch.randn(4096, generator=gen) * 10.0 ** torch.randint(-6, 6, (4096,), generator=gen).float()
    one = torch.tensor(1.0)
    ties = torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8), 3.0 * 2 ** -9 + 2 ** -17])
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 3.3895e38, -3.3895e38,
                            1e-40, -1e-40, 2 ** -126])
    nan_low_payload = torch.tensor([0x7F800001], dtype=torch.int32).view(torch.float32)
    above = torch.nextafter(ties, ties * 2)
    below = torch.nextafter(ties, ties * 0)
    return torch.cat([rnd, ties, above, below, special, nan_low_payload, one.reshape(1)]).contiguous()


@pytest.mark.interpreter
def test_cast_rounded_matches_torch_rne():
    """The workaround (FIX_BF16 on the interpreter; a plain cast on a GPU) rounds like torch."""
    x = _rounding_inputs().to(DEVICE)
    n = triton.next_power_of_2(x.numel())
    xp = torch.cat([x, torch.ones(n - x.numel(), device=DEVICE)])
    outp = torch.empty(n, dtype=torch.bfloat16, device=DEVICE)
    as_f32 = torch.empty(n, dtype=torch.float32, device=DEVICE)
    widened = torch.empty(n, dtype=torch.float32, device=DEVICE)
    _cast_rounded_kernel[(1,)](xp, outp, as_f32, widened, N=n, FIX_BF16=needs_bf16_fix(torch.bfloat16))
    want = x.to(torch.bfloat16)
    for what, got, expected in (("cast_rounded", outp[: x.numel()], want),
                                ("rounded_f32", as_f32[: x.numel()], want.float()),
                                ("to_f32(cast_rounded)", widened[: x.numel()], want.float())):
        bits = torch.int16 if got.dtype == torch.bfloat16 else torch.int32
        same = (got.view(bits) == expected.view(bits)) | (got.isnan() & expected.isnan())
        bad = torch.nonzero(~same).flatten()
        assert bad.numel() == 0, (
            f"{what}: {bad.numel()} of {x.numel()} values differ from torch's rounding; first x={x[bad[0]].item()!r}: "
            f"got {got[bad[0]].item()!r}, expected {expected[bad[0]].item()!r}")


# ---- TF32 rounding: one function, in torch (the oracle) and in Triton (the kernels) -------------

@triton.jit
def _round_tf32_kernel(x_ptr, rne_ptr, trunc_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    tl.store(rne_ptr + i, round_tf32(x, False))
    tl.store(trunc_ptr + i, round_tf32(x, True))


def _tf32_inputs() -> torch.Tensor:
    """Random values over many magnitudes, ties and near-ties of the 13 dropped bits, and special values."""
    gen = torch.Generator().manual_seed(4321)
    rnd = torch.randn(4096, generator=gen) * 10.0 ** torch.randint(-30, 30, (4096,), generator=gen).float()
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (2048,), generator=gen, dtype=torch.int64).to(torch.int32)
    ties = torch.tensor([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, -(1.0 + 2 ** -11), 2 ** -126 + 2 ** -138])
    as_bits = torch.tensor([
        0x7F7FFFFF, -0x00800001,  # +-largest fp32: rounds past the largest TF32 value -> +-inf
        0x7F7FE000, 0x7F7FEFFF, 0x7F7FF000,  # largest TF32; just below and at the overflow midpoint
        0x7F800001, 0x7FFFFFFF, -0x00000001, -0x007FFFFF,  # NaNs, payload low / high, both signs
        0x00000001, 0x00001000, 0x00001FFF, 0x007FFFFF, -0x7FFFFFFF,  # subnormals, incl. carry to normal
    ], dtype=torch.int64).to(torch.int32).view(torch.float32)
    special = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, float("nan"), -float("nan")])
    return torch.cat([rnd, bits.view(torch.float32), ties, torch.nextafter(ties, ties * 2),
                      torch.nextafter(ties, ties * 0), as_bits, special]).contiguous()


@pytest.mark.interpreter
def test_round_tf32_matches_the_oracle_bit_for_bit():
    """kernels.interpreter.round_tf32 (Triton) == reference.tolerance.round_to_tf32 (torch), both modes,
    every bit (NaN patterns included): the kernels and the oracle round with one function."""
    from kernel_oracle.reference.tolerance import round_to_tf32

    x = _tf32_inputs()
    n = triton.next_power_of_2(x.numel())
    xp = torch.cat([x, torch.ones(n - x.numel())]).to(DEVICE)
    rne = torch.empty(n, dtype=torch.float32, device=DEVICE)
    trunc = torch.empty(n, dtype=torch.float32, device=DEVICE)
    _round_tf32_kernel[(1,)](xp, rne, trunc, N=n)
    for mode, got in (("rne", rne), ("trunc", trunc)):
        want = round_to_tf32(x, mode).view(torch.int32)
        got = got[: x.numel()].cpu().view(torch.int32)
        bad = torch.nonzero(got != want).flatten()
        assert bad.numel() == 0, (
            f"round_tf32 {mode}: {bad.numel()} of {x.numel()} values differ from round_to_tf32; first x bits="
            f"{int(x.view(torch.int32)[bad[0]]):#010x}: got {int(got[bad[0]]):#010x}, want {int(want[bad[0]]):#010x}")
