"""The Triton kernel: a flash-attention forward over a per-block schedule of packed sequences, and its launch.

The key-block step (loads, logits, online softmax, PV product, stores) is in :mod:`kernels.vision._tiles`;
the host-side choices (block config, head-dim tiles, alignment, descriptors, exact fp32 level) are in
:mod:`kernels.vision._config`.

Note [Schedule]
---------------
One launch covers every query block of every sequence: program ``(i, h)`` reads row ``i`` of a
block table (built on the host by :mod:`kernels.vision.attention`) holding the sequence's q/k token
start, v token start, output token start, length, and the block's first query.  Sequences are
sorted longest first, so the programs that take longest start first and short ones fill the tail.
Zero-length (bucket padding) sequences have no rows, so they launch nothing and write nothing.

Note [Head-dim split]
---------------------
``tl.dot`` wants power-of-two tiles of at least 16, so a head dim of 72, 80 or 96 is padded to 128
with masked loads and stores (the masks exist only where a tile is wider than the data: constexpr).
The kernel can instead cut the head dim into a power-of-two part and a power-of-two tail
(80 = 64 + 16, 96 = 64 + 32, 72 = 64 + 16 with 8 masked): QK^T as the sum of two dots and two
output accumulators, saving the padded MMA work.

Triton 3.6 miscompiles the split PV product for sm_90 in two situations (docs/upstream/triton_split_pv.md):
a second, masked call site of the key-block step (the ragged last block), and ``num_stages=1`` with
64-key blocks; on the H200 both give wrong values or an illegal address, while the interpreter is
exact.  So a split kernel runs ONE loop, every block masked, and a one-stage config never splits.

With pointer loads the split does not pay (at these head dims a key block's softmax costs as much as
its MMAs, so cutting MMA work alone gains nothing); with descriptor loads it does (Note [Descriptor
loads]).  So by default a launch splits exactly when it reads through descriptors;
``VisionOptions(split_head_dim=True)`` (or ``False``) forces it either way, and
:func:`kernels.vision._config.head_dim_split` gives the tiles.

Note [Descriptor loads]
-----------------------
On Hopper the key and value blocks can come through the tensor memory accelerator: ``TMA``
(``KernelConfig.tma``) builds one tensor descriptor per program for the sequence's keys and values, an
``(n, D)`` tensor at the sequence's first token with the token stride, and loads each block from it.
TMA reads rows past ``n`` and columns past ``D`` as zero, what the masked pointer loads read, so the
output is bit for bit that of pointer loads (``test_descriptor_loads``, interpreter and H200); the
logits of those rows are still masked to -inf in the last block.  A descriptor needs a 16-byte aligned
base and 16-byte strides with a unit innermost stride, and one tile per head dim:
:func:`~kernels.vision._config.descriptor_loads_ok` checks the layout and the pointers on every JIT
launch (the direct launcher declines unaligned pointers, so a warm call never runs a descriptor kernel
on them), and refuses otherwise, keeping pointer loads.  The descriptors live in 128 bytes of global
scratch per program, which Triton takes from its allocator (:func:`_ensure_allocator` sets one if the
caller has not).

The H200 defaults (:func:`~kernels.vision._config.default_config`; tables in docs/BENCHMARKS.md): a head
dim of 128 reads through descriptors with 128 x 128 blocks (the addresses are the TMA unit's, so the
kernel needs fewer registers than with pointer loads); a head dim of 64 keeps pointer loads with 64 x 64
blocks (descriptors are slower there).  A head dim that is not a power of two is split (Note [Head-dim
split]) whenever the launch reads through descriptors, one descriptor per tile of each head dim, with
128 x 64 blocks (8 warps, 3 stages: two programs per SM), so that one program's softmax overlaps the
other's MMAs (what FlashAttention-3 gets from its warp-group ping-pong).
The key loop is not rotated by hand to issue block j+1's QK product before block j's softmax
(FlashAttention-3's overlap): triton 3.6 waits for each product right after issuing it, and the rotated
loop needs more registers and is slower on every benchmark shape.

Note [GQA, window and sinks]
----------------------------
Grouped key/value heads (Note [Grouped-query attention] in :mod:`reference.vision_metadata`): program
``(i, h)`` reads key/value head ``h // kv_group`` (``kv_group = H // H_kv``, a runtime argument behind the
constexpr ``GQA``: every group size shares one compiled kernel, and MHA reads head ``h``).  A window (``WINDOW``) masks each key block's logits to ``i - left <= j <= i + right``
(positions within the sequence, -1 for no limit) in the softmax, on every path; the key loop is not
shortened to the window, so a windowed call costs a full one.  Sinks (``HAS_SINKS``) add
``exp2(s_aux[h] * log2(e) - m)`` to each row's sum before the division (``m``: the running maximum of
the scaled base-2 logits), as SGLang's Triton kernels do.  All three are constexpr-guarded, so the
default launch (MHA, no window, no sinks) computes what it computed before; its compiled code differs
only in the four extra kernel parameters (the sinks pointer, the window's two sides, the group), which
move the constant-bank offsets of the parameters after them.

Note [Warp specialization]
--------------------------
The kernel does not use triton's warp specialization (``tl.range(..., warp_specialize=True)``: a
producer warpgroup issuing descriptor loads for consumer warpgroups): on the H200 (triton 3.6) the
warp-specialized key loop gave non-finite outputs whenever another process shared the GPU.
"""

from __future__ import annotations

import functools
import struct

import torch
import triton
import triton.language as tl

from ..options import VisionOptions
from ._config import INTERPRETING, KernelConfig, descriptor_loads_ok, exact_level, head_dim_split, stride_alignment
from ._tiles import attend, load_tile, normalized, store_tile

__all__ = ["INTERPRETING", "attention_arguments", "launch_attention"]


# token and head strides arrive divided by ALIGN: not specialized (see Note [Alignment]); neither are the
# window's sides and the key/value group (Note [GQA, window and sinks]: one compiled kernel for every window
# and every group size)
_DNS_STRIDES = ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh", "stride_ot", "stride_oh",
                "win_left", "win_right", "kv_group")
_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit(do_not_specialize=_DNS_STRIDES)
def _vision_attn_fwd(
    Q, K, V, O, TABLE, SINKS,
    stride_qt, stride_qh, stride_qd,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_ot, stride_oh, stride_od,
    qk_scale, qk_scale_lo, win_left, win_right, kv_group,
    D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
    DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
    INTERP: tl.constexpr, P_ROUND: tl.constexpr, ALIGN: tl.constexpr, TF32: tl.constexpr,
    EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr = False, TMA: tl.constexpr = False,
    GQA: tl.constexpr = False, WINDOW: tl.constexpr = False, HAS_SINKS: tl.constexpr = False,
):
    # token and head strides arrive divided by ALIGN (see Note [Alignment])
    stride_qt = stride_qt * ALIGN
    stride_qh = stride_qh * ALIGN
    stride_kt = stride_kt * ALIGN
    stride_kh = stride_kh * ALIGN
    stride_vt = stride_vt * ALIGN
    stride_vh = stride_vh * ALIGN
    stride_ot = stride_ot * ALIGN
    stride_oh = stride_oh * ALIGN
    pid = tl.program_id(0)
    h = tl.program_id(1)
    row = TABLE + pid * 5
    qk_tok = tl.load(row)
    v_tok = tl.load(row + 1)
    o_tok = tl.load(row + 2)
    n = tl.load(row + 3)
    m0 = tl.load(row + 4)
    if GQA:  # Note [GQA, window and sinks]: the query head's key/value head
        kv_h = h // kv_group
    else:
        kv_h = h
    # 64-bit sequence bases: token start * token stride can pass 2**31 elements on big batches
    q_base = Q + qk_tok.to(tl.int64) * stride_qt + h * stride_qh
    k_base = K + qk_tok.to(tl.int64) * stride_kt + kv_h * stride_kh
    v_base = V + v_tok.to(tl.int64) * stride_vt + kv_h * stride_vh
    o_base = O + o_tok.to(tl.int64) * stride_ot + h * stride_oh

    offs_m = m0 + tl.arange(0, BLOCK_M)
    q_a = load_tile(q_base, offs_m, n, 0, stride_qt, stride_qd, DA, D, True, INTERP, TF32)
    if DB > 0:
        q_b = load_tile(q_base, offs_m, n, DA, stride_qt, stride_qd, DB, D, True, INTERP, TF32)
    else:
        q_b = q_a
    if EXACT >= 1:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float64)
        l_i = tl.zeros([BLOCK_M], tl.float64)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc_a = tl.zeros([BLOCK_M, DVA], tl.float32)
    if DVB > 0:
        acc_b = tl.zeros([BLOCK_M, DVB], tl.float32)
    else:
        acc_b = acc_a

    if DB > 0 or DVB > 0:
        # a split head dim: one loop, every block masked (Note [Head-dim split]: with a second, masked call
        # site of attend, triton 3.6 miscompiles the two PV accumulators)
        if TMA:  # Note [Descriptor loads], one descriptor per tile of the head dims
            k_src = tl.make_tensor_descriptor(k_base, shape=[n, D], strides=[stride_kt, 1], block_shape=[BLOCK_N, DA])
            v_src = tl.make_tensor_descriptor(v_base, shape=[n, DV], strides=[stride_vt, 1],
                                              block_shape=[BLOCK_N, DVA])
            k_src_b = k_src
            v_src_b = v_src
            if DB > 0:
                k_src_b = tl.make_tensor_descriptor(k_base, shape=[n, D], strides=[stride_kt, 1],
                                                    block_shape=[BLOCK_N, DB])
            if DVB > 0:
                v_src_b = tl.make_tensor_descriptor(v_base, shape=[n, DV], strides=[stride_vt, 1],
                                                    block_shape=[BLOCK_N, DVB])
        else:
            k_src = k_base
            v_src = v_base
            k_src_b = k_base
            v_src_b = v_base
        for start_n in tl.range(0, n, BLOCK_N):
            acc_a, acc_b, m_i, l_i = attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_src, v_base, start_n, n,
                                            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                            D, DA, DB, DV, DVA, DVB, BLOCK_N, True, PREC, INTERP,
                                            P_ROUND, TF32,
                                            qk_scale_lo, EXACT, FOLD_SCALE, v_src, TMA, k_src_b, v_src_b,
                                            WINDOW, offs_m, win_left, win_right)
    elif TMA:  # Note [Descriptor loads]: the sequence's keys and values as (n, D) tensors, past n zero
        k_desc = tl.make_tensor_descriptor(k_base, shape=[n, D], strides=[stride_kt, 1], block_shape=[BLOCK_N, DA])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[n, DV], strides=[stride_vt, 1], block_shape=[BLOCK_N, DVA])
        n_full = (n // BLOCK_N) * BLOCK_N
        for start_n in tl.range(0, n_full, BLOCK_N):
            acc_a, acc_b, m_i, l_i = attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_desc, v_base, start_n, n,
                                            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                            D, DA, DB, DV, DVA, DVB, BLOCK_N, False, PREC, INTERP, P_ROUND, TF32,
                                            qk_scale_lo, EXACT, FOLD_SCALE, v_desc, True, None, None,
                                            WINDOW, offs_m, win_left, win_right)
        if n_full < n:
            acc_a, acc_b, m_i, l_i = attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_desc, v_base, n_full, n,
                                            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                            D, DA, DB, DV, DVA, DVB, BLOCK_N, True, PREC, INTERP, P_ROUND, TF32,
                                            qk_scale_lo, EXACT, FOLD_SCALE, v_desc, True, None, None,
                                            WINDOW, offs_m, win_left, win_right)
    else:  # full blocks unmasked, then the ragged last one masked
        n_full = (n // BLOCK_N) * BLOCK_N
        for start_n in tl.range(0, n_full, BLOCK_N):
            acc_a, acc_b, m_i, l_i = attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, start_n, n,
                                            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                            D, DA, DB, DV, DVA, DVB, BLOCK_N, False, PREC, INTERP, P_ROUND, TF32,
                                            qk_scale_lo, EXACT, FOLD_SCALE, None, False, None, None,
                                            WINDOW, offs_m, win_left, win_right)
        if n_full < n:
            acc_a, acc_b, m_i, l_i = attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, n_full, n,
                                            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                            D, DA, DB, DV, DVA, DVB, BLOCK_N, True, PREC, INTERP, P_ROUND, TF32,
                                            qk_scale_lo, EXACT, FOLD_SCALE, None, False, None, None,
                                            WINDOW, offs_m, win_left, win_right)
    if HAS_SINKS:  # Note [GQA, window and sinks]: the sink's term in every row's sum
        sink = tl.load(SINKS + h).to(tl.float32)
        if EXACT >= 1:
            l_i = l_i + tl.math.exp2(sink.to(tl.float64) * _LOG2E - m_i)
        else:
            l_i = l_i + tl.math.exp2(sink * _LOG2E - m_i)
    store_tile(o_base, offs_m, n, 0, stride_ot, stride_od, normalized(acc_a, l_i, EXACT), DVA, DV, INTERP, P_ROUND)
    if DVB > 0:
        store_tile(o_base, offs_m, n, DVA, stride_ot, stride_od, normalized(acc_b, l_i, EXACT), DVB, DV, INTERP,
                   P_ROUND)


_P_ROUND = {"float32": 0, "float16": 1, "bfloat16": 2}
LOG2E = 1.4426950408889634


@functools.lru_cache(maxsize=64)  # per launch on the warm path: a model has one or two scales
def _split_scale(c: float) -> tuple[float, float]:
    """``c`` as an fp32 pair (hi, lo) with hi + lo = c to about 2**-48 (kernel float args are fp32)."""
    hi = struct.unpack("f", struct.pack("f", c))[0]
    return hi, struct.unpack("f", struct.pack("f", c - hi))[0]


def attention_arguments(q, k, v, out, table, num_blocks: int, scale: float, config: KernelConfig,
                        precision: str, options: VisionOptions = VisionOptions(), *,
                        window: tuple[int, int] = (-1, -1), sinks=None) -> tuple[tuple, dict, dict]:
    """(grid, the kernel's arguments by name, launch options) of one launch; see :func:`launch_attention`."""
    H, D, DV = q.shape[1], q.shape[2], v.shape[2]
    align = stride_alignment(q, k, v, out)
    tma = config.tma and descriptor_loads_ok(q, k, v, out, align)
    # Note [Head-dim split]: never with one stage (it miscompiles the split PV product too); by default
    # exactly with descriptor loads
    if config.num_stages < 2:
        split = False
    else:
        split = tma if options.split_head_dim is None else options.split_head_dim
    DA, DB = head_dim_split(D, split)
    DVA, DVB = head_dim_split(DV, split)
    qk_scale, qk_scale_lo = _split_scale(float(scale) * LOG2E)
    exact = exact_level(q.dtype, precision, options.fp32_exact)
    args = dict(
        Q=q, K=k, V=v, O=out, TABLE=table, SINKS=table if sinks is None else sinks,
        stride_qt=q.stride(0) // align, stride_qh=q.stride(1) // align, stride_qd=q.stride(2),
        stride_kt=k.stride(0) // align, stride_kh=k.stride(1) // align, stride_kd=k.stride(2),
        stride_vt=v.stride(0) // align, stride_vh=v.stride(1) // align, stride_vd=v.stride(2),
        stride_ot=out.stride(0) // align, stride_oh=out.stride(1) // align, stride_od=out.stride(2),
        qk_scale=qk_scale, qk_scale_lo=qk_scale_lo, win_left=int(window[0]), win_right=int(window[1]),
        kv_group=q.shape[1] // max(k.shape[1], 1),
        D=D, DA=DA, DB=DB, DV=DV, DVA=DVA, DVB=DVB,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, PREC=precision if q.dtype == torch.float32 else None,
        INTERP=INTERPRETING, P_ROUND=_P_ROUND[str(q.dtype).replace("torch.", "")],
        ALIGN=align, TF32=q.dtype == torch.float32 and precision == "tf32",
        EXACT=exact, FOLD_SCALE=exact == 0 and qk_scale >= 0 and options.fold_scale, TMA=tma,
        GQA=k.shape[1] != q.shape[1], WINDOW=window[0] >= 0 or window[1] >= 0, HAS_SINKS=sinks is not None,
    )
    launch = dict(num_warps=config.num_warps, num_stages=config.num_stages)
    if tma and not INTERPRETING:
        _ensure_allocator()
    if config.maxnreg and not INTERPRETING:
        launch["maxnreg"] = config.maxnreg
    return (num_blocks, H), args, launch


def _ensure_allocator() -> None:
    """Device-side tensor descriptors take 128 bytes of global scratch per program: give Triton an
    allocator when none is set (a caller's own allocator is kept)."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def launch_attention(q, k, v, out, table, num_blocks: int, scale: float, config: KernelConfig,
                     precision: str, options: VisionOptions = VisionOptions(), *,
                     window: tuple[int, int] = (-1, -1), sinks=None):
    """Run the kernel. q (T,H,D), k (T,H_kv,D); v (Tv,H_kv,Dv); out (T,H,Dv); table int32 (num_blocks, 5)
    (Note [Schedule]); ``options``: the launch's :class:`~kernels.options.VisionOptions` (the defaults unless
    given: a planned launch passes the ones it was planned under); ``window`` (left, right) and ``sinks``
    (H,) or None: Note [GQA, window and sinks].

    Returns Triton's compiled kernel (None under the interpreter), which
    :class:`kernels.vision._direct.DirectLaunch` can relaunch without the JIT's per-call work."""
    grid, args, launch = attention_arguments(q, k, v, out, table, num_blocks, scale, config, precision, options,
                                             window=window, sinks=sinks)
    return _vision_attn_fwd[grid](**args, **launch)
