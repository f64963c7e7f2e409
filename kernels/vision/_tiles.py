"""The vision kernel's key-block step: tile loads, logits, online softmax, PV product, normalisation
and stores (Triton helpers, inlined into :func:`kernels.vision._kernel._vision_attn_fwd`).

Tiles are ``(BLOCK_M, width)`` query blocks against ``(BLOCK_N, width)`` key and value blocks of one
sequence and one head; a head dim is one padded tile or two power-of-two tiles (``DA``/``DB``, ``DVA``/
``DVB``: Note [Head-dim split] in :mod:`kernels.vision._kernel`).  Logits, the running row max ``m_i``
and sum ``l_i`` are fp32, or float64 at the exact fp32 levels (Note [Exact fp32]); the accumulators are
fp32 ``(BLOCK_M, DVA)`` and ``(BLOCK_M, DVB)``.

Note [Online softmax]
---------------------
Scores are scaled by ``scale * log2(e)`` and exponentiated with ``exp2`` against a running row
max.  A row max of -inf (a row with no valid key so far) is replaced by 0 before subtracting, so
``-inf - -inf`` never happens (NaN on the GPU; a numpy warning, an error under ``-W error``, in the
interpreter).  Keys are masked only in the last, partial key block: the full blocks run mask-free
(except with a split head dim, Note [Head-dim split]).
Probabilities are rounded to the input dtype before the PV product (fp32 accumulation), the
rounding points of the faithful baseline ``reference.vision.flashinfer_cudnn_oracle(faithful=...)``.

Note [Folded scale]
-------------------
At head dims up to 128 a key block costs as much in the softmax (a multiply, the row max, a subtract,
``exp2`` and the row sum per logit, on the FP32 and SFU units) as in the two MMAs, so one FP32
operation per logit matters.  With a non-negative scale (and ``EXACT == 0``) the row max is taken on
the raw logits and scaled once per row -- ``fl(max(s) * c) == max(fl(s * c))``, rounding being
monotonic -- and ``exp2(s * c - m)`` is one FMA per logit instead of a multiply and a subtract (one
rounding fewer).  A negative ``softmax_scale`` (the max would become a min) and the exact fp32 levels
keep the scaled logits, and so does ``VisionOptions(fold_scale=False)``.

Note [TF32]
-----------
fp32 inputs run either with exact fp32 products (``precision="ieee"``, the default) or on TF32
tensor cores (``"tf32"``).  Plain TF32 ``tl.dot`` misses the rule against the faithful TF32 baseline
(which rounds operands to nearest-even) on the H200 (triton 3.6): the MMA drops the low mantissa bits
rather than rounding them.  The kernel therefore rounds q, k, v and the probabilities to TF32
nearest-even itself before each dot (integer ops on the bit pattern), after which the hardware's
conversion is exact.

Note [Exact fp32]
-----------------
fp32 inputs with exact products (``precision="ieee"``) are the accuracy mode: nobody runs a vision
tower in fp32 for speed, and the rule holds such a kernel to K = 2 times the error of torch's own fp32
computation.  The levels (``EXACT``, ``VisionOptions.fp32_exact``):

* 0: the fp32 flash-attention arithmetic (fp32 logits through FMA chains, ``exp2`` of fp32 arguments,
  online rescaling, a reciprocal).  It misses the rule on rare inputs with large logits;
* 1: the softmax in float64 (scale, max, ``exp2``, sums, one correctly rounded division).  It misses on
  the same inputs: the softmax is not the error source;
* 2 (the default): the logits from float64 products too.  The logits' fp32 rounding, amplified through
  ``exp`` by large logits, was the error source; this level meets the rule on them.

Probabilities are still rounded to fp32 for the PV product and the output accumulates in fp32 (the
faithful baseline's rounding points).  bf16/fp16 and TF32 never use the levels.
``tools/compile_hopper.py`` compiles every level for sm_90 on any machine (a CPU test runs it).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..interpreter import round_bf16_rne, round_tf32

__all__ = ["attend", "load_tile", "normalized", "store_tile"]


@triton.jit
def load_tile(base, offs_t, t_lim, col0: tl.constexpr, stride_t, stride_d,
               WIDTH: tl.constexpr, NCOLS: tl.constexpr, MASK_T: tl.constexpr, INTERP: tl.constexpr,
               ROUND_TF32: tl.constexpr = False):
    """Load tokens ``offs_t`` x columns ``col0 .. col0+WIDTH`` (of NCOLS real ones)."""
    offs_d = col0 + tl.arange(0, WIDTH)
    ptrs = base + offs_t[:, None] * stride_t + offs_d[None, :] * stride_d
    if col0 + WIDTH > NCOLS:
        if MASK_T:
            x = tl.load(ptrs, mask=(offs_t[:, None] < t_lim) & (offs_d[None, :] < NCOLS), other=0.0)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < NCOLS, other=0.0)
    else:
        if MASK_T:
            x = tl.load(ptrs, mask=offs_t[:, None] < t_lim, other=0.0)
        else:
            x = tl.load(ptrs)
    if INTERP:  # bf16 arithmetic is broken in the interpreter: compute in fp32 (exact upcast)
        x = x.to(tl.float32)
    if ROUND_TF32:  # see Note [TF32]
        x = round_tf32(x, False)
    return x


@triton.jit
def _desc_tile(desc, start, col0, INTERP: tl.constexpr, ROUND_TF32: tl.constexpr = False):
    """Rows ``start ..``, columns ``col0 ..`` of a tensor descriptor's block (Note [Descriptor loads]): rows
    and columns past the descriptor's shape read as zero."""
    x = desc.load([start, col0])
    if INTERP:
        x = x.to(tl.float32)
    if ROUND_TF32:
        x = round_tf32(x, False)
    return x


@triton.jit
def _scores(q_a, q_b, k_base, start_n, n, stride_kt, stride_kd,
            D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, BLOCK_N: tl.constexpr, MASK_N: tl.constexpr,
            PREC: tl.constexpr, INTERP: tl.constexpr, TF32: tl.constexpr, EXACT: tl.constexpr,
            TMA: tl.constexpr = False, k_src_b=None):
    """The raw logits ``q @ k.T`` of the key block at ``start_n``: (BLOCK_M, BLOCK_N), fp32 (float64 when
    EXACT >= 2).  The first half of a key block's step; :func:`_softmax_pv` is the second."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if TMA:  # k_base is a tensor descriptor (Note [Descriptor loads])
        k_a = _desc_tile(k_base, start_n, 0, INTERP, TF32)
    else:
        k_a = load_tile(k_base, offs_n, n, 0, stride_kt, stride_kd, DA, D, MASK_N, INTERP, TF32)
    if EXACT >= 2:  # float64 logits (Note [Exact fp32])
        s = tl.dot(q_a.to(tl.float64), tl.trans(k_a).to(tl.float64))
    else:
        s = tl.dot(q_a, tl.trans(k_a), input_precision=PREC)
    if DB > 0:
        if TMA:  # k_src_b: the descriptor of the head dim's second tile
            k_b = _desc_tile(k_src_b, start_n, DA, INTERP, TF32)
        else:
            k_b = load_tile(k_base, offs_n, n, DA, stride_kt, stride_kd, DB, D, MASK_N, INTERP, TF32)
        if EXACT >= 2:
            s = tl.dot(q_b.to(tl.float64), tl.trans(k_b).to(tl.float64), s, out_dtype=tl.float64)
        else:
            s = tl.dot(q_b, tl.trans(k_b), s, input_precision=PREC)
    return s


@triton.jit
def _softmax(s, m_i, l_i, start_n, n, qk_scale, v_base,
             BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, INTERP: tl.constexpr, P_ROUND: tl.constexpr,
             TF32: tl.constexpr, qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr,
             WINDOW: tl.constexpr = False, offs_m=None, win_left=0, win_right=0):
    """The online softmax of the key block at ``start_n`` (its logits ``s`` from :func:`_scores`):
    (probabilities as the PV operand, the accumulator's rescale ``alpha``, the new row max and sum).
    ``WINDOW``: keys outside ``offs_m - win_left .. offs_m + win_right`` masked (-1: no limit; Note [GQA,
    window and sinks] in :mod:`kernels.vision._kernel`)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if EXACT >= 1:  # the softmax in float64, the scale exact to 2**-48 (Note [Exact fp32])
        s = s.to(tl.float64)
        s = s * qk_scale + s * qk_scale_lo
    elif not FOLD_SCALE:
        s = s * qk_scale
    if MASK_N:
        s = tl.where((offs_n < n)[None, :], s, float("-inf"))
    if WINDOW:
        rel = offs_n[None, :] - offs_m[:, None]  # key position minus query position
        seen = ((win_left < 0) | (rel >= -win_left)) & ((win_right < 0) | (rel <= win_right))
        seen = seen | (offs_m >= n)[:, None]  # rows past the sequence (never stored) keep every key: no 0/0
        s = tl.where(seen, s, float("-inf"))
    if FOLD_SCALE:  # Note [Folded scale]: the row max scaled once, the scale folded into one FMA per logit
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # see Note [Online softmax]
    alpha = tl.math.exp2(m_i - m_safe)
    if FOLD_SCALE:
        p = tl.math.exp2(s * qk_scale - m_safe[:, None])
    else:
        p = tl.math.exp2(s - m_safe[:, None])
    if EXACT >= 1:
        p = p.to(tl.float32)  # the PV operand: one rounding of the exact probability, summed exactly
        l_i = l_i * alpha + tl.sum(p.to(tl.float64), 1)
    else:
        l_i = l_i * alpha + tl.sum(p, 1)
    # probabilities in the input dtype for the PV product (the faithful rounding point)
    if INTERP:
        if P_ROUND == 2:
            p_mm = round_bf16_rne(p)
        elif P_ROUND == 1:
            p_mm = p.to(tl.float16).to(tl.float32)
        else:
            p_mm = p
    else:
        p_mm = p.to(v_base.dtype.element_ty)
    if TF32:
        p_mm = round_tf32(p_mm, False)
    return p_mm, alpha, m_new, l_i


@triton.jit
def _pv(p_mm, alpha, acc_a, acc_b, v_base, start_n, n, stride_vt, stride_vd,
        DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr, BLOCK_N: tl.constexpr, MASK_N: tl.constexpr,
        PREC: tl.constexpr, INTERP: tl.constexpr, TF32: tl.constexpr, EXACT: tl.constexpr,
        TMA: tl.constexpr = False, v_src_b=None):
    """The accumulators rescaled by ``alpha`` plus the key block's PV product: (acc_a, acc_b).
    ``v_base``: the values' pointer, or their tensor descriptor with TMA."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if TMA:
        v_a = _desc_tile(v_base, start_n, 0, INTERP, TF32)
    else:
        v_a = load_tile(v_base, offs_n, n, 0, stride_vt, stride_vd, DVA, DV, MASK_N, INTERP, TF32)
    acc_a = tl.dot(p_mm, v_a, _rescaled(acc_a, alpha, EXACT), input_precision=PREC)
    if DVB > 0:
        if TMA:
            v_b = _desc_tile(v_src_b, start_n, DVA, INTERP, TF32)
        else:
            v_b = load_tile(v_base, offs_n, n, DVA, stride_vt, stride_vd, DVB, DV, MASK_N, INTERP, TF32)
        acc_b = tl.dot(p_mm, v_b, _rescaled(acc_b, alpha, EXACT), input_precision=PREC)
    return acc_a, acc_b


@triton.jit
def _softmax_pv(s, acc_a, acc_b, m_i, l_i, v_base, start_n, n, stride_vt, stride_vd, qk_scale,
                DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
                BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, PREC: tl.constexpr,
                INTERP: tl.constexpr, P_ROUND: tl.constexpr, TF32: tl.constexpr,
                qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr, v_src=None, TMA: tl.constexpr = False,
                v_src_b=None, WINDOW: tl.constexpr = False, offs_m=None, win_left=0, win_right=0):
    """The key block's softmax, then its PV product: the updated (acc_a, acc_b, m_i, l_i).  ``v_src``: the
    values' tensor descriptor with TMA (``v_base``, the pointer, then only gives the dtype)."""
    p_mm, alpha, m_i, l_i = _softmax(s, m_i, l_i, start_n, n, qk_scale, v_base, BLOCK_N, MASK_N,
                                     INTERP, P_ROUND, TF32, qk_scale_lo, EXACT, FOLD_SCALE,
                                     WINDOW, offs_m, win_left, win_right)
    if TMA:
        v_base = v_src
    acc_a, acc_b = _pv(p_mm, alpha, acc_a, acc_b, v_base, start_n, n, stride_vt, stride_vd, DV, DVA, DVB, BLOCK_N,
                       MASK_N, PREC, INTERP, TF32, EXACT, TMA, v_src_b)
    return acc_a, acc_b, m_i, l_i


@triton.jit
def attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, start_n, n,
            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
            D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
            DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
            BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, PREC: tl.constexpr,
            INTERP: tl.constexpr, P_ROUND: tl.constexpr, TF32: tl.constexpr,
            qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr = False, v_src=None,
            TMA: tl.constexpr = False, k_src_b=None, v_src_b=None,
            WINDOW: tl.constexpr = False, offs_m=None, win_left=0, win_right=0):
    """One key block's whole step: its logits, then their softmax and PV product.  With TMA, ``k_base`` and
    ``v_src`` are the keys' and values' tensor descriptors (Note [Descriptor loads]); ``WINDOW``, ``offs_m``
    (the block's query positions) and the window's sides: :func:`_softmax`."""
    s = _scores(q_a, q_b, k_base, start_n, n, stride_kt, stride_kd, D, DA, DB, BLOCK_N, MASK_N, PREC, INTERP,
                TF32, EXACT, TMA, k_src_b)
    return _softmax_pv(s, acc_a, acc_b, m_i, l_i, v_base, start_n, n, stride_vt, stride_vd, qk_scale,
                       DV, DVA, DVB, BLOCK_N, MASK_N, PREC, INTERP, P_ROUND, TF32, qk_scale_lo, EXACT, FOLD_SCALE,
                       v_src, TMA, v_src_b, WINDOW, offs_m, win_left, win_right)


@triton.jit
def _rescaled(acc, alpha, EXACT: tl.constexpr):
    """``acc * alpha`` per row, with one rounding when alpha is float64 (Note [Exact fp32])."""
    if EXACT >= 1:
        out = (acc.to(tl.float64) * alpha[:, None]).to(tl.float32)
    else:
        out = acc * alpha[:, None]
    return out


@triton.jit
def normalized(acc, l_i, EXACT: tl.constexpr):
    """``acc / l`` per row: one correctly rounded division in float64 when exact, else a reciprocal."""
    if EXACT >= 1:
        out = (acc.to(tl.float64) / l_i[:, None]).to(tl.float32)
    else:
        out = acc * (1.0 / l_i)[:, None]
    return out


@triton.jit
def store_tile(base, offs_m, n, col0: tl.constexpr, stride_t, stride_d, x,
                WIDTH: tl.constexpr, NCOLS: tl.constexpr, INTERP: tl.constexpr, P_ROUND: tl.constexpr):
    offs_d = col0 + tl.arange(0, WIDTH)
    ptrs = base + offs_m[:, None] * stride_t + offs_d[None, :] * stride_d
    if INTERP and P_ROUND == 2:  # the interpreter's fp32 -> bf16 cast truncates
        x = round_bf16_rne(x)
    x = x.to(base.dtype.element_ty)
    if col0 + WIDTH > NCOLS:
        tl.store(ptrs, x, mask=(offs_m[:, None] < n) & (offs_d[None, :] < NCOLS))
    else:
        tl.store(ptrs, x, mask=offs_m[:, None] < n)
