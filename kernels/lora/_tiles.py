"""Tile loads, the dot operands' rounding and step B's in-place output block, shared by the kv_b LoRA kernels (Notes
in :mod:`kernels.lora._kernels`).  Every function here is a ``@triton.jit`` helper that Triton inlines."""

from __future__ import annotations

import triton
import triton.language as tl

from ..interpreter import cast_rounded, round_tf32, rounded_f32, to_f32

__all__ = ["base_block", "base_blocks4", "load_operand", "operand", "out_block", "step_b_tile", "store_sum",
           "weight_block"]


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



@triton.jit
def weight_block(w_base, offs_r, cols, s_r, s_col, rank, hi, COLS_FIRST: tl.constexpr, UPCAST: tl.constexpr,
                 FIX_BF16: tl.constexpr, DOT_PREC: tl.constexpr):
    """Columns ``cols`` (below ``hi``) of a slot's step-B weight as the product takes it, (BLOCK_R, block), rows
    past ``rank`` zero: ``A`` (``COLS_FIRST`` False: rank rows ``s_r`` apart, columns ``s_col``) or ``B`` read
    transposed (its columns are rows of ``B_buf``: True; the offsets are summed in that order)."""
    if COLS_FIRST:
        ptrs = w_base + cols[None, :] * s_col + offs_r[:, None] * s_r
    else:
        ptrs = w_base + offs_r[:, None] * s_r + cols[None, :] * s_col
    return load_operand(ptrs, (offs_r < rank)[:, None] & (cols < hi)[None, :], UPCAST, FIX_BF16, DOT_PREC)


@triton.jit
def step_b_tile(mid, wt, s, y_raw, y_rows, cols, sy_c, sel, hi, next_cols, next_hi, base_ptr, DELTA_TY: tl.constexpr,
                DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr, BASE: tl.constexpr):
    """One step-B output block, in place: ``base[rows, cols] += round(s * (mid @ wt))``; returns the base block
    loaded ahead (``BASE == "ahead"``), else ``y_raw``.

    ``mid`` (BT, BLOCK_R) the rows' step-B input (a split step's loaded tile, a fused side's step-A result),
    ``wt`` (BLOCK_R, block) the weight block, ``s`` the slot's scaling; the scaled product is rounded to
    ``DELTA_TY`` (the activations' dtype for a split step, the base's for a fused side:
    docs/semantics.md#math-and-rounding-points), added to the base in fp32 and stored in the base's dtype.
    The base block: ``BASE`` ``"load"`` loads it here; ``"given"`` takes ``y_raw`` (loaded before);
    ``"ahead"`` takes ``y_raw`` and loads the next block (``next_cols`` below ``next_hi``) before the store."""
    d = tl.dot(mid, wt, input_precision=DOT_PREC) * s
    d = rounded_f32(d, DELTA_TY, FIX_BF16)
    y_ptrs, m = out_block(y_rows, cols, sy_c, sel, hi)
    if BASE == "load":
        y_raw = tl.load(y_ptrs, mask=m, other=0.0)
    y_next = y_raw
    if BASE == "ahead":
        y_next = base_block(y_rows, next_cols, sy_c, sel, next_hi)
    store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)
    return y_next
