"""Tile loads, the dot operands' rounding and the in-place epilogue shared by the kv_b LoRA kernels (Notes in
:mod:`kernels.lora._kernels`).  Every function here is a ``@triton.jit`` helper that Triton inlines."""

from __future__ import annotations

import triton
import triton.language as tl

from ..interpreter import cast_rounded, round_tf32, rounded_f32, to_f32

__all__ = ["base_block", "base_blocks4", "load_operand", "operand", "out_block", "scaled_delta", "store_sum"]


@triton.jit
def operand(x, DOT_PREC: tl.constexpr):
    """A dot operand.  In TF32 it is rounded to nearest first: the tensor cores truncate fp32 operands
    to TF32, and pre-rounded values pass through that truncation unchanged (docs/kernels_lora.md)."""
    if DOT_PREC == "tf32":
        x = round_tf32(x, False)
    return x


@triton.jit
def load_operand(ptrs, mask, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr, DOT_PREC: tl.constexpr):
    """A matmul operand tile (fp32 when UPCAST; TF32-rounded when the dot runs in TF32)."""
    x = tl.load(ptrs, mask=mask, other=0.0)
    if UPCAST:
        x = to_f32(x, FIX_BF16)
    return operand(x, DOT_PREC)


@triton.jit
def base_block(rows, cols, stride, sel, hi):
    """The base tile of the selected ``rows`` at columns ``cols`` below ``hi``, as stored (the fused
    kernels' current block, or under PREFETCH the next one, loaded an iteration ahead)."""
    return tl.load(rows[:, None] + cols[None, :] * stride, mask=sel[:, None] & (cols < hi)[None, :], other=0.0)


@triton.jit
def base_blocks4(rows, c_lo, offs, BLOCK: tl.constexpr, stride, sel, hi):
    """The four base blocks from column ``c_lo`` on (Note [Whole-row prefetch]); ``offs`` = arange(BLOCK)."""
    return (base_block(rows, c_lo + offs, stride, sel, hi), base_block(rows, c_lo + BLOCK + offs, stride, sel, hi),
            base_block(rows, c_lo + 2 * BLOCK + offs, stride, sel, hi),
            base_block(rows, c_lo + 3 * BLOCK + offs, stride, sel, hi))


@triton.jit
def scaled_delta(mid, w, s, base_ptr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr):
    """The fused sides' scaled second product ``mid @ w * s`` (BT, block) in fp32, rounded to the base's
    dtype (the rounding point of the fused delta, docs/semantics.md#math-and-rounding-points)."""
    d = tl.dot(mid, w, input_precision=DOT_PREC) * s
    return rounded_f32(d, base_ptr.dtype.element_ty, FIX_BF16)


@triton.jit
def out_block(y_rows, cc, sy_c, sel, hi):
    """Pointers and mask of the selected rows' output columns ``cc`` (below ``hi``): (BT, block) each.
    The mask is built first: the order the kernels' sm_90 SASS is checked in (``scripts/sass_against.sh``: another
    order compiles to other code)."""
    m = sel[:, None] & (cc < hi)[None, :]
    return y_rows[:, None] + cc[None, :] * sy_c, m


@triton.jit
def store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16: tl.constexpr):
    """Base ``y_raw`` (as loaded) + the rounded delta ``d``, stored in the base's dtype."""
    y = to_f32(y_raw, FIX_BF16)
    tl.store(y_ptrs, cast_rounded(y + d, base_ptr.dtype.element_ty, FIX_BF16), mask=m)

