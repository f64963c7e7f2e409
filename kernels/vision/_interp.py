"""Interpreter workarounds used by the vision kernel (SPEC.md "Where it runs").

Under ``TRITON_INTERPRET=1`` (triton 3.9) bfloat16 tensors are raw 16-bit integers: arithmetic and
``tl.dot`` on them compute on bit patterns, and fp32 -> bf16 casts truncate instead of rounding to
nearest even.  The kernel therefore converts every loaded tile to fp32 when :data:`INTERPRETING`
(a constexpr, so the GPU path is untouched) and rounds to the bf16 grid with :func:`round_bf16_rne`
before any fp32 -> bf16 cast, which then only drops zero bits and is exact.

``kernels/interpreter.py`` (owned by another engineer) did not exist when this was written; when it
does, these helpers can be replaced by its equivalents.  oracle_tests/test_interpreter_canaries_vision.py
shows on the CPU that each defect worked around here is real.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

__all__ = ["INTERPRETING", "interpreting", "round_bf16_rne"]


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter.

    triton.jit decides at decoration time from the environment, so this must agree with the value
    the kernel modules saw when they were imported (they read it once, into INTERPRETING).
    """
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


INTERPRETING = interpreting()


@triton.jit
def round_bf16_rne(x):
    """Round fp32 ``x`` to the nearest bf16 value (ties to even), returned as fp32.

    Adds half an ulp of bf16 (0x7FFF, plus one when the kept lsb is odd) to the bit pattern and
    clears the 16 low bits; overflow correctly carries into inf.  NaN is passed through unchanged
    (the bit trick could turn a NaN with low-only payload into inf).
    """
    bits = x.to(tl.uint32, bitcast=True)
    lsb = (bits >> 16) & 1
    rounded = (bits + 0x7FFF + lsb) & 0xFFFF0000
    y = rounded.to(tl.float32, bitcast=True)
    return tl.where(x != x, x, y)
