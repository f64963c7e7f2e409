"""Triton-interpreter detection and the workarounds our kernels need under it.

Note [Interpreter workarounds]
------------------------------
Without a GPU the kernels run under ``TRITON_INTERPRET=1`` (set before any kernel module is
imported; ``oracle_tests/conftest.py`` does it).  The interpreter (triton 3.9,
docs/semantics.md#where-the-triton-interpreter-is-wrong) stores bfloat16 as raw 16-bit integers, so on bf16 tiles

* ``tl.dot``, ``+ - * /``, comparisons and ``tl.sum`` compute on the bit patterns, and
* the fp32 -> bf16 cast truncates instead of rounding to nearest even.

Our kernels therefore take two constexpr switches computed here, at wrapper level:

* ``UPCAST``: convert every loaded tile to fp32 right after the load (then ``tl.dot`` runs on fp32,
  which the interpreter computes exactly: the same values a bf16/fp16 tensor-core dot with fp32
  accumulation produces, up to summation order);
* ``FIX_BF16``: convert between fp32 and bf16 on the bit patterns only (:func:`cast_rounded`,
  :func:`rounded_f32`, :func:`to_f32`: integer arithmetic, exact under the interpreter), so that
  stores and the rounding points of docs/semantics.md#math-and-rounding-points round to nearest even as on a GPU.  The
  interpreter's own float conversion also mangles subnormals (1e-40 -> 1.01e-39), which this avoids.

Both are False on a GPU, so compiled kernels carry none of it.  Each defect is demonstrated by a
canary in ``oracle_tests/kernels/test_interpreter_canaries.py``; when a canary starts failing, Triton fixed
the defect and the matching switch here can go.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["cast_rounded", "interpreting", "needs_bf16_fix", "round_bf16_rne", "round_tf32", "rounded_f32", "to_f32"]


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (``TRITON_INTERPRET`` set to 1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def needs_bf16_fix(*dtypes: torch.dtype) -> bool:
    """Whether a kernel touching these dtypes needs the bf16 workarounds (interpreter + bf16)."""
    return interpreting() and any(d == torch.bfloat16 for d in dtypes)


@triton.jit
def round_bf16_rne(x):
    """fp32 ``x`` rounded to the nearest bf16 (ties to even), returned as fp32.

    Pure integer work on the bit pattern (exact under the interpreter): add 0x7FFF plus the lowest
    kept bit, clear the low 16 bits.  Subnormals round like normals (the exponent fields of fp32 and
    bf16 agree); overflow past the largest bf16 gives inf, as a real rounding does; NaN is quieted
    (a payload only in the low bits would otherwise turn into inf).
    """
    bits = x.to(tl.int32, bitcast=True)
    lsb = (bits >> 16) & 1
    rounded = tl.where(x != x, bits | 0x400000, (bits + 0x7FFF + lsb) & -65536)
    return rounded.to(tl.float32, bitcast=True)


@triton.jit
def round_tf32(x, TRUNC: tl.constexpr):
    """fp32 ``x`` rounded to TF32 (10 mantissa bits), kept as fp32: to nearest even, or toward zero
    with ``TRUNC`` (what the tensor cores do to raw fp32 operands).

    The Triton twin of :func:`kernel_oracle.reference.tolerance.round_to_tf32`, with the same special
    values (tested bit for bit in ``oracle_tests/kernels/test_interpreter_canaries.py``): +-inf stay, NaN
    becomes the quiet NaN 0x7FC00000 with its sign (so the hardware's truncation cannot turn it into
    inf), a round to nearest past the largest TF32 value gives inf.  Integer work on the magnitude,
    so no int32 add can overflow (exact under the interpreter, no float conversion involved).
    """
    bits = x.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    sign = bits ^ mag
    nan = mag > 0x7F800000
    mag = tl.where(nan, 0, mag)
    if not TRUNC:
        mag = mag + (0xFFF + ((mag >> 13) & 1))
    mag = tl.where(nan, 0x7FC00000, mag & -8192)
    return (mag | sign).to(tl.float32, bitcast=True)


@triton.jit
def cast_rounded(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    """``x.to(dtype)``, rounding to nearest even also under the interpreter (``FIX_BF16``).

    The fixed path never calls the interpreter's float conversion (which truncates, and mangles
    subnormals): it rounds on the bits and bit-casts the high half to bf16.
    """
    if FIX_BF16:
        if dtype == tl.bfloat16:
            hi = (round_bf16_rne(x.to(tl.float32)).to(tl.int32, bitcast=True) >> 16).to(tl.int16)
            return hi.to(tl.bfloat16, bitcast=True)
    return x.to(dtype)


@triton.jit
def rounded_f32(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    """fp32 ``x`` rounded to ``dtype`` (nearest even), returned as fp32: a rounding point inside a kernel."""
    if FIX_BF16:
        if dtype == tl.bfloat16:
            return round_bf16_rne(x)
    return x.to(dtype).to(tl.float32)


@triton.jit
def to_f32(x, FIX_BF16: tl.constexpr):
    """A loaded tile in fp32; bf16 widened on the bits under the interpreter (exact, subnormals too)."""
    if FIX_BF16:
        if x.dtype == tl.bfloat16:
            return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)
