"""The split kv_b LoRA steps: step A into a fresh (S,H,R) output, step B in place into base_output (docs/semantics.md#kv_b-lora-steps;
the Notes in :mod:`kernels.lora._kernels`).  Step B's output block is :func:`._tiles.step_b_tile`, the fused
sides' too; each kernel loads its own weight tile (Note [Helpers and the SASS] in :mod:`._fused`)."""

from __future__ import annotations

import triton.language as tl

from ..interpreter import cast_rounded
from ._families import COUNTS, two_families
from ._route import route
from ._tiles import load_operand, step_b_tile

__all__ = ["step_a_q_kernel", "step_a_v_kernel", "step_b_q_kernel", "step_b_v_kernel"]

_DNS_STEP_A_Q = COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'so_t', 'so_h',
                           'QK', 'sx_d', 'sb_r', 'so_r')


@two_families(_DNS_STEP_A_Q)
def step_a_q_kernel(x_ptr, b_ptr, out_ptr, seg_indptr, weight_indices, lora_ranks, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, FULL_K, R,
                    sx_t, sx_h, sx_d, sb_l, sb_row, sb_r, so_t, so_h, so_r,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """out[t,h,:r] = q[t,h,:QK] @ B[w, h*FULL_K : h*FULL_K+QK, :r]; grid (row tiles, H)."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    so_t = so_t * ALIGN
    so_h = so_h * ALIGN
    QK = QK * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_d = 1
        sb_r = 1
        so_r = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    h = tl.program_id(1)
    lane = tl.arange(0, BT)
    sel, w, phys, has_rows = route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    o_rows = out_ptr + phys * so_t + h * so_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, QK, BLOCK_K):
            kk = k0 + offs_k
            xt = load_operand(x_rows[:, None] + kk[None, :] * sx_d, sel[:, None] & (kk < QK)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = load_operand(w_base + kk[:, None] * sb_row + offs_r[None, :] * sb_r,
                     (kk < QK)[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        tl.store(o_rows[:, None] + offs_r[None, :] * so_r,
                 cast_rounded(acc, out_ptr.dtype.element_ty, FIX_BF16),
                 mask=sel[:, None] & (offs_r < R)[None, :])


_DNS_STEP_B_Q = COUNTS + ('H', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'sy_t', 'sy_h',
                           'C', 'sx_r', 'sa_c', 'sy_c')


@two_families(_DNS_STEP_B_Q)
def step_b_q_kernel(x_ptr, a_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, H, C, R,
                    sx_t, sx_h, sx_r, sa_l, sa_r, sa_c, sy_t, sy_h, sy_c,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr, BH: tl.constexpr,
                    BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """base[t,h,:] += round_x(s * (x[t,h,:r] @ A[w,:r,:])); grid (row tiles, H/BH, C/BLOCK_C).

    A is shared by all heads, so a tile holds BT tokens x BH heads."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_r = 1
        sa_c = 1
        sy_c = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT * BH)
    hh = tl.program_id(1) * BH + lane % BH
    sel, w, phys, has_rows = route(pid, lane // BH, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    sel = sel & (hh < H)
    offs_r = tl.arange(0, BLOCK_R)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    x_rows = x_ptr + phys * sx_t + hh * sx_h
    y_rows = base_ptr + phys * sy_t + hh * sy_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        s = tl.load(scalings + w)
        xt = load_operand(x_rows[:, None] + offs_r[None, :] * sx_r, sel[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        at = load_operand(a_ptr + w.to(tl.int64) * sa_l + offs_r[:, None] * sa_r + offs_c[None, :] * sa_c,
                          (offs_r < rank)[:, None] & (offs_c < C)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        # split: the delta rounded to the activations' dtype
        step_b_tile(xt, at, s, None, y_rows, offs_c, sy_c, sel, C, offs_c, C, base_ptr, x_ptr.dtype.element_ty, DOT_PREC,
                    FIX_BF16, "load")


_DNS_STEP_A_V = COUNTS + ('H', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'so_t', 'so_h',
                           'C', 'sx_c', 'sa_c', 'so_r')


@two_families(_DNS_STEP_A_V)
def step_a_v_kernel(x_ptr, a_ptr, out_ptr, seg_indptr, weight_indices, lora_ranks, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, H, C, R,
                    sx_t, sx_h, sx_c, sa_l, sa_r, sa_c, so_t, so_h, so_r,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr, BH: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """out[t,h,:r] = x[t,h,:C] @ A[w,:r,:].T; grid (row tiles, H/BH); a tile is BT tokens x BH heads."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    so_t = so_t * ALIGN
    so_h = so_h * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_c = 1
        sa_c = 1
        so_r = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT * BH)
    hh = tl.program_id(1) * BH + lane % BH
    sel, w, phys, has_rows = route(pid, lane // BH, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    sel = sel & (hh < H)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    x_rows = x_ptr + phys * sx_t + hh * sx_h
    o_rows = out_ptr + phys * so_t + hh * so_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        w_base = a_ptr + w.to(tl.int64) * sa_l
        acc = tl.zeros((BT * BH, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, C, BLOCK_K):
            kk = k0 + offs_k
            xt = load_operand(x_rows[:, None] + kk[None, :] * sx_c, sel[:, None] & (kk < C)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            wt = load_operand(w_base + kk[:, None] * sa_c + offs_r[None, :] * sa_r,
                     (kk < C)[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
        tl.store(o_rows[:, None] + offs_r[None, :] * so_r,
                 cast_rounded(acc, out_ptr.dtype.element_ty, FIX_BF16),
                 mask=sel[:, None] & (offs_r < R)[None, :])


_DNS_STEP_B_V = COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'sy_t', 'sy_h',
                           'QK', 'VD', 'sx_r', 'sb_r', 'sy_v')


@two_families(_DNS_STEP_B_V)
def step_b_v_kernel(x_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                    n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, VD, FULL_K, R,
                    sx_t, sx_h, sx_r, sb_l, sb_row, sb_r, sy_t, sy_h, sy_v,
                    TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                    FLAT: tl.constexpr, NSLOT: tl.constexpr,
                    BT: tl.constexpr,
                    BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                    ALIGN: tl.constexpr):
    """base[t,h,:] += round_x(s * (x[t,h,:r] @ B[w, h*FULL_K+QK : (h+1)*FULL_K, :r].T));
    grid (row tiles, H, VD/BLOCK_V)."""
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    VD = VD * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_r = 1
        sb_r = 1
        sy_v = 1
    pid = tl.program_id(0)
    cb = tl.program_id(2) % n_cblocks  # grid axis 2: slot (token-major, not FLAT) x output block
    w_prog = tl.program_id(2) // n_cblocks
    h = tl.program_id(1)
    lane = tl.arange(0, BT)
    sel, w, phys, has_rows = route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                    num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED,
                                    FLAT, NSLOT)
    offs_r = tl.arange(0, BLOCK_R)
    offs_v = cb * BLOCK_V + tl.arange(0, BLOCK_V)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    y_rows = base_ptr + phys * sy_t + h * sy_h
    rank = tl.minimum(tl.load(lora_ranks + w), R)
    if (rank > 0) & has_rows:
        s = tl.load(scalings + w)
        xt = load_operand(x_rows[:, None] + offs_r[None, :] * sx_r, sel[:, None] & (offs_r < rank)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        w_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row
        wt = load_operand(w_base + offs_v[None, :] * sb_row + offs_r[:, None] * sb_r,
                          (offs_r < rank)[:, None] & (offs_v < VD)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        # split: the delta rounded to the activations' dtype
        step_b_tile(xt, wt, s, None, y_rows, offs_v, sy_v, sel, VD, offs_v, VD, base_ptr, x_ptr.dtype.element_ty,
                    DOT_PREC, FIX_BF16, "load")
