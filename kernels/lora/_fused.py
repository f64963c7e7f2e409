"""The fused kv_b LoRA kernels: step A then step B per tile, the intermediate in registers (docs/semantics.md#kv_b-lora-steps; the
Notes in :mod:`kernels.lora._kernels`).

The two sides are one body, :func:`_fused_side`, specialised by the constexpr ``Q_SIDE``: the route, slot, rank
and early wait of a program (:func:`_fused_rows`), its scaling (:func:`_scaling`), the prefetches, step A
(:func:`_step_a`) and its rounding point, and the loop over output blocks, each block one
:func:`._tiles.step_b_tile` (the split steps' tile too).  What differs by side is where the weights lie (the
q side's step A reads ``B`` and its step B ``A``, the v side the other way round) and what each side loads
ahead (``PREFETCH_ALL`` and the rank-wide step-A loads are the q side's).  The kernels themselves start PDL
and restore their sizes and strides (Note [Specialization]), each in its own parameter order.

Note [Helpers and the SASS]
---------------------------
Triton inlines every helper, but each inlined call leaves debug scopes in the PTX, and ptxas schedules
around the labels that mark where a scope's instructions begin and end: a fold that leaves the
instructions the same can still change the SASS the GPU runs (``scripts/sass_against.sh`` compares it).
So the ALIGN prologue stays in the kernels; the q side's first prefetched ``A`` block is written out in
the body and the split steps' weight tiles in their kernels, not in :func:`._tiles.weight_block` (their rank
masks would move into the helper's scope: the 64-row token-major q kernel and fp32 step B_q schedule
differently); and a base pointer plus two offsets is written as the pointer plus their sum (as a pointer
sum, Triton fuses the two offsets' source locations, and a fused location inside a helper falls back to the
kernel's, which splits the helper's scope).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..interpreter import rounded_f32
from ._families import COUNTS, two_families
from ._route import pick_slot, route, slot_meta, tile_and_head
from ._tiles import base_block, base_blocks4, load_operand, operand, step_b_tile, weight_block

__all__ = ["q_side_fused_kernel", "v_side_fused_kernel"]


@triton.jit
def _pdl_start(PDL: tl.constexpr, EARLY: tl.constexpr):
    """Note [Programmatic dependent launch]: the next kernel may be scheduled now; wait for the previous one
    here, unless Note [Early reads] moves the wait further down."""
    if PDL:
        gdc_launch_dependents()
        if not EARLY:
            gdc_wait()


@triton.jit
def _fused_rows(x_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch, tiles_per_seg,
                num_rows, search_steps, n_cblocks, R, sx_t, sx_h, sy_t, sy_h,
                TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                FLAT: tl.constexpr, NSLOT: tl.constexpr, BT: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, HEADS_FIRST: tl.constexpr, META_FIRST: tl.constexpr,
                WAIT: tl.constexpr):
    """This program's rows and slot: ``(h, cb, sel, w, has_rows, offs_k, offs_r, offs_n, x_rows, y_rows, rank, s)``.

    ``h`` its head, ``cb`` its output block (grid axis 2: slot (token-major, not FLAT) x output block), ``sel``
    (BT,) the selected rows, ``w`` their slot, ``has_rows`` whether any is selected, the aranges of BLOCK_K,
    BLOCK_R and BLOCK_N (the output block), the rows' input and base-output pointers (BT,), the slot's rank
    (at most ``R``) and, under META_FIRST on the token-major path (Note [Slot metadata first]), its scaling,
    else 0.0 (:func:`_scaling` loads it).  ``WAIT``: Note [Early reads]'s wait after the route."""
    pid, h = tile_and_head(HEADS_FIRST)
    cb = tl.program_id(2) % n_cblocks
    w_prog = tl.program_id(2) // n_cblocks
    lane = tl.arange(0, BT)
    if META_FIRST and TOKEN_MAJOR:  # Note [Slot metadata first]
        ranks_w, scales_w = slot_meta(lora_ranks, scalings, w_prog, search_steps, FLAT, NSLOT)
    sel, w, phys, has_rows = route(pid, lane, w_prog, seg_indptr, weight_indices, perm, n_launch, tiles_per_seg,
                                   num_rows, search_steps, TOKEN_MAJOR, HAS_PERM, BT, SEG_TILE, SORTED, FLAT, NSLOT)
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    offs_n = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + phys * sx_t + h * sx_h
    y_rows = base_ptr + phys * sy_t + h * sy_h
    if META_FIRST and TOKEN_MAJOR:
        rank, s = pick_slot(ranks_w, scales_w, w, FLAT, NSLOT)
        rank = tl.minimum(rank, R)
    else:
        rank = tl.minimum(tl.load(lora_ranks + w), R)
        s = 0.0  # loaded once the program knows it has work (_scaling)
    if WAIT:  # Note [Early reads]: the route and the slot's metadata only
        gdc_wait()
    return h, cb, sel, w, has_rows, offs_k, offs_r, offs_n, x_rows, y_rows, rank, s


@triton.jit
def _scaling(s, scalings, w, LOADED: tl.constexpr):
    """The slot's scaling: ``s`` when :func:`_fused_rows` loaded it (``LOADED``), else loaded now."""
    if not LOADED:
        s = tl.load(scalings + w)
    return s


@triton.jit
def _qb_block(wb_base, kk, offs_r, sb_row, sb_r, QK, R, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr,
              DOT_PREC: tl.constexpr):
    """Rows ``kk`` (below ``QK``) of a slot's q-side step-A weight (BLOCK_K, BLOCK_R) for one head.  Note
    [Rank-wide loads]: every column below the buffer rank ``R``, so that the rows load in 16-byte vectors."""
    return load_operand(wb_base + kk[:, None] * sb_row + offs_r[None, :] * sb_r,
                        (kk < QK)[:, None] & (offs_r < R)[None, :], UPCAST, FIX_BF16, DOT_PREC)


@triton.jit
def _step_a(acc, x_rows, sx_k, sel, w_base, sw_k, sw_r, offs_k, offs_r, r_hi, start, K, BLOCK_K: tl.constexpr,
            UPCAST: tl.constexpr, FIX_BF16: tl.constexpr, DOT_PREC: tl.constexpr):
    """``acc`` (BT, BLOCK_R) plus the selected rows' inputs (``x_rows``, K columns from ``start``) times the
    slot's step-A weight (``w_base``: K rows, rank columns below ``r_hi``), BLOCK_K columns at a time."""
    for k0 in range(start, K, BLOCK_K):
        kk = k0 + offs_k
        xt = load_operand(x_rows[:, None] + kk[None, :] * sx_k, sel[:, None] & (kk < K)[None, :], UPCAST, FIX_BF16,
                          DOT_PREC)
        wt = load_operand(w_base + kk[:, None] * sw_k + offs_r[None, :] * sw_r,
                          (kk < K)[:, None] & (offs_r < r_hi)[None, :], UPCAST, FIX_BF16, DOT_PREC)
        acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
    return acc


@triton.jit
def _fused_side(x_ptr, a_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch,
                tiles_per_seg, num_rows, search_steps, n_cblocks, QK, C, VD, FULL_K, R, C_BLOCKS,
                sx_t, sx_h, sx_k, sa_l, sa_r, sa_c, sb_l, sb_row, sb_r, sy_t, sy_h, sy_n,
                Q_SIDE: tl.constexpr, TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr,
                SORTED: tl.constexpr, FLAT: tl.constexpr, NSLOT: tl.constexpr, BT: tl.constexpr,
                BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
                UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                PREFETCH: tl.constexpr, HEADS_FIRST: tl.constexpr, PREFETCH_ALL: tl.constexpr,
                META_FIRST: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr, EARLY_LOADS: tl.constexpr):
    """One program of a fused side (``Q_SIDE``: q, else v), sizes and strides as they are (not divided by ALIGN).

    The q side: step A ``x (QK) @ B[w, h*FULL_K:, :R]`` (Note [Rank-wide loads]), step B onto ``C_BLOCKS`` blocks of
    the ``C`` output columns with ``A[w]``; the v side: step A ``x (C) @ A[w].T`` masked to the rank, step B onto
    the ``VD`` output columns with ``B[w, h*FULL_K+QK:]`` read transposed.  ``x`` strides ``sx_t, sx_h, sx_k``,
    ``A`` (L, R, C) ``sa_l, sa_r, sa_c``, ``B`` (L, H*FULL_K, R) ``sb_l, sb_row, sb_r``, base ``sy_t, sy_h, sy_n``.
    ``EARLY_LOADS``: the weight blocks Note [Early reads] issues before the wait (q: ``PREFETCH_ALL``, v:
    ``PREFETCH``), without which the wait follows the route."""
    h, cb, sel, w, has_rows, offs_k, offs_r, offs_n, x_rows, y_rows, rank, s = _fused_rows(
        x_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch, tiles_per_seg, num_rows,
        search_steps, n_cblocks, R, sx_t, sx_h, sy_t, sy_h, TOKEN_MAJOR, HAS_PERM, SEG_TILE, SORTED, FLAT, NSLOT, BT,
        BLOCK_K, BLOCK_N, BLOCK_R, HEADS_FIRST, META_FIRST, PDL and EARLY and not EARLY_LOADS)
    if (rank > 0) & has_rows:
        scale = _scaling(s, scalings, w, META_FIRST and TOKEN_MAJOR)
        if Q_SIDE:  # output columns [n_lo, n_hi) of C; step B's weight is A
            n_lo = cb * C_BLOCKS * BLOCK_N
            n_hi = tl.minimum(C, (cb + 1) * C_BLOCKS * BLOCK_N)
            n_all = C
            wo_base = a_ptr + w.to(tl.int64) * sa_l
            so_r = sa_r
            so_n = sa_c
        else:  # all VD output columns; step B's weight is B's V half, read transposed
            n_lo = 0
            n_hi = VD
            n_all = VD
            wo_base = b_ptr + (w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row)
            so_r = sb_r
            so_n = sb_row
        if PREFETCH and PDL and EARLY and not Q_SIDE:  # Note [Early reads]: step B's first weight block, then the wait
            wt_next = weight_block(wo_base, offs_r, offs_n, so_r, so_n, rank, n_hi, True, UPCAST, FIX_BF16, DOT_PREC)
            gdc_wait()
            y_next = base_block(y_rows, offs_n, sy_n, sel, n_hi)
        elif PREFETCH and not PREFETCH_ALL:  # the first weight and base blocks in flight during step A (decode)
            if Q_SIDE:
                y_next = base_block(y_rows, n_lo + offs_n, sy_n, sel, n_hi)
                # the rank mask written here, not in weight_block: the loop reuses it, and as a helper's its debug
                # scope changes how ptxas schedules the 64-row kernel (scripts/sass_against.sh)
                wt_next = load_operand(wo_base + offs_r[:, None] * so_r + (n_lo + offs_n)[None, :] * so_n,
                                       (offs_r < rank)[:, None] & ((n_lo + offs_n) < n_hi)[None, :], UPCAST, FIX_BF16,
                                       DOT_PREC)
            else:
                y_next = base_block(y_rows, offs_n, sy_n, sel, n_hi)
                wt_next = weight_block(wo_base, offs_r, offs_n, so_r, so_n, rank, n_hi, True, UPCAST, FIX_BF16, DOT_PREC)
        # Note [Whole-row prefetch] (q side): the first four blocks' base and A before step A
        if PREFETCH_ALL and not (PDL and EARLY):
            y0, y1, y2, y3 = base_blocks4(y_rows, n_lo, offs_n, BLOCK_N, sy_n, sel, n_hi)
        if PREFETCH_ALL:
            a0 = weight_block(wo_base, offs_r, n_lo + offs_n, so_r, so_n, rank, n_hi, False, UPCAST, FIX_BF16, DOT_PREC)
            a1 = weight_block(wo_base, offs_r, n_lo + BLOCK_N + offs_n, so_r, so_n, rank, n_hi, False, UPCAST, FIX_BF16,
                              DOT_PREC)
            a2 = weight_block(wo_base, offs_r, n_lo + 2 * BLOCK_N + offs_n, so_r, so_n, rank, n_hi, False, UPCAST,
                              FIX_BF16, DOT_PREC)
            a3 = weight_block(wo_base, offs_r, n_lo + 3 * BLOCK_N + offs_n, so_r, so_n, rank, n_hi, False, UPCAST,
                              FIX_BF16, DOT_PREC)
        if Q_SIDE:
            wi_base = b_ptr + (w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row)
            acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
            k_start = 0
            if PREFETCH_ALL and PDL and EARLY:  # Note [Early reads]: step A's first weight block, then the wait
                wt = _qb_block(wi_base, offs_k, offs_r, sb_row, sb_r, QK, R, UPCAST, FIX_BF16, DOT_PREC)
                gdc_wait()
                y0, y1, y2, y3 = base_blocks4(y_rows, n_lo, offs_n, BLOCK_N, sy_n, sel, n_hi)
                xt = load_operand(x_rows[:, None] + offs_k[None, :] * sx_k, sel[:, None] & (offs_k < QK)[None, :],
                                  UPCAST, FIX_BF16, DOT_PREC)
                acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
                k_start = BLOCK_K
            # Note [Rank-wide loads]: step A's weight rows masked to the buffer rank R
            acc = _step_a(acc, x_rows, sx_k, sel, wi_base, sb_row, sb_r, offs_k, offs_r, R, k_start, QK, BLOCK_K,
                          UPCAST, FIX_BF16, DOT_PREC)
            acc = tl.where((offs_r < rank)[None, :], acc, 0.0)  # columns past the slot's rank (their weights unread)
        else:
            wi_base = a_ptr + w.to(tl.int64) * sa_l
            acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
            acc = _step_a(acc, x_rows, sx_k, sel, wi_base, sa_c, sa_r, offs_k, offs_r, rank, 0, C, BLOCK_K, UPCAST,
                          FIX_BF16, DOT_PREC)
        if UPCAST:  # step A's rounding point
            mid = operand(rounded_f32(acc, x_ptr.dtype.element_ty, FIX_BF16), DOT_PREC)
        else:
            mid = operand(acc.to(x_ptr.dtype.element_ty), DOT_PREC)
        n_rest = n_lo
        if PREFETCH_ALL:
            step_b_tile(mid, a0, scale, y0, y_rows, n_lo + offs_n, sy_n, sel, n_hi, offs_n, n_hi, base_ptr,
                        base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "given")
            step_b_tile(mid, a1, scale, y1, y_rows, n_lo + BLOCK_N + offs_n, sy_n, sel, n_hi, offs_n, n_hi, base_ptr,
                        base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "given")
            step_b_tile(mid, a2, scale, y2, y_rows, n_lo + 2 * BLOCK_N + offs_n, sy_n, sel, n_hi, offs_n, n_hi,
                        base_ptr, base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "given")
            step_b_tile(mid, a3, scale, y3, y_rows, n_lo + 3 * BLOCK_N + offs_n, sy_n, sel, n_hi, offs_n, n_hi,
                        base_ptr, base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "given")
            n_rest = n_lo + 4 * BLOCK_N  # kv_lora_rank past four blocks: the plain loop below
        # a program's columns start at a multiple of BLOCK_N (a constexpr): the base tile's loads and stores
        # stay 16-byte aligned (a runtime column count here halves prefill's speed)
        for n0 in range(n_rest, n_hi, BLOCK_N):
            nn = n0 + offs_n
            if PREFETCH and not PREFETCH_ALL:  # this block's weight and base loaded an iteration ahead
                wo = wt_next
                wt_next = weight_block(wo_base, offs_r, nn + BLOCK_N, so_r, so_n, rank, n_hi, not Q_SIDE, UPCAST,
                                       FIX_BF16, DOT_PREC)
                y_next = step_b_tile(mid, wo, scale, y_next, y_rows, nn, sy_n, sel, n_all, nn + BLOCK_N, n_hi,
                                     base_ptr, base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "ahead")
            else:
                wo = weight_block(wo_base, offs_r, nn, so_r, so_n, rank, n_all, not Q_SIDE, UPCAST, FIX_BF16, DOT_PREC)
                step_b_tile(mid, wo, scale, None, y_rows, nn, sy_n, sel, n_all, nn, n_all, base_ptr,
                            base_ptr.dtype.element_ty, DOT_PREC, FIX_BF16, "load")
    else:
        if PDL and EARLY and EARLY_LOADS:  # every program waits (Note [Early reads])
            gdc_wait()


_DNS_Q_SIDE_FUSED = COUNTS + ('FULL_K', 'R', 'C_BLOCKS', 'sx_t', 'sx_h', 'sb_l', 'sb_row', 'sa_l', 'sa_r',
                              'sy_t', 'sy_h',
                              'QK', 'C', 'sx_d', 'sb_r', 'sa_c', 'sy_c')


@two_families(_DNS_Q_SIDE_FUSED)
def q_side_fused_kernel(x_ptr, b_ptr, a_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                        n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, FULL_K, C, R,
                        C_BLOCKS,
                        sx_t, sx_h, sx_d, sb_l, sb_row, sb_r, sa_l, sa_r, sa_c, sy_t, sy_h, sy_c,
                        TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                        FLAT: tl.constexpr, NSLOT: tl.constexpr,
                        BT: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr,
                        UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                        ALIGN: tl.constexpr, PREFETCH: tl.constexpr = False, HEADS_FIRST: tl.constexpr = False,
                        PREFETCH_ALL: tl.constexpr = False, META_FIRST: tl.constexpr = False,
                        PDL: tl.constexpr = False, EARLY: tl.constexpr = False):
    """Step A_q then B_q without the intermediate in memory; grid (row tiles, H, slots x output blocks)."""
    _pdl_start(PDL, EARLY)
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    C = C * ALIGN
    R = R * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_d = 1
        sb_r = 1
        sa_c = 1
        sy_c = 1
    _fused_side(x_ptr, a_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch,
                tiles_per_seg, num_rows, search_steps, n_cblocks, QK, C, C, FULL_K, R, C_BLOCKS,
                sx_t, sx_h, sx_d, sa_l, sa_r, sa_c, sb_l, sb_row, sb_r, sy_t, sy_h, sy_c,
                True, TOKEN_MAJOR, HAS_PERM, SEG_TILE, SORTED, FLAT, NSLOT, BT, BLOCK_K, BLOCK_C, BLOCK_R,
                UPCAST, DOT_PREC, FIX_BF16, PREFETCH, HEADS_FIRST, PREFETCH_ALL, META_FIRST, PDL, EARLY, PREFETCH_ALL)


_DNS_V_SIDE_FUSED = COUNTS + ('FULL_K', 'R', 'sx_t', 'sx_h', 'sa_l', 'sa_r', 'sb_l', 'sb_row', 'sy_t', 'sy_h',
                              'QK', 'VD', 'C', 'sx_c', 'sa_c', 'sb_r', 'sy_v')


@two_families(_DNS_V_SIDE_FUSED)
def v_side_fused_kernel(x_ptr, a_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm,
                        n_launch, tiles_per_seg, num_rows, search_steps, n_cblocks, QK, VD, FULL_K, C, R,
                        sx_t, sx_h, sx_c, sa_l, sa_r, sa_c, sb_l, sb_row, sb_r, sy_t, sy_h, sy_v,
                        TOKEN_MAJOR: tl.constexpr, HAS_PERM: tl.constexpr, SEG_TILE: tl.constexpr, SORTED: tl.constexpr,
                        FLAT: tl.constexpr, NSLOT: tl.constexpr,
                        BT: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
                        UPCAST: tl.constexpr, DOT_PREC: tl.constexpr, FIX_BF16: tl.constexpr,
                        ALIGN: tl.constexpr, PREFETCH: tl.constexpr = False, HEADS_FIRST: tl.constexpr = False,
                        META_FIRST: tl.constexpr = False, PDL: tl.constexpr = False, EARLY: tl.constexpr = False):
    """Step A_v then B_v without the intermediate in memory; grid (row tiles, H, slots)."""
    _pdl_start(PDL, EARLY)
    # strides and sizes arrive divided by ALIGN; ALIGN > 1 also promises unit innermost strides
    sx_t = sx_t * ALIGN
    sx_h = sx_h * ALIGN
    sa_l = sa_l * ALIGN
    sa_r = sa_r * ALIGN
    sb_l = sb_l * ALIGN
    sb_row = sb_row * ALIGN
    sy_t = sy_t * ALIGN
    sy_h = sy_h * ALIGN
    QK = QK * ALIGN
    VD = VD * ALIGN
    C = C * ALIGN
    if ALIGN > 1:  # (see Note [Specialization])
        sx_c = 1
        sa_c = 1
        sb_r = 1
        sy_v = 1
    _fused_side(x_ptr, a_ptr, b_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch,
                tiles_per_seg, num_rows, search_steps, n_cblocks, QK, C, VD, FULL_K, R, 1,
                sx_t, sx_h, sx_c, sa_l, sa_r, sa_c, sb_l, sb_row, sb_r, sy_t, sy_h, sy_v,
                False, TOKEN_MAJOR, HAS_PERM, SEG_TILE, SORTED, FLAT, NSLOT, BT, BLOCK_K, BLOCK_V, BLOCK_R,
                UPCAST, DOT_PREC, FIX_BF16, PREFETCH, HEADS_FIRST, False, META_FIRST, PDL, EARLY, PREFETCH)
