"""The Hopper vision kernel in Gluon: a producer warp and two consumer warpgroups in ping-pong.

Note [Gluon Hopper kernel]
--------------------------
The Triton kernel (:mod:`kernels.vision._kernel`) leaves the schedule to the compiler, and triton 3.6
has no ping-pong between consumer warpgroups (Note [Warp specialization] there).  This kernel writes
FlashAttention-3's forward schedule out by hand in Gluon (``triton.experimental.gluon``, sm_90 only):

* **Partitions** (``gl.warp_specialize``): one producer warp issues every tensor-memory (TMA) load; two
  consumer warpgroups each own 64 query rows of the program's 128 (warpgroup 0 is the default
  partition, warpgroup 1 a worker running the same code).  Registers are moved to the consumers
  (``setmaxnreg``: 240 each, 24 for the producer's warpgroup).
* **Pipeline**: keys and values sit in ``STAGES`` shared-memory stages with ready/empty mbarriers per
  stage, separate for keys and values so that a key block is released as soon as its QK^T product is
  done; each consumer arrives on a stage's empty barrier (count 2).
* **Ping-pong**: a consumer issues its GEMMs only on its turn (a ``turn`` mbarrier per warpgroup,
  handed over right after the issue), so one warpgroup's softmax runs while the other's GEMMs use the
  tensor cores.
* **Intra-warpgroup overlap**: in the key loop a consumer issues block j's QK^T and block j-1's PV
  together, waits for the QK^T alone, runs block j's softmax while the PV product is in flight, then
  rescales the accumulator (the PV of block j-1 was issued against the accumulator already scaled to
  block j-1's maximum, so the rescale by block j's factor comes after it completes).
* **P in registers**: the softmax output is the PV product's register operand (wgmma "RS"), never
  written to shared memory.

Varlen follows Note [Schedule] of :mod:`kernels.vision._kernel` (the same block table, 128 rows a
block): each program builds device-side tensor descriptors for its sequence and head (Note [Descriptors
where they are used]), an ``(n, D)`` tensor at the sequence's first token, so TMA reads rows past the
sequence as zero (never the next sequence's tokens, whose non-finite values would reach the PV product);
the output is written with masked stores of the rows below ``n``.  A head dim that is not a power of two
is cut into two power-of-two tiles (:func:`~kernels.vision._config.head_dim_split`, 80 = 64 + 16): two
products for QK^T and two accumulators for PV.  Grouped key/value heads read head ``h // kv_group``.
The logits of the last key block are masked past ``n``; the softmax scale (times log2 e) is folded into
the exp2's FMA when it is positive.

Note [Descriptors where they are used]
--------------------------------------
A device-side descriptor is written to global scratch by the first warp of the partition that builds
it, which then fences it for the tensor-map proxy (release, then its own acquire).  Another warp reading
through it would need an acquire fence of its own, which Gluon does not expose, and without one the TMA
unit may use a stale copy of a tensor map at that address (scratch is reused from launch to launch).  So
the producer, one warp, builds the descriptors of q, k and v it loads through, and the consumers write the
output with masked pointer stores (a TMA store of a consumer's tile is issued from two of its warps).

What runs here is chosen by :class:`~kernels.options.VisionOptions` (``kernel="gluon"``) and
:func:`gluon_unsupported` says where it cannot (fp32, windows, sinks, head dims over 128, a device
other than sm_90, layouts TMA cannot read): there the Triton kernel runs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._config import head_dim_split

__all__ = ["GLUON_BLOCK_M", "GLUON_MAXNREG", "GLUON_WARPS", "GluonConfig", "gluon_arguments", "gluon_config",
           "gluon_unsupported", "launch_gluon"]

WG_ROWS = gl.constexpr(64)  # query rows per consumer warpgroup (wgmma: 16 rows a warp, 4 warps)
GLUON_BLOCK_M = 2 * WG_ROWS.value  # query rows per program: the block table's block_m
# the launch: 4 warps of consumer 0 plus the workers' 4 + 1, rounded up to whole warpgroups (12 warps); 168
# registers a thread over 384 threads is the register file, from which setmaxnreg gives each consumer 240
GLUON_WARPS = 4
GLUON_MAXNREG = 168
PRODUCER_REGS = gl.constexpr(24)
_MAX_SMEM = 227 * 1024  # sm_90's shared memory per block
_LOG2E = 1.4426950408889634
# the TMA load is async_copy_global_to_shared in triton 3.6 (the H200's), async_load from 3.7 on (where the old
# name raises)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.constexpr_function
def _smem_layout(rows, cols, dtype):
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.constexpr_function
def _mma_layout(n):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def _operand_a(n):
    return gl.DotOperandLayout(operand_index=0, parent=_mma_layout(n), k_width=2)


@gluon.jit
def _produce(bases, strides, smem, bars, n, m0, D: gl.constexpr, DV: gl.constexpr, DA: gl.constexpr,
             DB: gl.constexpr, DVA: gl.constexpr, DVB: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """The producer warp: both consumers' query tiles, then each key and value block into its stage.  It
    builds the descriptors it reads through itself (Note [Descriptors where they are used])."""
    q_base, k_base, v_base = bases[0], bases[1], bases[2]
    s_qt, s_kt, s_vt = strides[0], strides[1], strides[2]
    qs_a, qs_b, ks_a, ks_b, vs_a, vs_b = smem
    q_bar, k_ready, v_ready, k_empty, v_empty = bars[0], bars[1], bars[2], bars[3], bars[4]
    dtype: gl.constexpr = qs_a.dtype
    qd_a = _descriptor(q_base, n, D, s_qt, WG_ROWS, DA, dtype)
    kd_a = _descriptor(k_base, n, D, s_kt, BLOCK_N, DA, dtype)
    vd_a = _descriptor(v_base, n, DV, s_vt, BLOCK_N, DVA, dtype)
    if DB > 0:
        qd_b = _descriptor(q_base + DA, n, D - DA, s_qt, WG_ROWS, DB, dtype)
        kd_b = _descriptor(k_base + DA, n, D - DA, s_kt, BLOCK_N, DB, dtype)
    if DVB > 0:
        vd_b = _descriptor(v_base + DVA, n, DV - DVA, s_vt, BLOCK_N, DVB, dtype)
    q_bytes: gl.constexpr = WG_ROWS * (DA + DB) * dtype.primitive_bitwidth // 8
    k_bytes: gl.constexpr = BLOCK_N * (DA + DB) * dtype.primitive_bitwidth // 8
    v_bytes: gl.constexpr = BLOCK_N * (DVA + DVB) * dtype.primitive_bitwidth // 8
    for w in gl.static_range(2):
        mbarrier.expect(q_bar.index(w), q_bytes)
        _tma_load(qd_a, [m0 + w * WG_ROWS, 0], q_bar.index(w), qs_a.index(w))
        if DB > 0:
            _tma_load(qd_b, [m0 + w * WG_ROWS, 0], q_bar.index(w), qs_b.index(w))
    for j in range(gl.cdiv(n, BLOCK_N)):
        s = j % STAGES
        empty_phase = ((j // STAGES) & 1) ^ 1  # a fresh barrier passes a wait on parity 1
        mbarrier.wait(k_empty.index(s), empty_phase)
        mbarrier.expect(k_ready.index(s), k_bytes)
        _tma_load(kd_a, [j * BLOCK_N, 0], k_ready.index(s), ks_a.index(s))
        if DB > 0:
            _tma_load(kd_b, [j * BLOCK_N, 0], k_ready.index(s), ks_b.index(s))
        mbarrier.wait(v_empty.index(s), empty_phase)
        mbarrier.expect(v_ready.index(s), v_bytes)
        _tma_load(vd_a, [j * BLOCK_N, 0], v_ready.index(s), vs_a.index(s))
        if DVB > 0:
            _tma_load(vd_b, [j * BLOCK_N, 0], v_ready.index(s), vs_b.index(s))


@gluon.jit
def _wait_turn(turn, t, W: gl.constexpr):
    """Wait for this warpgroup's ``t``-th turn at the tensor cores (warpgroup 0 goes first)."""
    mbarrier.wait(turn.index(W), (t & 1) ^ (1 - W))


@gluon.jit
def _softmax(S, m_i, l_i, qk_scale, limit, MASK: gl.constexpr, FOLD: gl.constexpr, BLOCK_N: gl.constexpr):
    """One key block's online softmax on the raw logits ``S`` (64, BLOCK_N) fp32: the columns at and past
    ``limit`` masked when ``MASK``; returns (p fp32, new max, new sum, the accumulator's rescale factor),
    all in the base-2 scaled domain."""
    s_layout: gl.constexpr = _mma_layout(BLOCK_N)
    if not FOLD:  # scaled before the mask: -inf times a negative scale would be +inf
        S = S * qk_scale
    if MASK:
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        S = gl.where(gl.expand_dims(cols < limit, 0), S, float("-inf"))
    if FOLD:  # scale > 0: the maximum of the raw logits scales, and the scale folds into the exp2's FMA
        m_new = gl.maximum(m_i, gl.max(S, axis=1) * qk_scale)
        p = gl.exp2(S * qk_scale - gl.expand_dims(m_new, 1))
    else:
        m_new = gl.maximum(m_i, gl.max(S, axis=1))
        p = gl.exp2(S - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _consume(bases, strides, smem, bars, n, m0, qk_scale, DV: gl.constexpr, DVA: gl.constexpr, DVB: gl.constexpr,
             DB: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, W: gl.constexpr, FOLD: gl.constexpr):
    """Consumer warpgroup ``W``: query rows ``m0 + 64 W`` to ``m0 + 64 W + 63`` against every key block,
    then the normalized output (rows below ``n``)."""
    o_base, s_ot = bases[3], strides[3]
    qs_a, qs_b, ks_a, ks_b, vs_a, vs_b = smem
    q_bar, k_ready, v_ready, k_empty, v_empty, turn = bars
    SPLIT_D: gl.constexpr = DB > 0
    SPLIT_DV: gl.constexpr = DVB > 0
    dtype: gl.constexpr = qs_a.dtype
    s_layout: gl.constexpr = _mma_layout(BLOCK_N)
    oa_layout: gl.constexpr = _mma_layout(DVA)
    ob_layout: gl.constexpr = _mma_layout(DVB if SPLIT_DV else DVA)
    NPV: gl.constexpr = 2 if SPLIT_DV else 1  # PV products in flight while block j's QK^T is awaited

    s_zero = gl.zeros([WG_ROWS, BLOCK_N], gl.float32, s_layout)
    m_i = gl.full([WG_ROWS], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([WG_ROWS], gl.float32, gl.SliceLayout(1, s_layout))
    acc_a = gl.zeros([WG_ROWS, DVA], gl.float32, oa_layout)
    acc_b = gl.zeros([WG_ROWS, DVB if SPLIT_DV else DVA], gl.float32, ob_layout)
    q_a = qs_a.index(W)
    q_b = qs_b.index(W)
    mbarrier.wait(q_bar.index(W), 0)
    num_blocks = gl.cdiv(n, BLOCK_N)

    # block 0: its QK^T and softmax (its PV product is issued with block 1's QK^T, or after the loop)
    _wait_turn(turn, 0, W)
    mbarrier.wait(k_ready.index(0), 0)
    S = warpgroup_mma(q_a, ks_a.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if SPLIT_D:
        S = warpgroup_mma(q_b, ks_b.index(0).permute((1, 0)), S, is_async=True)
    mbarrier.arrive(turn.index(1 - W), count=1)
    S = warpgroup_mma_wait(num_outstanding=0, deps=(S,))
    mbarrier.arrive(k_empty.index(0), count=1)
    if n < BLOCK_N:
        p, m_i, l_i, alpha = _softmax(S, m_i, l_i, qk_scale, n, True, FOLD, BLOCK_N)
    else:
        p, m_i, l_i, alpha = _softmax(S, m_i, l_i, qk_scale, n, False, FOLD, BLOCK_N)
    p16 = p.to(dtype)

    for j in range(1, num_blocks):
        s = j % STAGES
        phase = (j // STAGES) & 1
        sp = (j - 1) % STAGES
        prev_phase = ((j - 1) // STAGES) & 1
        _wait_turn(turn, j, W)
        mbarrier.wait(k_ready.index(s), phase)
        S = warpgroup_mma(q_a, ks_a.index(s).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        if SPLIT_D:
            S = warpgroup_mma(q_b, ks_b.index(s).permute((1, 0)), S, is_async=True)
        mbarrier.wait(v_ready.index(sp), prev_phase)
        acc_a = warpgroup_mma(gl.convert_layout(p16, _operand_a(DVA)), vs_a.index(sp), acc_a, is_async=True)
        if SPLIT_DV:
            acc_b = warpgroup_mma(gl.convert_layout(p16, _operand_a(DVB)), vs_b.index(sp), acc_b,
                                  is_async=True)
        mbarrier.arrive(turn.index(1 - W), count=1)
        S = warpgroup_mma_wait(num_outstanding=NPV, deps=(S,))
        mbarrier.arrive(k_empty.index(s), count=1)
        limit = n - j * BLOCK_N
        if limit < BLOCK_N:
            p, m_i, l_i, alpha = _softmax(S, m_i, l_i, qk_scale, limit, True, FOLD, BLOCK_N)
        else:
            p, m_i, l_i, alpha = _softmax(S, m_i, l_i, qk_scale, limit, False, FOLD, BLOCK_N)
        acc_a, acc_b, p16 = warpgroup_mma_wait(num_outstanding=0, deps=(acc_a, acc_b, p16))
        mbarrier.arrive(v_empty.index(sp), count=1)
        acc_a = acc_a * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, oa_layout)), 1)
        if SPLIT_DV:
            acc_b = acc_b * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, ob_layout)), 1)
        p16 = p.to(dtype)

    # the last block's PV product
    last = num_blocks - 1
    _wait_turn(turn, num_blocks, W)
    mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
    acc_a = warpgroup_mma(gl.convert_layout(p16, _operand_a(DVA)), vs_a.index(last % STAGES), acc_a, is_async=True)
    if SPLIT_DV:
        acc_b = warpgroup_mma(gl.convert_layout(p16, _operand_a(DVB)), vs_b.index(last % STAGES), acc_b,
                              is_async=True)
    mbarrier.arrive(turn.index(1 - W), count=1)
    acc_a, acc_b = warpgroup_mma_wait(num_outstanding=0, deps=(acc_a, acc_b))
    mbarrier.arrive(v_empty.index(last % STAGES), count=1)

    # normalize and store: masked pointer stores of rows below n (Note [Descriptors where they are used])
    row0 = m0 + W * WG_ROWS
    o_a = acc_a / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, oa_layout)), 1)
    _store_rows(o_base, o_a.to(dtype), row0, n, s_ot, 0, DV, DVA)
    if SPLIT_DV:
        o_b = acc_b / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, ob_layout)), 1)
        _store_rows(o_base, o_b.to(dtype), row0, n, s_ot, DVA, DV, DVB)


@gluon.constexpr_function
def _store_layout(cols):
    """16-byte vectors along a row, a warp over whole rows: coalesced stores of a (64, cols) 16-bit tile."""
    per_row = min(32, max(cols // 8, 1))
    return gl.BlockedLayout([1, 8], [32 // per_row, per_row], [4, 1], [1, 0])


@gluon.jit
def _store_rows(o_base, tile, row0, n, stride, col0, DV: gl.constexpr, COLS: gl.constexpr):
    """``tile`` (64, COLS) at rows ``row0 ..`` and columns ``col0 ..`` of the sequence's output: rows from
    ``n`` on and columns from ``DV`` on are not written."""
    layout: gl.constexpr = _store_layout(COLS)
    tile = gl.convert_layout(tile, layout)
    rows = row0 + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, layout))
    cols = col0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows.to(gl.int64) * stride, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n, 1) & gl.expand_dims(cols < DV, 0)
    gl.store(o_base + offs, tile, mask=mask)


@gluon.jit
def _consume_second(bases, strides, smem, bars, n, m0, qk_scale, D: gl.constexpr, DV: gl.constexpr,
                    DA: gl.constexpr, DB: gl.constexpr, DVA: gl.constexpr, DVB: gl.constexpr, BLOCK_N: gl.constexpr,
                    STAGES: gl.constexpr, FOLD: gl.constexpr):
    """Worker-partition entry of consumer warpgroup 1 (the workers share one argument list)."""
    _consume(bases, strides, smem, bars, n, m0, qk_scale, DV, DVA, DVB, DB, BLOCK_N, STAGES, 1, FOLD)


@gluon.jit
def _produce_entry(bases, strides, smem, bars, n, m0, qk_scale, D: gl.constexpr, DV: gl.constexpr,
                   DA: gl.constexpr, DB: gl.constexpr, DVA: gl.constexpr, DVB: gl.constexpr, BLOCK_N: gl.constexpr,
                   STAGES: gl.constexpr, FOLD: gl.constexpr):
    """Worker-partition entry of the producer warp."""
    _produce(bases, strides, smem, bars, n, m0, D, DV, DA, DB, DVA, DVB, BLOCK_N, STAGES)


@gluon.jit
def _descriptor(base, rows, cols, stride, BLOCK_ROWS: gl.constexpr, BLOCK_COLS: gl.constexpr, dtype: gl.constexpr):
    """A (rows, cols) tensor at ``base`` with row stride ``stride``, read and written in
    (BLOCK_ROWS, BLOCK_COLS) boxes; TMA reads past its edges as zero."""
    return tma.make_tensor_descriptor(base, shape=[rows, cols], strides=[stride, 1],
                                      block_shape=[BLOCK_ROWS, BLOCK_COLS],
                                      layout=_smem_layout(BLOCK_ROWS, BLOCK_COLS, dtype))


@gluon.jit
def _gluon_attn_fwd(Q, K, V, O, TABLE, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_ot, stride_oh, qk_scale, kv_group,
                    D: gl.constexpr, DV: gl.constexpr, DA: gl.constexpr, DB: gl.constexpr, DVA: gl.constexpr,
                    DVB: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, GQA: gl.constexpr,
                    FOLD: gl.constexpr, ALIGN: gl.constexpr):
    """Program ``(i, h)``: block-table row ``i`` (Note [Schedule]), query head ``h``.  q, k (T, H[_kv], D),
    v (Tv, H_kv, DV), out (T, H, DV), unit innermost strides; token and head strides divided by ALIGN."""
    dtype: gl.constexpr = Q.dtype.element_ty
    pid = gl.program_id(0)
    h = gl.program_id(1)
    row = TABLE + pid * 5
    qk_tok = gl.load(row)
    v_tok = gl.load(row + 1)
    o_tok = gl.load(row + 2)
    n = gl.load(row + 3)
    m0 = gl.load(row + 4)
    if GQA:
        kv_h = h // kv_group
    else:
        kv_h = h
    s_qt = stride_qt * ALIGN
    s_kt = stride_kt * ALIGN
    s_vt = stride_vt * ALIGN
    s_ot = stride_ot * ALIGN
    q_base = Q + qk_tok.to(gl.int64) * s_qt + h * (stride_qh * ALIGN)
    k_base = K + qk_tok.to(gl.int64) * s_kt + kv_h * (stride_kh * ALIGN)
    v_base = V + v_tok.to(gl.int64) * s_vt + kv_h * (stride_vh * ALIGN)
    o_base = O + o_tok.to(gl.int64) * s_ot + h * (stride_oh * ALIGN)
    SPLIT_D: gl.constexpr = DB > 0
    SPLIT_DV: gl.constexpr = DVB > 0
    DB_T: gl.constexpr = DB if SPLIT_D else DA  # the second tile's width (unused, one tile, when not split)
    DVB_T: gl.constexpr = DVB if SPLIT_DV else DVA

    qs_a = gl.allocate_shared_memory(dtype, [2, WG_ROWS, DA], _smem_layout(WG_ROWS, DA, dtype))
    ks_a = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DA], _smem_layout(BLOCK_N, DA, dtype))
    vs_a = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DVA], _smem_layout(BLOCK_N, DVA, dtype))
    if SPLIT_D:
        qs_b = gl.allocate_shared_memory(dtype, [2, WG_ROWS, DB_T], _smem_layout(WG_ROWS, DB_T, dtype))
        ks_b = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DB_T], _smem_layout(BLOCK_N, DB_T, dtype))
    else:
        qs_b = qs_a
        ks_b = ks_a
    if SPLIT_DV:
        vs_b = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DVB_T], _smem_layout(BLOCK_N, DVB_T, dtype))
    else:
        vs_b = vs_a

    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for w in gl.static_range(2):
        mbarrier.init(q_bar.index(w), count=1)
        mbarrier.init(turn.index(w), count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=2)  # both consumers release a stage
        mbarrier.init(v_empty.index(s), count=2)

    bases = (q_base, k_base, v_base, o_base)
    strides = (s_qt, s_kt, s_vt, s_ot)
    smem = (qs_a, qs_b, ks_a, ks_b, vs_a, vs_b)
    bars = (q_bar, k_ready, v_ready, k_empty, v_empty, turn)
    # the argument tuples are written inline: a tuple bound to a name first turns its constexprs into tensors
    # (triton 3.6)
    gl.warp_specialize([
        (_consume, (bases, strides, smem, bars, n, m0, qk_scale, DV, DVA, DVB, DB, BLOCK_N, STAGES, 0, FOLD)),
        (_consume_second, (bases, strides, smem, bars, n, m0, qk_scale, D, DV, DA, DB, DVA, DVB, BLOCK_N, STAGES,
                           FOLD)),
        (_produce_entry, (bases, strides, smem, bars, n, m0, qk_scale, D, DV, DA, DB, DVA, DVB, BLOCK_N, STAGES,
                          FOLD)),
    ], [4, 1], [240, PRODUCER_REGS])


class GluonConfig(NamedTuple):
    """The Gluon kernel's blocks: 128 query rows a program (two warpgroups of 64), ``block_n`` keys a
    stage, ``stages`` key/value stages."""

    block_n: int
    stages: int


def _smem_bytes(d_tiles: int, dv_tiles: int, elem: int, block_n: int, stages: int) -> int:
    """Shared memory of one program: both consumers' query tiles, the key/value stages, the output tile's
    layout conversion (one warpgroup's) and the barriers."""
    return elem * (GLUON_BLOCK_M * d_tiles + stages * block_n * (d_tiles + dv_tiles) + WG_ROWS.value * dv_tiles) + 1024


def gluon_config(d: int, dv: int, elem: int) -> GluonConfig:
    """128 keys a block in as many stages (2 or 3) as shared memory holds; 64 keys where two 128-key
    stages do not fit."""
    d_tiles, dv_tiles = sum(head_dim_split(d, True)), sum(head_dim_split(dv, True))
    for block_n, stages in ((128, 3), (128, 2), (64, 3), (64, 2)):
        if _smem_bytes(d_tiles, dv_tiles, elem, block_n, stages) <= _MAX_SMEM:
            return GluonConfig(block_n, stages)
    raise ValueError(f"head dims d={d}, dv={dv} need more shared memory than sm_90 has")


def gluon_unsupported(q, k, v, window, sinks, capability=None) -> str:
    """Why the Gluon kernel cannot run this layout ('' when it can): sm_90, fp16/bf16, no window or
    sinks, head dims up to 128, unit innermost strides, 16-byte token and head strides.  ``capability``:
    the device's (major, minor), read from q's CUDA device when None."""
    if capability is None:
        if not q.is_cuda:
            return f"{q.device.type} tensors (the Gluon kernel runs on sm_90 GPUs)"
        capability = torch.cuda.get_device_capability(q.device)
    cap = tuple(capability)
    if cap[0] != 9:
        return f"compute capability {cap[0]}.{cap[1]} (the Gluon kernel needs sm_90's wgmma)"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"dtype {q.dtype} (the Gluon kernel takes float16 and bfloat16)"
    if window is not None and (window[0] >= 0 or window[1] >= 0):
        return f"window_size={tuple(window)}"
    if sinks is not None:
        return "s_aux (attention sinks)"
    if max(q.shape[2], v.shape[2]) > 128:
        return f"head dims d={q.shape[2]}, dv={v.shape[2]} (the Gluon kernel takes up to 128)"
    elem = q.element_size()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(2) != 1:
            return f"{name} with innermost stride {t.stride(2)} (TMA needs 1)"
        if (t.stride(0) * elem) % 16 or (t.stride(1) * elem) % 16:
            return f"{name} with token/head strides {t.stride()[:2]} not multiples of 16 bytes (TMA)"
    return ""


def gluon_arguments(q, k, v, out, table, num_blocks: int, scale: float) -> tuple[tuple, dict, dict]:
    """(grid, the kernel's arguments by name, launch options) of one launch of :func:`launch_gluon`."""
    H, D, DV = q.shape[1], q.shape[2], v.shape[2]
    DA, DB = head_dim_split(D, True)
    DVA, DVB = head_dim_split(DV, True)
    cfg = gluon_config(D, DV, q.element_size())
    align = 16 // q.element_size()  # gluon_unsupported checked every token and head stride is a multiple
    qk_scale = float(scale) * _LOG2E
    args = dict(Q=q, K=k, V=v, O=out, TABLE=table,
                stride_qt=q.stride(0) // align, stride_qh=q.stride(1) // align,
                stride_kt=k.stride(0) // align, stride_kh=k.stride(1) // align,
                stride_vt=v.stride(0) // align, stride_vh=v.stride(1) // align,
                stride_ot=out.stride(0) // align, stride_oh=out.stride(1) // align,
                qk_scale=qk_scale, kv_group=H // max(k.shape[1], 1),
                D=D, DV=DV, DA=DA, DB=DB, DVA=DVA, DVB=DVB, BLOCK_N=cfg.block_n, STAGES=cfg.stages,
                GQA=k.shape[1] != H, FOLD=qk_scale > 0, ALIGN=align)  # a zero scale times -inf is NaN
    return (num_blocks, H), args, dict(num_warps=GLUON_WARPS, maxnreg=GLUON_MAXNREG)


def launch_gluon(q, k, v, out, table, num_blocks: int, scale: float):
    """Run the Gluon kernel (Note [Gluon Hopper kernel]); the caller checked :func:`gluon_unsupported` and
    that q, k, v and out start on 16-byte boundaries.  Returns the compiled kernel."""
    from ._kernel import _ensure_allocator

    grid, args, launch = gluon_arguments(q, k, v, out, table, num_blocks, scale)
    _ensure_allocator()  # device-side descriptors: 128 bytes of global scratch each
    return _gluon_attn_fwd[grid](**args, **launch)
