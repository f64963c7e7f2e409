"""The fused kv_b LoRA kernels: step A then step B per tile, the intermediate in registers (docs/semantics.md#kv_b-lora-steps; the
Notes in :mod:`kernels.lora._kernels`).

The two sides share their body: the start under PDL (:func:`_pdl_start`), the route, slot, rank and early wait
of a program (:func:`_fused_rows`), its scaling (:func:`_scaling`), the step-A loop (:func:`_step_a`), and each
output block's pieces: the step-B weight block (:func:`_wt_block`) and the delta, masks, base load and store of
:mod:`._tiles`; what differs is where each side's weights lie and what it loads ahead.  Triton inlines every
helper.  The step-A rounding point and the loop over output blocks stay written out in each kernel: as
helpers, their inlined scopes add debug labels to the PTX there, and ptxas then schedules the fused q side's
64-row token-major kernel differently (``scripts/sass_against.sh`` compares the SASS).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..interpreter import rounded_f32
from ._families import COUNTS, two_families
from ._route import pick_slot, route, slot_meta, tile_and_head
from ._tiles import base_block, base_blocks4, load_operand, operand, out_block, scaled_delta, store_sum

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
def _wt_block(w_base, offs_r, cols, s_r, s_col, rank, hi, COLS_FIRST: tl.constexpr, UPCAST: tl.constexpr,
              FIX_BF16: tl.constexpr, DOT_PREC: tl.constexpr):
    """Columns ``cols`` (below ``hi``) of a slot's step-B weight as the product takes it, (BLOCK_R, block), rows
    past ``rank`` zero: the q side's ``A`` (``COLS_FIRST`` False) or the v side's ``B`` read transposed (its
    columns are rows of ``B_buf``: True; the offsets are summed in that order)."""
    if COLS_FIRST:
        ptrs = w_base + cols[None, :] * s_col + offs_r[:, None] * s_r
    else:
        ptrs = w_base + offs_r[:, None] * s_r + cols[None, :] * s_col
    return load_operand(ptrs, (offs_r < rank)[:, None] & (cols < hi)[None, :], UPCAST, FIX_BF16, DOT_PREC)


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
def _add_delta(mid, at, y_raw, base_ptr, y_rows, cc, sy_c, sel, hi, s, DOT_PREC: tl.constexpr,
               FIX_BF16: tl.constexpr):
    """One output block of the fused q side's whole-row prefetch: the scaled delta stored onto ``y_raw``."""
    d = scaled_delta(mid, at, s, base_ptr, DOT_PREC, FIX_BF16)
    y_ptrs, m = out_block(y_rows, cc, sy_c, sel, hi)
    store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)


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
    h, cb, sel, w, has_rows, offs_k, offs_r, offs_c0, x_rows, y_rows, rank, s = _fused_rows(
        x_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch, tiles_per_seg, num_rows,
        search_steps, n_cblocks, R, sx_t, sx_h, sy_t, sy_h, TOKEN_MAJOR, HAS_PERM, SEG_TILE, SORTED, FLAT, NSLOT, BT,
        BLOCK_K, BLOCK_C, BLOCK_R, HEADS_FIRST, META_FIRST, PDL and EARLY and not PREFETCH_ALL)
    if (rank > 0) & has_rows:
        scale = _scaling(s, scalings, w, META_FIRST and TOKEN_MAJOR)
        c_lo = cb * C_BLOCKS * BLOCK_C
        c_hi = tl.minimum(C, (cb + 1) * C_BLOCKS * BLOCK_C)
        wa_base = a_ptr + w.to(tl.int64) * sa_l
        if PREFETCH and not PREFETCH_ALL:  # the first A and base blocks in flight during step A (decode: latency, not bytes)
            y_next = base_block(y_rows, c_lo + offs_c0, sy_c, sel, c_hi)
            at_next = load_operand(wa_base + offs_r[:, None] * sa_r + (c_lo + offs_c0)[None, :] * sa_c,
                                   (offs_r < rank)[:, None] & ((c_lo + offs_c0) < c_hi)[None, :], UPCAST, FIX_BF16,
                                   DOT_PREC)
        # Note [Whole-row prefetch]: the first four blocks' base and A before step A
        if PREFETCH_ALL and not (PDL and EARLY):
            y0, y1, y2, y3 = base_blocks4(y_rows, c_lo, offs_c0, BLOCK_C, sy_c, sel, c_hi)
        if PREFETCH_ALL:
            a0 = _wt_block(wa_base, offs_r, c_lo + offs_c0, sa_r, sa_c, rank, c_hi, False, UPCAST, FIX_BF16, DOT_PREC)
            a1 = _wt_block(wa_base, offs_r, c_lo + BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, False, UPCAST, FIX_BF16,
                           DOT_PREC)
            a2 = _wt_block(wa_base, offs_r, c_lo + 2 * BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, False, UPCAST,
                           FIX_BF16, DOT_PREC)
            a3 = _wt_block(wa_base, offs_r, c_lo + 3 * BLOCK_C + offs_c0, sa_r, sa_c, rank, c_hi, False, UPCAST,
                           FIX_BF16, DOT_PREC)
        wb_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K).to(tl.int64) * sb_row
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        k_start = 0
        if PREFETCH_ALL and PDL and EARLY:  # Note [Early reads]: step A's first weight block, then the wait
            wt = _qb_block(wb_base, offs_k, offs_r, sb_row, sb_r, QK, R, UPCAST, FIX_BF16, DOT_PREC)
            gdc_wait()
            y0, y1, y2, y3 = base_blocks4(y_rows, c_lo, offs_c0, BLOCK_C, sy_c, sel, c_hi)
            xt = load_operand(x_rows[:, None] + offs_k[None, :] * sx_d, sel[:, None] & (offs_k < QK)[None, :], UPCAST,
                              FIX_BF16, DOT_PREC)
            acc = tl.dot(xt, wt, acc, input_precision=DOT_PREC)
            k_start = BLOCK_K
        # Note [Rank-wide loads]: step A's weight rows masked to the buffer rank R
        acc = _step_a(acc, x_rows, sx_d, sel, wb_base, sb_row, sb_r, offs_k, offs_r, R, k_start, QK, BLOCK_K, UPCAST,
                      FIX_BF16, DOT_PREC)
        acc = tl.where((offs_r < rank)[None, :], acc, 0.0)  # columns past the slot's rank (their weights unread)
        if UPCAST:  # step A's rounding point
            mid = operand(rounded_f32(acc, x_ptr.dtype.element_ty, FIX_BF16), DOT_PREC)
        else:
            mid = operand(acc.to(x_ptr.dtype.element_ty), DOT_PREC)
        c_rest = c_lo
        if PREFETCH_ALL:
            _add_delta(mid, a0, y0, base_ptr, y_rows, c_lo + offs_c0, sy_c, sel, c_hi, scale, DOT_PREC, FIX_BF16)
            _add_delta(mid, a1, y1, base_ptr, y_rows, c_lo + BLOCK_C + offs_c0, sy_c, sel, c_hi, scale, DOT_PREC,
                       FIX_BF16)
            _add_delta(mid, a2, y2, base_ptr, y_rows, c_lo + 2 * BLOCK_C + offs_c0, sy_c, sel, c_hi, scale, DOT_PREC,
                       FIX_BF16)
            _add_delta(mid, a3, y3, base_ptr, y_rows, c_lo + 3 * BLOCK_C + offs_c0, sy_c, sel, c_hi, scale, DOT_PREC,
                       FIX_BF16)
            c_rest = c_lo + 4 * BLOCK_C  # kv_lora_rank past four blocks: the plain loop below
        # a program's columns start at a multiple of BLOCK_C (a constexpr): the base tile's loads and stores
        # stay 16-byte aligned (a runtime column count here halves prefill's speed)
        for c0 in range(c_rest, c_hi, BLOCK_C):
            cc = c0 + offs_c0
            if PREFETCH and not PREFETCH_ALL:
                at = at_next
                at_next = _wt_block(wa_base, offs_r, cc + BLOCK_C, sa_r, sa_c, rank, c_hi, False, UPCAST, FIX_BF16,
                                    DOT_PREC)
            else:
                at = _wt_block(wa_base, offs_r, cc, sa_r, sa_c, rank, C, False, UPCAST, FIX_BF16, DOT_PREC)
            d = scaled_delta(mid, at, scale, base_ptr, DOT_PREC, FIX_BF16)
            y_ptrs, m = out_block(y_rows, cc, sy_c, sel, C)
            if PREFETCH and not PREFETCH_ALL:
                y_raw = y_next
                y_next = base_block(y_rows, cc + BLOCK_C, sy_c, sel, c_hi)
            else:
                y_raw = base_block(y_rows, cc, sy_c, sel, C)
            store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)
    else:
        if PDL and EARLY and PREFETCH_ALL:  # every program waits (Note [Early reads])
            gdc_wait()


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
    h, cb, sel, w, has_rows, offs_k, offs_r, offs_v0, x_rows, y_rows, rank, s = _fused_rows(
        x_ptr, base_ptr, seg_indptr, weight_indices, lora_ranks, scalings, perm, n_launch, tiles_per_seg, num_rows,
        search_steps, n_cblocks, R, sx_t, sx_h, sy_t, sy_h, TOKEN_MAJOR, HAS_PERM, SEG_TILE, SORTED, FLAT, NSLOT, BT,
        BLOCK_K, BLOCK_V, BLOCK_R, HEADS_FIRST, META_FIRST, PDL and EARLY and not PREFETCH)
    if (rank > 0) & has_rows:
        scale = _scaling(s, scalings, w, META_FIRST and TOKEN_MAJOR)
        wb_base = b_ptr + w.to(tl.int64) * sb_l + (h * FULL_K + QK).to(tl.int64) * sb_row
        if PREFETCH and PDL and EARLY:  # Note [Early reads]: step B's first weight block, then the wait
            bt_next = _wt_block(wb_base, offs_r, offs_v0, sb_r, sb_row, rank, VD, True, UPCAST, FIX_BF16, DOT_PREC)
            gdc_wait()
            y_next = base_block(y_rows, offs_v0, sy_v, sel, VD)
        elif PREFETCH:  # the first B and base blocks in flight during step A (decode: latency, not bytes)
            y_next = base_block(y_rows, offs_v0, sy_v, sel, VD)
            bt_next = _wt_block(wb_base, offs_r, offs_v0, sb_r, sb_row, rank, VD, True, UPCAST, FIX_BF16, DOT_PREC)
        wa_base = a_ptr + w.to(tl.int64) * sa_l
        acc = tl.zeros((BT, BLOCK_R), dtype=tl.float32)
        acc = _step_a(acc, x_rows, sx_c, sel, wa_base, sa_c, sa_r, offs_k, offs_r, rank, 0, C, BLOCK_K, UPCAST,
                      FIX_BF16, DOT_PREC)
        if UPCAST:  # step A's rounding point
            mid = operand(rounded_f32(acc, x_ptr.dtype.element_ty, FIX_BF16), DOT_PREC)
        else:
            mid = operand(acc.to(x_ptr.dtype.element_ty), DOT_PREC)
        for v0 in range(0, VD, BLOCK_V):
            vv = v0 + offs_v0
            if PREFETCH:
                bt = bt_next
                bt_next = _wt_block(wb_base, offs_r, vv + BLOCK_V, sb_r, sb_row, rank, VD, True, UPCAST, FIX_BF16,
                                    DOT_PREC)
            else:
                bt = _wt_block(wb_base, offs_r, vv, sb_r, sb_row, rank, VD, True, UPCAST, FIX_BF16, DOT_PREC)
            d = scaled_delta(mid, bt, scale, base_ptr, DOT_PREC, FIX_BF16)
            y_ptrs, m = out_block(y_rows, vv, sy_v, sel, VD)
            if PREFETCH:
                y_raw = y_next
                y_next = base_block(y_rows, vv + BLOCK_V, sy_v, sel, VD)
            else:
                y_raw = base_block(y_rows, vv, sy_v, sel, VD)
            store_sum(d, y_raw, y_ptrs, m, base_ptr, FIX_BF16)
    else:
        if PDL and EARLY and PREFETCH:  # every program waits (Note [Early reads])
            gdc_wait()
