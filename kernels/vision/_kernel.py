"""The Triton kernel: a flash-attention forward over a per-block schedule of packed sequences.

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
output accumulators, saving the padded MMA work.  It is exact under the interpreter, but compiled
with triton 3.6 on the H200 the split PV product returned wrong values (max error 0.34-0.81 against
0.002) and head dim 72 faulted with an illegal address.  ``benchmarks/repro_split_pv.py`` (a 60-line
attention, right under the interpreter) reduced it to two triggers of triton 3.6 on sm_90
(2026-12-01, phases s10b-s10d): a second, masked call site of the key-block step (the ragged last
block; max errors 0.17-0.76, or an illegal address) and ``num_stages=1`` with 64-key blocks (0.39-0.73).
So a split kernel runs ONE loop, every block masked, and a one-stage config never splits; with both,
every diagnosis variant is right on the H200 (max error 0.0021-0.0025, bf16).  With pointer loads it
is off: not faster, TFLOP/s on the H200 (s10d) d80 ragged 278 -> 280, 4x4096 d72 255 -> 234 (at these
head dims a key block's softmax costs as much as its MMAs, so cutting MMA work alone does not pay).
With descriptor loads (Note [Descriptor loads]) it is on, and pays: see there.
``KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM`` ("1" on, "0" off) overrides the default for experiments;
``split=True`` of :func:`head_dim_split` asks for it in code.

Note [Alignment]
----------------
Triton specialises an integer argument on divisibility by 16 only.  A head stride of 72 elements
(head dim 72) is 144 bytes, 16-byte aligned, but not a multiple of 16 elements, so Triton could not
prove row alignment and fell back to narrow loads (measured on the H200: 124 TFLOP/s at head dim 72
against 277 at head dim 80).  The wrapper divides token and head strides by the largest power of
two (up to 16 bytes of elements) dividing them all and the kernel multiplies by that constexpr, so
the alignment is visible to the compiler.  Those divided strides are then ``do_not_specialize``
(``ALIGN``, a constexpr, carries the alignment): a new shape does not compile a new kernel for each
stride's class; the innermost strides (1 when contiguous) stay specialized.

Note [TF32]
-----------
fp32 inputs run either with exact fp32 products (``precision="ieee"``, the default) or on TF32
tensor cores (``"tf32"``).  Measured on the H200 (triton 3.6), plain TF32 ``tl.dot`` missed the
rule against the faithful TF32 baseline (which rounds operands to nearest-even) by up to 1.6x of
the allowance: the MMA drops the low mantissa bits rather than rounding them.  The kernel therefore
rounds q, k, v and the probabilities to TF32 nearest-even itself before each dot (integer ops on
the bit pattern), after which the hardware's conversion is exact; with it the fp32 tf32 tests pass
on the H200.

Note [Exact fp32]
----------------
fp32 inputs with exact products (``precision="ieee"``) are the accuracy mode: nobody runs a vision
tower in fp32 for speed, and the rule holds such a kernel to K = 2 times the error of torch's own fp32
computation.  The fp32 flash-attention arithmetic (``EXACT=0``: fp32 logits through FMA chains,
``exp2`` of fp32 arguments, online rescaling, a reciprocal) missed that rule rarely but for real: the
H200 soaks of 2026-11-30 found 3 fp32 buckets in 35,639 cases at 1.02-1.47x, and 13 of their 18
saved problems still missed on re-runs.  Measured on the H200 (``python -m
kernel_oracle.benchmarks.triage_vision_fp32 SUMMARIES``, 18 saved problems and 40 fresh large-logit
draws): ``EXACT=1`` (the softmax in float64: scale, max, ``exp2``, sums, one correctly rounded
division) still missed 13 of 18, so the softmax was not the cause; ``EXACT=2`` (the logits from
float64 products too) missed none, and a 10-minute soak of our vision kernel with it ran 43,326 cases
with no finding.  So the logits' fp32 rounding, amplified by large logits through ``exp``, was the
error source, and ``EXACT=2`` is the default.  Probabilities are still rounded to fp32 for the PV
product and the output accumulates in fp32 (the faithful baseline's rounding points).
``KERNEL_ORACLE_VISION_FP32_EXACT`` picks a level for triage; bf16/fp16 and TF32 never use it.
:mod:`benchmarks.compile_hopper` compiles every level for sm_90 on any machine (a CPU test runs it).

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
keep the scaled logits.

Note [Descriptor loads]
-----------------------
On Hopper the key and value blocks can come through the tensor memory accelerator: ``TMA``
(``KernelConfig.tma``) builds one tensor descriptor per program for the sequence's keys and values, an
``(n, D)`` tensor at the sequence's first token with the token stride, and loads each block from it.
TMA reads rows past ``n`` and columns past ``D`` as zero, what the masked pointer loads read, so the
output is bit for bit that of pointer loads (``test_descriptor_loads``, interpreter and H200); the
logits of those rows are still masked to -inf in the last block.  A descriptor needs a 16-byte aligned
base and 16-byte strides with a unit innermost stride, and one tile per head dim:
:func:`descriptor_loads_ok` checks the layout and the pointers on every JIT launch (the direct launcher
declines unaligned pointers, so a warm call never runs a descriptor kernel on them), and refuses
otherwise, keeping pointer loads.  The descriptors live in 128 bytes of global scratch per program,
which Triton takes from its allocator (:func:`_ensure_allocator` sets one if the caller has not).
Measured on the H200 (s15b, TFLOP/s, 128 x 128 blocks with descriptors against the former 128 x 64
default with pointer loads): 4x4096 d72 258 -> 275, 2x16384 d128 493 -> 504, ragged d80 282 -> 281;
at 64 x 256 d64 (64 x 64 blocks kept) descriptors lose (265 -> 189).  With descriptors the kernel
needs 191 registers at 128 x 128 (255 with pointer loads): the addresses are the TMA unit's.
A head dim that is not a power of two is split (Note [Head-dim split]) whenever the launch reads
through descriptors, one descriptor per tile of each head dim, with 128 x 64 blocks (8 warps, 3 stages:
118 registers, 82 KB of shared memory, two programs per SM).  The padded MMA work goes, and the smaller
blocks let two programs share an SM, so one's softmax overlaps the other's MMAs (what FlashAttention-3
gets from its warp-group ping-pong).  H200, TFLOP/s against the unsplit 128 x 128 (s15d; then the default
twice in s15e and s16a): ragged d80 281 -> 340-341 (cuDNN's engine 343-346), 4x4096 d72 275 -> 320-325
(cuDNN 319-327).
Not kept: the key loop rotated by hand so that block j+1's QK product is issued before block j's
softmax (FlashAttention-3's overlap; s15a): triton 3.6 waits for each product right after issuing it,
the rotated loop takes 229-237 registers against 178, and it was slower on every shape (d128 490 ->
466, ragged d80 280 -> 262).

Note [Warp specialization]
--------------------------
FlashAttention-3's overlap (a producer warpgroup issuing the loads, consumer warpgroups computing)
is what triton 3.6 offers as ``tl.range(..., warp_specialize=True)``; on sm_90 its Hopper pass applies it
only when the kernel asks for 4 warps and every tile the loop loads is a descriptor load, and then runs
12 warps (one producer, two consumers of 64 rows each).  ``KernelConfig(..., warp_specialize=True,
tma=True)`` builds that: the queries come through a descriptor too (a pointer load of them fails the
pass), the key loop is the one masked loop of a split head dim (a masked step after the loop leaves it
unspecialized), and the output is stored through a descriptor (rows and columns past the sequence and
the head dim are not written).  ``whole_blocks=True`` drops the key mask where every sequence is whole
key blocks (``plan_attention`` refuses the promise otherwise).  Measured on the H200 (session 17,
docs/benchmarks/vision.md):
- a masked pointer store after the specialized loop gives NaN outputs, and 3 or 4 stages give NaN;
  ``benchmarks/repro_hopper_ws.py`` reproduces both in a one-head kernel (docs/upstream/triton_hopper_ws.md),
  so the output goes through a descriptor and ``KernelConfig`` refuses any stage count but 2;
- masked, it is barely faster at d128 (504 -> 514-522 TFLOP/s) and slower elsewhere (ragged d80 338 ->
  303); on whole blocks, 2x16384 d128 547 against cuDNN's engine's 569 (the default: 500-509);
- as the d128 default on whole blocks it failed one realistic test once (fp16 2x16384: 5.6% NaN outputs,
  under ``pytest -n 8``), then matched the default bit for bit in 16 isolated rounds.
- Session 18 (``repro_hopper_ws --hunt``): compiled afresh in 32 processes, 8 sharing the GPU at a time, it
  gave non-finite outputs in 16 (1-4.6 million of 8.4 million elements); alone, 0 of 6; alone beside 7
  processes that only multiply matrices, 6 of 6.  Every compile gave the same cubins, so the binary is
  deterministic and its failure depends on what else runs on the GPU.  The one-head kernel of
  ``repro_hopper_ws`` (same pass, 2 stages, descriptor store) stayed right in the same conditions (0 of 16,
  0 of 6), so this is not shown to be triton's.  ``plan_attention`` therefore refuses a warp-specialized
  config (``warp_specialize`` and ``tma``) by field and value unless ``KERNEL_ORACLE_VISION_UNSAFE_WS=1``
  (reproduction only).  The pass gives the producer / consumer split but not FA3's ping-pong between the
  consumers.
"""

from __future__ import annotations

import functools
import os
import struct

import torch
import triton
import triton.language as tl

from ..interpreter import interpreting, round_bf16_rne, round_tf32

# triton.jit picks the interpreter at decoration time: read the switch once, like the kernels do
INTERPRETING = interpreting()

__all__ = ["KernelConfig", "attention_arguments", "head_dim_split", "launch_attention"]


def _prev_pow2(x: int) -> int:
    return 1 << (x.bit_length() - 1)


def head_dim_split(d: int, split: bool | None = None, default: bool = False) -> tuple[int, int]:
    """(A, B): power-of-two tile widths with A + B >= d, A >= 16, B == 0 or B >= 16.

    ``split=None``: KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM decides ("1" on, "0" off), else ``default`` (on for
    launches with descriptor loads, off otherwise: Note [Head-dim split], Note [Descriptor loads]).
    """
    if d <= 0:
        raise ValueError(f"Expected a positive head dim but got d={d}")
    min_b = 16
    if split is None:
        value = os.environ.get("KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM")
        if value is None:
            split = default
        else:
            split, min_b = value != "0", (32 if value == "32" else 16)  # "32": a tail of at least 32 (diagnosis)
    if not split:
        return max(16, triton.next_power_of_2(d)), 0
    a = max(16, _prev_pow2(d))
    rest = d - a
    if rest <= 0:
        return a, 0
    b = max(min_b, triton.next_power_of_2(rest))
    if a + b >= triton.next_power_of_2(d):  # the split saves nothing: one padded tile
        return triton.next_power_of_2(d), 0
    return a, b


class KernelConfig(tuple):
    """(block_m, block_n, num_warps, num_stages, warp_specialize, tma, maxnreg, whole_blocks):
    warp_specialize asks Triton to warp-specialize the key loop (``tl.range(..., warp_specialize=True)``), which it does
    on sm_90 only with tma, 4 warps and two stages (Note [Warp specialization]); tma loads the key and
    value blocks through tensor descriptors (Note [Descriptor loads]; where the layout allows it); maxnreg
    (0: none) caps the registers per thread (a launch option on a GPU); whole_blocks promises that every
    sequence of the launch is a whole number of ``block_n`` key blocks, so that the warp-specialized loop
    masks no keys (``plan_attention`` checks the promise)."""

    def __new__(cls, block_m: int, block_n: int, num_warps: int, num_stages: int, warp_specialize: bool = False,
                tma: bool = False, maxnreg: int = 0, whole_blocks: bool = False):
        if warp_specialize and tma and num_stages != 2:
            raise ValueError(f"KernelConfig: warp_specialize with tma needs num_stages=2, got "
                             f"num_stages={num_stages} (triton 3.6 warp-specializes more stages into wrong "
                             "outputs: Note [Warp specialization])")
        return super().__new__(cls, (block_m, block_n, num_warps, num_stages, bool(warp_specialize),
                                     bool(tma), int(maxnreg), bool(whole_blocks)))

    block_m = property(lambda self: self[0])
    block_n = property(lambda self: self[1])
    num_warps = property(lambda self: self[2])
    num_stages = property(lambda self: self[3])
    warp_specialize = property(lambda self: self[4])
    tma = property(lambda self: self[5])
    maxnreg = property(lambda self: self[6])
    whole_blocks = property(lambda self: self[7])


# The interpreter fails with more than one autotune config and costs ~20-35 ms per program: one
# small fixed config there.
INTERPRETER_CONFIG = KernelConfig(16, 16, 1, 1)


def default_config(d_tiles: int, dv_tiles: int, elem_bytes: int, tma: bool = False,
                   splits: bool = False) -> KernelConfig:
    """Hopper heuristics (H200, measured with kernels.bench_vision --sweep); ``tma``: the device has tensor
    memory access (compute capability 9 and newer); ``splits``: a head dim is cut into two tiles when
    split (:func:`head_dim_split` with ``split=True``: not a power of two).  The warp-specialized loop
    (Note [Warp specialization]) is never chosen: faster at d128, but wrong beside other GPU processes."""
    if INTERPRETING:
        return INTERPRETER_CONFIG
    if elem_bytes == 4:
        return KernelConfig(64, 32, 4, 2)
    if max(d_tiles, dv_tiles) <= 64:
        return KernelConfig(64, 64, 4, 3)  # 262 TFLOP/s on 64x256 (128x128x8x3: 177)
    if tma and splits:
        # Note [Descriptor loads]: a split head dim with descriptor loads, 128 x 64 blocks; H200 sweep s15d
        # (TFLOP/s): ragged d80 340 (cuDNN 348; 128 x 128 unsplit 281), 4x4096 d72 323 (cuDNN 325; 260)
        return KernelConfig(128, 64, 8, 3, tma=True)
    if tma:
        # Note [Descriptor loads]: 128 x 128 blocks with descriptor loads, H200 sweeps of 2026-12-01 (s15b, s15c)
        # against 128 x 64 with pointer loads: 4x4096 d72 258 -> 275 TFLOP/s, 2x16384 d128 493 -> 504, ragged
        # d80 282 -> 281; a layout that refuses descriptors runs these blocks with pointer loads (260 / 486 / 282)
        return KernelConfig(128, 128, 8, 3, tma=True)
    # sweeps of 2026-11-30 23:00 UTC (docs/benchmarks/vision.md): 128x64 against 128x128 gave 276 / 262
    # TFLOP/s on the ragged dim-80 set, 255 / 241 on 4x4096 dim 72, 484-490 / 483-486 on 2x16384 dim 128
    return KernelConfig(128, 64, 8, 3)


def has_tma(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA device with tensor memory access (compute capability 9 and newer)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


@triton.jit
def _load_tile(base, offs_t, t_lim, col0: tl.constexpr, stride_t, stride_d,
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
        k_a = _load_tile(k_base, offs_n, n, 0, stride_kt, stride_kd, DA, D, MASK_N, INTERP, TF32)
    if EXACT >= 2:  # float64 logits (Note [Exact fp32])
        s = tl.dot(q_a.to(tl.float64), tl.trans(k_a).to(tl.float64))
    else:
        s = tl.dot(q_a, tl.trans(k_a), input_precision=PREC)
    if DB > 0:
        if TMA:  # k_src_b: the descriptor of the head dim's second tile
            k_b = _desc_tile(k_src_b, start_n, DA, INTERP, TF32)
        else:
            k_b = _load_tile(k_base, offs_n, n, DA, stride_kt, stride_kd, DB, D, MASK_N, INTERP, TF32)
        if EXACT >= 2:
            s = tl.dot(q_b.to(tl.float64), tl.trans(k_b).to(tl.float64), s, out_dtype=tl.float64)
        else:
            s = tl.dot(q_b, tl.trans(k_b), s, input_precision=PREC)
    return s


@triton.jit
def _softmax(s, m_i, l_i, start_n, n, qk_scale, v_base,
             BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, INTERP: tl.constexpr, P_ROUND: tl.constexpr,
             TF32: tl.constexpr, qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr):
    """The online softmax of the key block at ``start_n`` (its logits ``s`` from :func:`_scores`):
    (probabilities as the PV operand, the accumulator's rescale ``alpha``, the new row max and sum)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if EXACT >= 1:  # the softmax in float64, the scale exact to 2**-48 (Note [Exact fp32])
        s = s.to(tl.float64)
        s = s * qk_scale + s * qk_scale_lo
    elif not FOLD_SCALE:
        s = s * qk_scale
    if MASK_N:
        s = tl.where((offs_n < n)[None, :], s, float("-inf"))
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
        v_a = _load_tile(v_base, offs_n, n, 0, stride_vt, stride_vd, DVA, DV, MASK_N, INTERP, TF32)
    acc_a = tl.dot(p_mm, v_a, _rescaled(acc_a, alpha, EXACT), input_precision=PREC)
    if DVB > 0:
        if TMA:
            v_b = _desc_tile(v_src_b, start_n, DVA, INTERP, TF32)
        else:
            v_b = _load_tile(v_base, offs_n, n, DVA, stride_vt, stride_vd, DVB, DV, MASK_N, INTERP, TF32)
        acc_b = tl.dot(p_mm, v_b, _rescaled(acc_b, alpha, EXACT), input_precision=PREC)
    return acc_a, acc_b


@triton.jit
def _softmax_pv(s, acc_a, acc_b, m_i, l_i, v_base, start_n, n, stride_vt, stride_vd, qk_scale,
                DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
                BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, PREC: tl.constexpr,
                INTERP: tl.constexpr, P_ROUND: tl.constexpr, TF32: tl.constexpr,
                qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr, v_src=None, TMA: tl.constexpr = False,
                v_src_b=None):
    """The key block's softmax, then its PV product: the updated (acc_a, acc_b, m_i, l_i).  ``v_src``: the
    values' tensor descriptor with TMA (``v_base``, the pointer, then only gives the dtype)."""
    p_mm, alpha, m_i, l_i = _softmax(s, m_i, l_i, start_n, n, qk_scale, v_base, BLOCK_N, MASK_N,
                                     INTERP, P_ROUND, TF32, qk_scale_lo, EXACT, FOLD_SCALE)
    if TMA:
        v_base = v_src
    acc_a, acc_b = _pv(p_mm, alpha, acc_a, acc_b, v_base, start_n, n, stride_vt, stride_vd, DV, DVA, DVB, BLOCK_N,
                       MASK_N, PREC, INTERP, TF32, EXACT, TMA, v_src_b)
    return acc_a, acc_b, m_i, l_i


@triton.jit
def _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, start_n, n,
            stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
            D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
            DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
            BLOCK_N: tl.constexpr, MASK_N: tl.constexpr, PREC: tl.constexpr,
            INTERP: tl.constexpr, P_ROUND: tl.constexpr, TF32: tl.constexpr,
            qk_scale_lo, EXACT: tl.constexpr, FOLD_SCALE: tl.constexpr = False, v_src=None,
            TMA: tl.constexpr = False, k_src_b=None, v_src_b=None):
    """One key block's whole step: its logits, then their softmax and PV product.  With TMA, ``k_base`` and
    ``v_src`` are the keys' and values' tensor descriptors (Note [Descriptor loads])."""
    s = _scores(q_a, q_b, k_base, start_n, n, stride_kt, stride_kd, D, DA, DB, BLOCK_N, MASK_N, PREC, INTERP,
                TF32, EXACT, TMA, k_src_b)
    return _softmax_pv(s, acc_a, acc_b, m_i, l_i, v_base, start_n, n, stride_vt, stride_vd, qk_scale,
                       DV, DVA, DVB, BLOCK_N, MASK_N, PREC, INTERP, P_ROUND, TF32, qk_scale_lo, EXACT, FOLD_SCALE,
                       v_src, TMA, v_src_b)


@triton.jit
def _rescaled(acc, alpha, EXACT: tl.constexpr):
    """``acc * alpha`` per row, with one rounding when alpha is float64 (Note [Exact fp32])."""
    if EXACT >= 1:
        out = (acc.to(tl.float64) * alpha[:, None]).to(tl.float32)
    else:
        out = acc * alpha[:, None]
    return out


@triton.jit
def _normalized(acc, l_i, EXACT: tl.constexpr):
    """``acc / l`` per row: one correctly rounded division in float64 when exact, else a reciprocal."""
    if EXACT >= 1:
        out = (acc.to(tl.float64) / l_i[:, None]).to(tl.float32)
    else:
        out = acc * (1.0 / l_i)[:, None]
    return out


@triton.jit
def _store_tile(base, offs_m, n, col0: tl.constexpr, stride_t, stride_d, x,
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


@triton.jit
def _store_desc(desc, m0, col0: tl.constexpr, x, INTERP: tl.constexpr, P_ROUND: tl.constexpr):
    """Store ``x`` (BLOCK_M, WIDTH) at rows ``m0 ..``, columns ``col0 ..`` of the output's descriptor: rows
    and columns past its shape are not written (Note [Warp specialization])."""
    if INTERP and P_ROUND == 2:  # the interpreter's fp32 -> bf16 cast truncates
        x = round_bf16_rne(x)
    desc.store([m0, col0], x.to(desc.dtype))


# token and head strides arrive divided by ALIGN: not specialized (see Note [Alignment])
_DNS_STRIDES = ("stride_qt", "stride_qh", "stride_kt", "stride_kh", "stride_vt", "stride_vh", "stride_ot", "stride_oh")


@triton.jit(do_not_specialize=_DNS_STRIDES)
def _vision_attn_fwd(
    Q, K, V, O, TABLE,
    stride_qt, stride_qh, stride_qd,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_ot, stride_oh, stride_od,
    qk_scale, qk_scale_lo,
    D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr,
    DV: tl.constexpr, DVA: tl.constexpr, DVB: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
    INTERP: tl.constexpr, P_ROUND: tl.constexpr, ALIGN: tl.constexpr, TF32: tl.constexpr,
    EXACT: tl.constexpr, WS: tl.constexpr = False, FOLD_SCALE: tl.constexpr = False,
    TMA: tl.constexpr = False, WHOLE_BLOCKS: tl.constexpr = False,
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
    # 64-bit sequence bases: token start * token stride can pass 2**31 elements on big batches
    q_base = Q + qk_tok.to(tl.int64) * stride_qt + h * stride_qh
    k_base = K + qk_tok.to(tl.int64) * stride_kt + h * stride_kh
    v_base = V + v_tok.to(tl.int64) * stride_vt + h * stride_vh
    o_base = O + o_tok.to(tl.int64) * stride_ot + h * stride_oh

    offs_m = m0 + tl.arange(0, BLOCK_M)
    if TMA and WS:  # Note [Warp specialization]: the query block through a descriptor too
        q_desc = tl.make_tensor_descriptor(q_base, shape=[n, D], strides=[stride_qt, 1],
                                           block_shape=[BLOCK_M, DA])
        q_a = _desc_tile(q_desc, m0, 0, INTERP, TF32)
    else:
        q_a = _load_tile(q_base, offs_m, n, 0, stride_qt, stride_qd, DA, D, True, INTERP, TF32)
    if DB > 0:
        if TMA and WS:
            q_desc_b = tl.make_tensor_descriptor(q_base, shape=[n, D], strides=[stride_qt, 1],
                                                 block_shape=[BLOCK_M, DB])
            q_b = _desc_tile(q_desc_b, m0, DA, INTERP, TF32)
        else:
            q_b = _load_tile(q_base, offs_m, n, DA, stride_qt, stride_qd, DB, D, True, INTERP, TF32)
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

    if DB > 0 or DVB > 0 or (TMA and WS):
        # a split head dim: one loop, every block masked (Note [Head-dim split]: with a second, masked call
        # site of _attend, triton 3.6 miscompiles the two PV accumulators); the warp-specialized loop too
        # (Note [Warp specialization]: a step after the loop leaves it plain), unmasked on whole blocks
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
        for start_n in tl.range(0, n, BLOCK_N, warp_specialize=WS):
            acc_a, acc_b, m_i, l_i = _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_src, v_base, start_n, n,
                                             stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                             D, DA, DB, DV, DVA, DVB, BLOCK_N, not WHOLE_BLOCKS, PREC, INTERP,
                                             P_ROUND, TF32,
                                             qk_scale_lo, EXACT, FOLD_SCALE, v_src, TMA, k_src_b, v_src_b)
    elif TMA:  # Note [Descriptor loads]: the sequence's keys and values as (n, D) tensors, past n zero
        k_desc = tl.make_tensor_descriptor(k_base, shape=[n, D], strides=[stride_kt, 1], block_shape=[BLOCK_N, DA])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[n, DV], strides=[stride_vt, 1], block_shape=[BLOCK_N, DVA])
        n_full = (n // BLOCK_N) * BLOCK_N
        for start_n in tl.range(0, n_full, BLOCK_N):
            acc_a, acc_b, m_i, l_i = _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_desc, v_base, start_n, n,
                                             stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                             D, DA, DB, DV, DVA, DVB, BLOCK_N, False, PREC, INTERP, P_ROUND, TF32,
                                             qk_scale_lo, EXACT, FOLD_SCALE, v_desc, True)
        if n_full < n:
            acc_a, acc_b, m_i, l_i = _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_desc, v_base, n_full, n,
                                             stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                             D, DA, DB, DV, DVA, DVB, BLOCK_N, True, PREC, INTERP, P_ROUND, TF32,
                                             qk_scale_lo, EXACT, FOLD_SCALE, v_desc, True)
    else:  # full blocks unmasked, then the ragged last one masked
        n_full = (n // BLOCK_N) * BLOCK_N
        for start_n in tl.range(0, n_full, BLOCK_N, warp_specialize=WS):
            acc_a, acc_b, m_i, l_i = _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, start_n, n,
                                             stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                             D, DA, DB, DV, DVA, DVB, BLOCK_N, False, PREC, INTERP, P_ROUND, TF32,
                                             qk_scale_lo, EXACT, FOLD_SCALE)
        if n_full < n:
            acc_a, acc_b, m_i, l_i = _attend(q_a, q_b, acc_a, acc_b, m_i, l_i, k_base, v_base, n_full, n,
                                             stride_kt, stride_kd, stride_vt, stride_vd, qk_scale,
                                             D, DA, DB, DV, DVA, DVB, BLOCK_N, True, PREC, INTERP, P_ROUND, TF32,
                                             qk_scale_lo, EXACT, FOLD_SCALE)
    if TMA and WS:  # Note [Warp specialization]: a masked pointer store comes out wrong there (NaN)
        o_desc = tl.make_tensor_descriptor(o_base, shape=[n, DV], strides=[stride_ot, 1],
                                           block_shape=[BLOCK_M, DVA])
        _store_desc(o_desc, m0, 0, _normalized(acc_a, l_i, EXACT), INTERP, P_ROUND)
        if DVB > 0:
            o_desc_b = tl.make_tensor_descriptor(o_base, shape=[n, DV], strides=[stride_ot, 1],
                                                 block_shape=[BLOCK_M, DVB])
            _store_desc(o_desc_b, m0, DVA, _normalized(acc_b, l_i, EXACT), INTERP, P_ROUND)
    else:
        _store_tile(o_base, offs_m, n, 0, stride_ot, stride_od, _normalized(acc_a, l_i, EXACT), DVA, DV, INTERP,
                    P_ROUND)
        if DVB > 0:
            _store_tile(o_base, offs_m, n, DVA, stride_ot, stride_od, _normalized(acc_b, l_i, EXACT), DVB, DV, INTERP,
                        P_ROUND)


def stride_alignment(*tensors) -> int:
    """Largest power of two, up to 16 bytes' worth of elements, dividing every token and head stride."""
    align = max(1, 16 // tensors[0].element_size())
    while align > 1 and any(t.stride(i) % align for t in tensors for i in (0, 1)):
        align //= 2
    return align


_P_ROUND = {"float32": 0, "float16": 1, "bfloat16": 2}
# Note [Folded scale]; KERNEL_ORACLE_VISION_FOLD_SCALE=0 (read at import) scales the logits first, for A/B
FOLD_SCALE_DEFAULT = os.environ.get("KERNEL_ORACLE_VISION_FOLD_SCALE", "1") != "0"
# fp32 "ieee" inputs: 0 = the fp32 flash-attention arithmetic, 1 = the softmax in float64, 2 = the
# logits too (Note [Exact fp32]); KERNEL_ORACLE_VISION_FP32_EXACT overrides the default, for triage
FP32_EXACT_DEFAULT = 2


def exact_level(dtype: torch.dtype, precision: str) -> int:
    """The EXACT constexpr of a launch: nonzero only for fp32 inputs with exact ("ieee") products."""
    if dtype != torch.float32 or precision != "ieee":
        return 0
    value = os.environ.get("KERNEL_ORACLE_VISION_FP32_EXACT", str(FP32_EXACT_DEFAULT))
    if value not in ("0", "1", "2"):
        raise ValueError(f"KERNEL_ORACLE_VISION_FP32_EXACT={value!r} is invalid; the only valid values are "
                         "'0', '1', '2' (Note [Exact fp32])")
    return int(value)


@functools.lru_cache(maxsize=64)  # per launch on the warm path: a model has one or two scales
def _split_scale(c: float) -> tuple[float, float]:
    """``c`` as an fp32 pair (hi, lo) with hi + lo = c to about 2**-48 (kernel float args are fp32)."""
    hi = struct.unpack("f", struct.pack("f", c))[0]
    return hi, struct.unpack("f", struct.pack("f", c - hi))[0]
LOG2E = 1.4426950408889634


def attention_arguments(q, k, v, out, table, num_blocks: int, scale: float, config: KernelConfig,
                        precision: str) -> tuple[tuple, dict, dict]:
    """(grid, the kernel's arguments by name, launch options) of one launch; see :func:`launch_attention`."""
    H, D, DV = q.shape[1], q.shape[2], v.shape[2]
    align = stride_alignment(q, k, v, out)
    tma = config.tma and descriptor_loads_ok(q, k, v, out, align, with_q=config.warp_specialize)
    # (Note [Head-dim split]: never with one stage, which miscompiles the split PV product too; by default
    # only with descriptor loads, Note [Descriptor loads])
    split = False if config.num_stages < 2 else None
    DA, DB = head_dim_split(D, split, default=tma)
    DVA, DVB = head_dim_split(DV, split, default=tma)
    qk_scale, qk_scale_lo = _split_scale(float(scale) * LOG2E)
    exact = exact_level(q.dtype, precision)
    args = dict(
        Q=q, K=k, V=v, O=out, TABLE=table,
        stride_qt=q.stride(0) // align, stride_qh=q.stride(1) // align, stride_qd=q.stride(2),
        stride_kt=k.stride(0) // align, stride_kh=k.stride(1) // align, stride_kd=k.stride(2),
        stride_vt=v.stride(0) // align, stride_vh=v.stride(1) // align, stride_vd=v.stride(2),
        stride_ot=out.stride(0) // align, stride_oh=out.stride(1) // align, stride_od=out.stride(2),
        qk_scale=qk_scale, qk_scale_lo=qk_scale_lo,
        D=D, DA=DA, DB=DB, DV=DV, DVA=DVA, DVB=DVB,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, PREC=precision if q.dtype == torch.float32 else None,
        INTERP=INTERPRETING, P_ROUND=_P_ROUND[str(q.dtype).replace("torch.", "")],
        ALIGN=align, TF32=q.dtype == torch.float32 and precision == "tf32",
        EXACT=exact, WS=config.warp_specialize and tma,
        FOLD_SCALE=exact == 0 and qk_scale >= 0 and FOLD_SCALE_DEFAULT,
        TMA=tma, WHOLE_BLOCKS=config.whole_blocks and config.warp_specialize and tma,
    )
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages)
    if args["TMA"] and not INTERPRETING:
        _ensure_allocator()
    if config.maxnreg and not INTERPRETING:
        options["maxnreg"] = config.maxnreg
    return (num_blocks, H), args, options


def descriptor_loads_ok(q, k, v, out, align: int, with_q: bool = False) -> bool:
    """Whether keys and values (and with ``with_q`` the queries and the output: Note [Warp specialization])
    can be read or written through tensor descriptors (Note [Descriptor loads]): unit innermost strides,
    every token and head stride and data pointer a multiple of 16 bytes."""
    return (align * q.element_size() == 16 and k.stride(2) == 1 and v.stride(2) == 1
            and k.data_ptr() % 16 == 0 and v.data_ptr() % 16 == 0
            and (not with_q or all(t.stride(2) == 1 and t.data_ptr() % 16 == 0 for t in (q, out))))


def _ensure_allocator() -> None:
    """Device-side tensor descriptors take 128 bytes of global scratch per program: give Triton an
    allocator when none is set (a caller's own allocator is kept)."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def launch_attention(q, k, v, out, table, num_blocks: int, scale: float, config: KernelConfig,
                     precision: str):
    """Run the kernel. q, k (T,H,D); v (Tv,H,Dv); out (T,H,Dv); table int32 (num_blocks, 5).

    Returns Triton's compiled kernel (None under the interpreter), which
    :class:`kernels.vision._direct.DirectLaunch` can relaunch without the JIT's per-call work."""
    grid, args, options = attention_arguments(q, k, v, out, table, num_blocks, scale, config, precision)
    return _vision_attn_fwd[grid](**args, **options)
