"""Wrappers of the kv_b LoRA kernels: validation, path choice, block sizes, launch.

Note [No host synchronisation]
------------------------------
Every check runs through :func:`reference.lora.validate_call` (the same code as the reference):
the upstream contract first (missing ``max_len``/``seg_lens``), then, when strict, the shape and
metadata checks (which read the metadata on the host).  With ``strict=False`` a call reads nothing
from the device beyond what upstream reads (``seg_lens.max()`` only when ``max_len`` is None), so
it can be captured in a CUDA graph: the grid and the path depend only on host integers
(``max_len``, segment counts, tensor shapes); segment bounds, slots, ranks and scalings are read
by the kernels themselves.

Path choice (:func:`plan`): a segment-major launch has ``n_launch * ceil(max_len / BT)`` tiles of
``BT`` rows; when that is more than twice the rows the input holds (``S``, an upper bound of the
routed rows), most tile rows would idle -- decode batches of one-token segments fill 1/BT of each
tile -- and the token-major path, whose grid is ``ceil(S / BT)`` tiles of consecutive logical rows,
is used instead.  Token-major with slot-sorted tiles over ``L <= FLAT_SLOTS_MAX`` slots launches the
flat grid, ``ceil(S / BT) + L - 1`` tiles with no slot axis (Note [Flat slot grid] in
:mod:`kernels.lora._kernels`): still host integers only (``L`` is the weight buffer's ``shape[0]``).
"""

from __future__ import annotations

import contextlib
import functools
import os

from dataclasses import dataclass
from typing import Optional

import torch
import triton

from kernel_oracle.reference.lora import validate_call
from kernel_oracle.reference.lora_routing import num_segments

from ..interpreter import interpreting, needs_bf16_fix
from . import _kernels as K
from ._smem import DEFAULT_STAGES, fit_config, ladder, smem_limit

try:  # where Triton reports a launch that needs more shared memory than the device has
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - older layouts
    from triton.runtime.autotuner import OutOfResources  # type: ignore[no-redef]

__all__ = ["BLOCKS", "FORCE_PATH", "PRECISION", "Plan", "plan"]

# fp32 activations (fp32 weights) on a GPU: operands rounded to TF32 to nearest in registers, then tl.dot in
# TF32 (the tensor cores' truncation leaves them unchanged), fp32 accumulation: the oracle's "tf32-rne"
# model, declared "tf32" by the triton target (fuzz/targets/triton.py).  Under the interpreter, or with
# weights of another dtype, tiles are upcast and tl.dot is exact fp32.  fp16/bf16: tensor-core products,
# fp32 accumulation.
PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "tf32"}

# Block sizes per kernel and path (tokens BT, heads BH, inner blocks, num_warps).  Module-level data so
# that kernels/bench_lora.py can try alternatives; the winners of its --sweep (prefill-8x2048, "seg")
# and --sweep-decode (decode-bs64 graph replay, "tok") on the H200 (docs/kernels_lora.md).
BLOCKS = {
    "step_a_q": {"seg": dict(BT=128, BLOCK_K=64, num_warps=8), "tok": dict(BT=64, BLOCK_K=128, num_warps=4)},
    "step_b_q": {"seg": dict(BT=16, BH=4, BLOCK_C=128, num_warps=4),
                 "tok": dict(BT=4, BH=16, BLOCK_C=256, num_warps=4)},
    "step_a_v": {"seg": dict(BT=16, BH=4, BLOCK_K=128, num_warps=4),
                 "tok": dict(BT=4, BH=16, BLOCK_K=128, num_warps=4)},
    "step_b_v": {"seg": dict(BT=64, BLOCK_V=128, num_warps=4), "tok": dict(BT=64, BLOCK_V=128, num_warps=8)},
    # PREFETCH_ALL (q, Note [Whole-row prefetch] in kernels.lora._kernels): the first four base and A
    # blocks loaded before step A; with one stage (no pipelined step-A copies) it won on 32-row decode tiles (H200,
    # bench_lora --decode-ab, 2026-12-01 s12b / s12c: decode-bs64 q 9.24 -> 8.85, 8.67 -> 8.36 us) and lost
    # on 64-row ones (decode-bs256 17.22 -> 17.83, 16.44 -> 18.01), which WIDE (the overrides of WIDE_BT
    # tiles) turns back off.
    # WIDE_BT: the tile height of token-major batches with at least that many rows per slot (plan()): tiles
    # as tall as a slot's rows.  H200, bench_lora --decode-ab, 2026-12-01 s10d, flat grid, fused q: decode-bs256
    # (64 rows per slot) BT=64 20.58 us against BT=32 24.04; decode-bs64 (16 per slot) BT=64 11.88, BT=32 10.12
    # C_SPLIT: kv_lora_rank columns per program (None: all of them, step A computed once per tile)
    # PREFETCH: the first base and weight blocks are loaded before step A (token-major winners of
    # bench_lora --decode-ab, 2026-11-30 21:00-21:25 UTC, three rounds, docs/benchmarks/lora.md)
    # HEADS_FIRST: programs renumbered so that consecutive ones take one row tile's heads (H200, bench_lora
    # --prefill-ab / --decode-ab, 2026-12-01 s11c): prefill-8x2048 q (BT=64, 8 warps) 660.4 -> 640.2 us, v
    # 401.6 -> 387.9; decode-bs256 q 17.34 -> 16.96, v 12.84 -> 12.28; decode-bs64 within 1%.  With 32-row
    # tiles it cost the q side 668 -> 682 us, so the q side's segment-major tiles are 64 rows (8 warps), and
    # step A runs in 64-column blocks of qk_nope (s11f, two rounds: 641.8 / 641.6 -> 618.6 / 618.9 us, 91% of
    # copy; BLOCK_C=256 962, 4 warps 653, BT=128 663, num_stages=2 623.3).
    # PDL (Note [Programmatic dependent launch] in kernels.lora._kernels; sm_90+ only) and META_FIRST (Note
    # [Slot metadata first]): H200, bench_lora --decode-ab round 14, 2026-12-01 s14a / s14d, us: decode-bs64 q
    # 7.99 / 7.88 -> META_FIRST 7.83 / 7.71 -> both 6.94; v 7.55 / 7.48 -> 7.41 / 7.34 -> 6.68; decode-bs256 q
    # 16.34 -> 15.46, v 12.28 -> 11.47 (s14d).
    "q_side_fused": {"seg": dict(BT=64, BLOCK_K=64, BLOCK_C=128, C_SPLIT=None, num_warps=8, HEADS_FIRST=True,
                                 PDL=True),
                     "tok": dict(BT=32, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=4, PREFETCH=True,
                                 HEADS_FIRST=True, PREFETCH_ALL=True, num_stages=1, WIDE_BT=64,
                                 WIDE=dict(PREFETCH_ALL=False, num_stages=DEFAULT_STAGES), META_FIRST=True, PDL=True,
                                 EARLY_BLOCKS=dict(BT=16))},
    "v_side_fused": {"seg": dict(BT=64, BLOCK_K=64, BLOCK_V=128, num_warps=4, HEADS_FIRST=True, PDL=True),
                     "tok": dict(BT=64, BLOCK_K=128, BLOCK_V=128, num_warps=4, PREFETCH=True, HEADS_FIRST=True,
                                 META_FIRST=True, PDL=True, EARLY_BLOCKS={})},
}

# a segment-major launch is replaced by the token-major one when its tiles hold more than this many
# times the input's rows (i.e. when more than half of the tile rows would idle)
TOKEN_MAJOR_WASTE = 2
# token-major launches over at most 256 segments find a row's segment by one vectorized compare against
# all segment ends (one load); more segments use a binary search (log2(n) dependent loads).  The
# compare's width is the smallest bucket holding every launched segment (Note [Specialization] in
# kernels.lora._kernels), and the (token rows x segments) tile in registers is capped too.
SEG_TILE_BUCKETS = (64, 256)
SEG_TILE_ELEMS_MAX = 16384
# "seg" or "tok" forces a path for every call (tests and benchmarks); None lets plan() choose
FORCE_PATH: Optional[str] = None
# token-major launches with a compare tile (SEG_TILE > 0) take each slot's rows in segment order
# (Note [Slot-sorted tiles] in kernels.lora._kernels) instead of consecutive logical rows
SLOT_SORTED = True
# slot-sorted launches over at most FLAT_SLOTS_MAX slots use the flat grid (Note [Flat slot grid]): only
# ceil(S/BT) + L - 1 tiles in all instead of ceil(S/BT) per slot; the kernel counts every slot's rows in
# a (SEG_TILE x NSLOT) tile, NSLOT = slot_block(L).  False launches the slot-sorted grid (A/B, tests)
FLAT_SLOTS = True
FLAT_SLOTS_MIN_BLOCK = 8
FLAT_SLOTS_MAX = 32
# ... when the slot-sorted grid would launch at least this many times the flat grid's programs: each flat
# program also counts every slot's rows, which costs more than it saves when few programs go.  Measured
# on the H200 (bench_lora --decode-ab, do_bench_cudagraph), tiles per head sorted -> flat: 2026-12-01 s10c,
# before Note [Row search]: decode-bs64 v 4 -> 4: 7.71 -> 8.52 us, q 8 -> 5: 10.13 -> 10.42 us;
# decode-bs256 v 16 -> 7: 18.37 -> 15.81 us, q 32 -> 11: 24.46 -> 23.98 us.  With the cheaper route (s11d,
# s11e): decode-bs64 q 8 -> 5 (1.6x): 9.86 -> 9.06 and 10.07 -> 9.27 us (the per-slot grid of 512 programs
# at 3 per SM takes 1.29 waves); v 4 -> 4: 7.47 -> 8.20, 7.55 -> 8.25 (flat loses).  So 1.5 then.  With the
# whole-row prefetch on one stage (Note [Whole-row prefetch], session 12, s12d) the per-slot grid won decode-bs64 q
# back: flat 8.38 / 8.47 us, per-slot 7.88 / 7.96 (two runs); bs256 (2.3x) still flat: q 16.46 against 17.08,
# v 12.26 against 12.60.  So 2 again; 0: flat wherever allowed (tests)
FLAT_SLOTS_MIN_SAVING = 2

# Note [Early reads] in kernels.lora._kernels: the fused token-major launches read the route's metadata, the
# slot's rank and scaling and their first weight blocks before the grid-dependency wait, which is right only when
# no kernel still running may write them (metadata and LoRA weights filled before a CUDA graph's replay, as
# SGLang's decode does).  Off unless asked: early_reads(), or KERNEL_ORACLE_LORA_EARLY_READS=1 at import.
EARLY_READS = os.environ.get("KERNEL_ORACLE_LORA_EARLY_READS", "0") == "1"


@contextlib.contextmanager
def early_reads(enabled: bool = True):
    """Launch the fused kernels with (or without) Note [Early reads] inside the block; the caller promises that
    no kernel still running when a call starts writes its metadata (``seg_indptr``, ``weight_indices``,
    ``permutation``, ``lora_ranks``, ``scalings``) or its LoRA weights.  Process-wide; restored after."""
    global EARLY_READS
    saved, EARLY_READS = EARLY_READS, enabled
    try:
        yield
    finally:
        EARLY_READS = saved


def slot_block(num_slots: int) -> int:
    """``NSLOT`` of a flat launch over ``num_slots`` slots: a power of two, at least
    :data:`FLAT_SLOTS_MIN_BLOCK`, so that the usual slot counts (up to 8) share one compiled kernel."""
    return max(FLAT_SLOTS_MIN_BLOCK, triton.next_power_of_2(num_slots))


@dataclass(frozen=True)
class Plan:
    """Launch geometry of one call (host integers only)."""

    token_major: bool
    n_launch: int  # segments the kernel may touch (CUDA-graph mode: the padded count)
    row_tiles: int  # grid axis 0
    tiles_per_seg: int
    search_steps: int  # the binary search's steps (SEG_TILE == 0); a flat grid's slot count (Note [Flat slot grid])
    seg_tile: int  # token-major: >0 finds segments by one vectorized compare over this many ends
    blocks: dict
    slot_block: int = 0  # >0: the flat grid (Note [Flat slot grid]), NSLOT; grid axis 2 has no slot factor


def token_major_blocks(op: str, num_rows: int, num_slots: int) -> dict:
    """``BLOCKS[op]["tok"]`` as launched on ``num_rows`` rows over ``num_slots`` slots: under
    :data:`EARLY_READS` its ``EARLY_BLOCKS`` overrides applied and ``EARLY`` set; then ``BT`` raised to
    ``WIDE_BT``, and the ``WIDE`` overrides applied, where there are at least that many rows per slot (the
    three keys themselves dropped)."""
    blocks = dict(BLOCKS[op]["tok"])
    early_blocks = blocks.pop("EARLY_BLOCKS", None)
    if EARLY_READS and early_blocks is not None:
        blocks.update(early_blocks, EARLY=True)
    wide = blocks.pop("WIDE_BT", None)
    wide_blocks = blocks.pop("WIDE", {})
    if wide and num_slots > 0 and num_rows >= wide * num_slots:
        blocks.update(BT=wide, **wide_blocks)
    return blocks


def plan(op: str, batch_info, num_rows: int, max_len: int, *, num_slots: int = 0,
         force: Optional[str] = None) -> Plan:
    """Pick the path and grid of ``op`` for this batch; ``force`` = "seg" or "tok" overrides.
    ``num_slots``: the weight buffer's slots (``shape[0]``), which a flat grid's bound needs."""
    n = num_segments(batch_info)
    n_launch = n
    if getattr(batch_info, "use_cuda_graph", False):
        # the captured launch covers every padded segment; padding has zero length
        n_launch = max(n, int(batch_info.weight_indices.shape[0]))
    seg_blocks = BLOCKS[op]["seg"]
    tiles_per_seg = triton.cdiv(max(max_len, 0), seg_blocks["BT"])
    seg_rows = n_launch * tiles_per_seg * seg_blocks["BT"]
    force = force or FORCE_PATH
    token_major = seg_rows > TOKEN_MAJOR_WASTE * num_rows if force is None else force == "tok"
    if token_major:
        tok_blocks = token_major_blocks(op, num_rows, num_slots)
        bt = tok_blocks["BT"]
        seg_tile = next((b for b in SEG_TILE_BUCKETS if n_launch <= b and bt * b <= SEG_TILE_ELEMS_MAX), 0)
        tiles = triton.cdiv(num_rows, bt)
        # flat: sum_w ceil(n_w/BT) <= ceil(S/BT) + L - 1 tiles in all (Note [Flat slot grid]), launched when
        # that is at most 1/FLAT_SLOTS_MIN_SAVING of the slot-sorted grid's ceil(S/BT) per slot
        flat = (SLOT_SORTED and FLAT_SLOTS and seg_tile > 0 and 1 <= num_slots <= FLAT_SLOTS_MAX
                and tiles * num_slots >= FLAT_SLOTS_MIN_SAVING * (tiles + num_slots - 1))
        extra = num_slots - 1 if flat else 0
        steps = num_slots if flat else max(n_launch, 1).bit_length() + 1
        return Plan(True, n_launch, tiles + extra, 1, steps, seg_tile, tok_blocks, slot_block(num_slots) if flat else 0)
    return Plan(False, n_launch, n_launch * tiles_per_seg, max(tiles_per_seg, 1), 0, 0, seg_blocks)


# the smallest rank block: buffers of rank up to 32 share one compiled kernel (Note [Specialization]); a
# rank-16 buffer computes 16 masked columns more (the benchmark shapes, R=32, are unaffected)
MIN_BLOCK_R = 32


def _block_r(R: int) -> int:
    return max(MIN_BLOCK_R, triton.next_power_of_2(R))


def _flags(x: torch.Tensor, weights: tuple[torch.Tensor, ...], base: Optional[torch.Tensor]) -> dict:
    """dtype switches (Note [Interpreter workarounds] in kernels.interpreter)."""
    dtypes = [x.dtype] + [w.dtype for w in weights] + ([base.dtype] if base is not None else [])
    upcast = interpreting() or any(w.dtype != x.dtype for w in weights)
    # fp32 activations with fp32 weights: TF32, as upstream's tl.dot; upcast tiles (interpreter, mixed
    # weight dtypes): exact fp32.  fp16/bf16 tiles ignore the setting.
    prec = "ieee" if upcast else ("tf32" if x.dtype == torch.float32 else None)
    return dict(UPCAST=upcast, DOT_PREC=prec, FIX_BF16=needs_bf16_fix(*dtypes))


def _axis2(p: Plan, num_slots: int, n_cblocks: int) -> int:
    """Grid axis 2: output blocks, times the slots in token-major mode (one slot per program) unless
    the grid is flat (each program finds its slot from its axis-0 index)."""
    return n_cblocks * (num_slots if p.token_major and not p.slot_block else 1)


def _meta(batch_info, p: Plan, num_rows: int, n_cblocks: int = 1):
    perm = batch_info.permutation
    return dict(seg_indptr=batch_info.seg_indptr, weight_indices=batch_info.weight_indices,
                lora_ranks=batch_info.lora_ranks, perm=(perm if perm is not None else batch_info.seg_indptr),
                n_launch=p.n_launch, tiles_per_seg=p.tiles_per_seg, num_rows=num_rows,
                search_steps=p.search_steps, n_cblocks=n_cblocks, TOKEN_MAJOR=p.token_major,
                HAS_PERM=perm is not None, SEG_TILE=p.seg_tile,
                SORTED=bool(SLOT_SORTED and p.token_major and p.seg_tile > 0), FLAT=p.slot_block > 0,
                NSLOT=p.slot_block or FLAT_SLOTS_MIN_BLOCK)


# the keys of a BLOCKS entry that configure the launch, not the kernel's blocks (which the shared-memory fit
# sizes): warps, the requested pipelining stages, Note [Programmatic dependent launch], Note [Early reads]
LAUNCH_KEYS = ("num_warps", "num_stages", "PDL", "EARLY")


def kernel_blocks(blocks: dict) -> dict:
    """``blocks`` without :data:`LAUNCH_KEYS`: what :func:`_launch` fits and passes as the kernel's blocks."""
    return {k: v for k, v in blocks.items() if k not in LAUNCH_KEYS}


def _nothing_to_do(p: Plan, num_rows: int) -> bool:
    return p.n_launch == 0 or p.row_tiles == 0 or num_rows == 0


# (op, path, dtypes, BLOCK_R, device, requested blocks, ALIGN) -> (blocks, num_warps, num_stages) that compiled
# and launched.
# ALIGN is part of the key: an aligned launch pipelines its loads through shared memory (cp.async) where
# the generic one cannot, so a configuration that fits the generic kernel may not fit the aligned one.
_FITTED: dict = {}


def _launch(op: str, p: Plan, x: torch.Tensor, weights: tuple[torch.Tensor, ...], block_r: int, launch, *,
            align: int = 1) -> None:
    """Run ``launch(blocks, num_warps, num_stages)`` with a configuration that fits the device's shared
    memory (Note [Shared memory] in :mod:`kernels.lora._smem`): the benchmark winners when they fit,
    else the first smaller one the estimate admits; a launch that still runs out of shared memory
    steps further down the ladder (no valid input ever raises ``OutOfResources``)."""
    blocks, warps = kernel_blocks(p.blocks), p.blocks["num_warps"]
    first_stages = p.blocks.get("num_stages", DEFAULT_STAGES)
    pdl = _pdl_options(p.blocks.get("PDL", False), x.device, early=p.blocks.get("EARLY", False))
    limit = smem_limit(x.device)
    if limit is None:  # the interpreter: no shared memory, Triton's stage setting is ignored
        launch(blocks, warps, None)
        return
    # the requested blocks are part of the key: the benchmark's sweeps change BLOCKS between launches
    key = (op, p.token_major, x.dtype, tuple(w.dtype for w in weights), block_r, str(x.device),
           tuple(sorted(p.blocks.items())), align)
    if key in _FITTED:
        cfg, warps, stages = _FITTED[key]
        try:
            launch({**cfg, **pdl}, warps, stages)
            return
        except OutOfResources:  # a specialization that needs more than the one that fitted: fit again
            del _FITTED[key]
    transformed = x.dtype == torch.float32 or any(w.dtype != x.dtype for w in weights)
    elem = max(t.element_size() for t in (x, *weights))
    start, stages = fit_config(op, blocks, block_r=block_r, elem_bytes=elem, transformed=transformed, limit=limit,
                               num_stages=first_stages)
    error: Optional[Exception] = None
    for cfg, st in ladder(start, stages):
        try:
            launch({**cfg, **pdl}, warps, st)
        except OutOfResources as exc:
            error = exc
            continue
        _FITTED[key] = (cfg, warps, st)
        return
    raise error  # type: ignore[misc]


# the alignment (in elements) that strides and sizes must share for an aligned launch: 16 bytes of fp16/bf16
ALIGN = 8


def _layout(dims: dict, inner: dict, tensors: tuple = (), **strides: int) -> dict:
    """Sizes, row and slot strides divided by ``ALIGN``, innermost strides as they are, and ``ALIGN``
    itself: :data:`ALIGN` when every innermost stride is 1, every size and stride is a multiple of it
    and every data pointer (``tensors``) is 16-byte aligned, else 1 (Note [Specialization] in
    :mod:`kernels.lora._kernels`)."""
    align = ALIGN
    if any(v != 1 for v in inner.values()) or any(v % ALIGN for v in (*dims.values(), *strides.values())) \
            or any(t.data_ptr() % 16 for t in tensors):
        align = 1
    return {**{k: v // align for k, v in {**dims, **strides}.items()}, **inner, "ALIGN": align}


def _family(kernel, lay: dict):
    """The compiled family of ``kernel`` for this layout: aligned, or its generic twin."""
    return kernel if lay["ALIGN"] > 1 else kernel.generic


def _stages(num_stages: Optional[int]) -> dict:
    return {} if num_stages is None else {"num_stages": num_stages}


def _pdl_options(requested: bool, device: torch.device, early: bool = False) -> dict:
    """The kernel and launch options of Note [Programmatic dependent launch] in :mod:`kernels.lora._kernels`:
    on a CUDA device of compute capability 9.0 or newer when ``requested`` (a ``BLOCKS`` entry), else none
    (the interpreter cannot run the grid-dependency instructions, and older GPUs lack them); with ``early``
    (Note [Early reads]) also the kernel's ``EARLY``, which only means something under PDL."""
    if not requested or device.type != "cuda":
        return {}
    if not _has_pdl(device.index if device.index is not None else torch.cuda.current_device()):
        return {}
    return PDL_EARLY_OPTIONS if early else PDL_OPTIONS


@functools.lru_cache(maxsize=None)
def _has_pdl(index: int) -> bool:
    """Whether CUDA device ``index`` has grid-dependency control (compute capability 9.0 or newer); read once
    per device (every fused launch asks)."""
    return torch.cuda.get_device_capability(index)[0] >= 9


# the kernel's constexpr and Triton's launch option (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
PDL_OPTIONS = dict(PDL=True, launch_pdl=True)
# ... and under Note [Early reads] (built once: every early launch asks)
PDL_EARLY_OPTIONS = dict(PDL_OPTIONS, EARLY=True)


# ---- entry points (SGLang signatures) ------------------------------------------------------------

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, *, strict=None):
    """(S,H,qk) @ K-half of B_buf -> fresh (S,H,R) in q_nope's dtype; undefined outside routed rows
    and rank columns (``torch.empty``)."""
    max_len = validate_call("step_a_q", q_nope, B_buf, batch_info, full_K_per_head, strict=strict)
    S, H, QK = q_nope.shape
    R = B_buf.shape[2]
    out = torch.empty((S, H, R), dtype=q_nope.dtype, device=q_nope.device)
    p = plan("step_a_q", batch_info, S, max_len, num_slots=B_buf.shape[0])
    if _nothing_to_do(p, S):
        return out

    lay = _layout(dict(QK=QK), dict(sx_d=q_nope.stride(2), sb_r=B_buf.stride(2), so_r=out.stride(2)),
                  (q_nope, B_buf, out),
                  sx_t=q_nope.stride(0), sx_h=q_nope.stride(1), sb_l=B_buf.stride(0), sb_row=B_buf.stride(1),
                  so_t=out.stride(0), so_h=out.stride(1))

    def launch(blocks, warps, stages):
        _family(K.step_a_q_kernel, lay)[(p.row_tiles, H, _axis2(p, B_buf.shape[0], 1))](
            q_nope, B_buf, out, **_meta(batch_info, p, S), FULL_K=full_K_per_head, R=R,
            **lay,
            BLOCK_R=_block_r(R), **_flags(q_nope, (B_buf,), None), **blocks, num_warps=warps, **_stages(stages))

    _launch("step_a_q", p, q_nope, (B_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return out


def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output, *, strict=None):
    """``base_output[t,h,:] += s * (q_lora_a[t,h,:r] @ A_buf[w,:r,:])`` in place; returns base_output."""
    max_len = validate_call("step_b_q", q_lora_a, A_buf, batch_info, base_output, strict=strict)
    S, H, _ = q_lora_a.shape
    R, C = A_buf.shape[1], A_buf.shape[2]
    p = plan("step_b_q", batch_info, S, max_len, num_slots=A_buf.shape[0])
    if _nothing_to_do(p, S):
        return base_output

    lay = _layout(dict(C=C), dict(sx_r=q_lora_a.stride(2), sa_c=A_buf.stride(2), sy_c=base_output.stride(2)),
                  (q_lora_a, A_buf, base_output),
                  sx_t=q_lora_a.stride(0), sx_h=q_lora_a.stride(1), sa_l=A_buf.stride(0), sa_r=A_buf.stride(1),
                  sy_t=base_output.stride(0), sy_h=base_output.stride(1))

    def launch(blocks, warps, stages):
        ncb = triton.cdiv(C, blocks["BLOCK_C"])
        grid = (p.row_tiles, triton.cdiv(H, blocks["BH"]), _axis2(p, A_buf.shape[0], ncb))
        _family(K.step_b_q_kernel, lay)[grid](
            q_lora_a, A_buf, base_output, **_meta(batch_info, p, S, ncb), scalings=batch_info.scalings, H=H, R=R,
            **lay,
            BLOCK_R=_block_r(R), **_flags(q_lora_a, (A_buf,), base_output), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("step_b_q", p, q_lora_a, (A_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return base_output


def step_a_v_fwd(attn_output, A_buf, batch_info, *, strict=None):
    """(S,H,C) @ A_buf[w,:r,:].T -> fresh (S,H,R) in attn_output's dtype."""
    max_len = validate_call("step_a_v", attn_output, A_buf, batch_info, strict=strict)
    S, H, C = attn_output.shape
    R = A_buf.shape[1]
    out = torch.empty((S, H, R), dtype=attn_output.dtype, device=attn_output.device)
    p = plan("step_a_v", batch_info, S, max_len, num_slots=A_buf.shape[0])
    if _nothing_to_do(p, S):
        return out

    lay = _layout(dict(C=C), dict(sx_c=attn_output.stride(2), sa_c=A_buf.stride(2), so_r=out.stride(2)),
                  (attn_output, A_buf, out),
                  sx_t=attn_output.stride(0), sx_h=attn_output.stride(1), sa_l=A_buf.stride(0),
                  sa_r=A_buf.stride(1), so_t=out.stride(0), so_h=out.stride(1))

    def launch(blocks, warps, stages):
        _family(K.step_a_v_kernel, lay)[(p.row_tiles, triton.cdiv(H, blocks["BH"]), _axis2(p, A_buf.shape[0], 1))](
            attn_output, A_buf, out, **_meta(batch_info, p, S), H=H, R=R,
            **lay,
            BLOCK_R=_block_r(R), **_flags(attn_output, (A_buf,), None), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("step_a_v", p, attn_output, (A_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return out


def step_b_v_fwd(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *, strict=None):
    """``base_output[t,h,:] += s * (attn_lora_a[t,h,:r] @ V-half of B_buf[w].T)`` in place."""
    max_len = validate_call("step_b_v", attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim,
                            v_head_dim, strict=strict)
    S, H, _ = attn_lora_a.shape
    R = B_buf.shape[2]
    p = plan("step_b_v", batch_info, S, max_len, num_slots=B_buf.shape[0])
    if _nothing_to_do(p, S):
        return base_output

    lay = _layout(dict(QK=qk_nope_head_dim, VD=v_head_dim),
                  dict(sx_r=attn_lora_a.stride(2), sb_r=B_buf.stride(2), sy_v=base_output.stride(2)),
                  (attn_lora_a, B_buf, base_output),
                  sx_t=attn_lora_a.stride(0), sx_h=attn_lora_a.stride(1), sb_l=B_buf.stride(0),
                  sb_row=B_buf.stride(1), sy_t=base_output.stride(0), sy_h=base_output.stride(1))

    def launch(blocks, warps, stages):
        ncb = triton.cdiv(v_head_dim, blocks["BLOCK_V"])
        grid = (p.row_tiles, H, _axis2(p, B_buf.shape[0], ncb))
        _family(K.step_b_v_kernel, lay)[grid](
            attn_lora_a, B_buf, base_output, **_meta(batch_info, p, S, ncb), scalings=batch_info.scalings,
            FULL_K=qk_nope_head_dim + v_head_dim, R=R,
            **lay,
            BLOCK_R=_block_r(R), **_flags(attn_lora_a, (B_buf,), base_output), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("step_b_v", p, attn_lora_a, (B_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return base_output


def q_side_fused_fwd(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head, *, strict=None):
    """Step A_q then B_q in one kernel, into ``base_output`` (S,H,C) in place; the scaled delta is
    rounded to base_output's dtype."""
    max_len = validate_call("q_side_fused", q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head,
                            strict=strict)
    S, H, QK = q_nope.shape
    R, C = B_buf.shape[2], A_buf.shape[2]
    p = plan("q_side_fused", batch_info, S, max_len, num_slots=B_buf.shape[0])
    if _nothing_to_do(p, S):
        return base_output

    lay = _layout(dict(QK=QK, C=C, R=R),  # R too: Note [Rank-wide loads] in kernels.lora._kernels
                  dict(sx_d=q_nope.stride(2), sb_r=B_buf.stride(2), sa_c=A_buf.stride(2), sy_c=base_output.stride(2)),
                  (q_nope, B_buf, A_buf, base_output),
                  sx_t=q_nope.stride(0), sx_h=q_nope.stride(1), sb_l=B_buf.stride(0), sb_row=B_buf.stride(1),
                  sa_l=A_buf.stride(0), sa_r=A_buf.stride(1), sy_t=base_output.stride(0),
                  sy_h=base_output.stride(1))

    def launch(blocks, warps, stages):
        c_blocks = triton.cdiv(blocks.pop("C_SPLIT") or C, blocks["BLOCK_C"])  # BLOCK_C-column blocks per program
        ncb = triton.cdiv(C, c_blocks * blocks["BLOCK_C"])
        _family(K.q_side_fused_kernel, lay)[(p.row_tiles, H, _axis2(p, B_buf.shape[0], ncb))](
            q_nope, B_buf, A_buf, base_output, **_meta(batch_info, p, S, ncb), scalings=batch_info.scalings,
            FULL_K=full_K_per_head, C_BLOCKS=c_blocks,
            **lay,
            BLOCK_R=_block_r(R), **_flags(q_nope, (B_buf, A_buf), base_output), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("q_side_fused", p, q_nope, (B_buf, A_buf), _block_r(R), launch, align=lay["ALIGN"])
    return base_output


def v_side_fused_fwd(attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                     strict=None):
    """Step A_v then B_v in one kernel, into ``base_output`` (S,H,vd) in place; the scaled delta is
    rounded to base_output's dtype."""
    max_len = validate_call("v_side_fused", attn_output, A_buf, B_buf, batch_info, base_output,
                            qk_nope_head_dim, v_head_dim, strict=strict)
    S, H, C = attn_output.shape
    R = B_buf.shape[2]
    p = plan("v_side_fused", batch_info, S, max_len, num_slots=B_buf.shape[0])
    if _nothing_to_do(p, S):
        return base_output

    lay = _layout(dict(QK=qk_nope_head_dim, VD=v_head_dim, C=C),
                  dict(sx_c=attn_output.stride(2), sa_c=A_buf.stride(2), sb_r=B_buf.stride(2), sy_v=base_output.stride(2)),
                  (attn_output, A_buf, B_buf, base_output),
                  sx_t=attn_output.stride(0), sx_h=attn_output.stride(1), sa_l=A_buf.stride(0),
                  sa_r=A_buf.stride(1), sb_l=B_buf.stride(0), sb_row=B_buf.stride(1), sy_t=base_output.stride(0),
                  sy_h=base_output.stride(1))

    def launch(blocks, warps, stages):
        _family(K.v_side_fused_kernel, lay)[(p.row_tiles, H, _axis2(p, B_buf.shape[0], 1))](
            attn_output, A_buf, B_buf, base_output, **_meta(batch_info, p, S), scalings=batch_info.scalings,
            FULL_K=qk_nope_head_dim + v_head_dim, R=R,
            **lay,
            BLOCK_R=_block_r(R), **_flags(attn_output, (A_buf, B_buf), base_output), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("v_side_fused", p, attn_output, (A_buf, B_buf), _block_r(R), launch, align=lay["ALIGN"])
    return base_output
