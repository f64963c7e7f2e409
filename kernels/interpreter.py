"""Triton-interpreter detection and the workarounds our kernels need under it.

Note [Interpreter workarounds]
------------------------------
Without a GPU the kernels run under ``TRITON_INTERPRET=1`` (set before any kernel module is
imported; ``oracle_tests/conftest.py`` does it).  The interpreter (triton 3.9, SPEC.md "Where it
runs") stores bfloat16 as raw 16-bit integers, so on bf16 tiles

* ``tl.dot``, ``+ - * /``, comparisons and ``tl.sum`` compute on the bit patterns, and
* the fp32 -> bf16 cast truncates instead of rounding to nearest even.

Our kernels therefore take two constexpr switches computed here, at wrapper level:

* ``UPCAST``: convert every loaded tile to fp32 right after the load (then ``tl.dot`` runs on fp32,
  which the interpreter computes exactly: the same values a bf16/fp16 tensor-core dot with fp32
  accumulation produces, up to summation order);
* ``FIX_BF16``: round fp32 -> bf16 with :func:`round_bf16_rne` (integer arithmetic on the fp32 bit
  pattern, exact under the interpreter) before every cast to bf16, so that stores and the rounding
  points of SPEC.md part 1 match GPU semantics.

Both are False on a GPU, so compiled kernels carry none of it.  Each defect is demonstrated by a
canary in ``oracle_tests/test_interpreter_canaries.py``; when a canary starts failing, Triton fixed
the defect and the matching switch here can go.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["interpreting", "needs_bf16_fix", "round_bf16_rne", "cast_rounded"]


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (``TRITON_INTERPRET`` set to 1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def needs_bf16_fix(*dtypes: torch.dtype) -> bool:
    """Whether a kernel touching these dtypes needs the bf16 workarounds (interpreter + bf16)."""
    return interpreting() and any(d == torch.bfloat16 for d in dtypes)


@triton.jit
def round_bf16_rne(x):
    """fp32 ``x`` rounded to the nearest bf16 (ties to even), returned as fp32.

    Works on the bit pattern: add 0x7FFF plus the lowest kept bit, clear the low 16 bits.  NaN stays
    NaN (a NaN whose payload sits in the low bits would otherwise become inf); overflow past the
    largest bf16 becomes inf, as a real rounding does.
    """
    bits = x.to(tl.int32, bitcast=True)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) & -65536).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, rounded)


@triton.jit
def cast_rounded(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    """``x.to(dtype)`` with round-to-nearest-even also under the interpreter (``FIX_BF16``)."""
    if FIX_BF16:
        if dtype == tl.bfloat16:
            x = round_bf16_rne(x.to(tl.float32))
    return x.to(dtype)
