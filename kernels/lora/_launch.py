"""Wrappers of the kv_b LoRA kernels: validation, path choice, block sizes, launch.

The six entry points keep SGLang's signatures and share one launcher, :func:`_run`: a row of
:data:`LAUNCHES` per kernel says where its operands are among the call's arguments, their stride
parameters, its sizes, rank and slot count, and its grid; the rest (validation, plan, layout family,
shared-memory fit, launch options) is the same for all six.

Note [No host synchronisation]
------------------------------
Every check runs through :func:`reference.lora.validate_call` (the same code as the reference):
the upstream contract first (missing ``max_len``/``seg_lens``), then, when strict, the shape and
metadata checks (which read the metadata on the host).  With ``strict=False`` a call reads nothing
from the device beyond what upstream reads (``seg_lens.max()`` only when ``max_len`` is None), so
it can be captured in a CUDA graph: the grid and the path depend only on host integers
(``max_len``, segment counts, tensor shapes); segment bounds, slots, ranks and scalings are read
by the kernels themselves.

The path, grid and blocks of a call come from :func:`kernels.lora._plan.plan` (Note [Path choice] there),
under the LoRA options in force (:class:`kernels.options.LoRAOptions`), read once per call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Optional

import torch
import triton

from kernel_oracle.kernels.options import current_options
from kernel_oracle.reference.lora import validate_call

from ..interpreter import interpreting, needs_bf16_fix
from . import _kernels as K
from ._plan import BLOCKS, FLAT_SLOTS_MAX, FLAT_SLOTS_MIN_BLOCK, Plan, plan, slot_block, token_major_blocks
from ._smem import DEFAULT_STAGES, fit_config, ladder, smem_limit

try:  # where Triton reports a launch that needs more shared memory than the device has
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - older layouts
    from triton.runtime.autotuner import OutOfResources  # type: ignore[no-redef]

__all__ = ["BLOCKS", "FLAT_SLOTS_MAX", "FLAT_SLOTS_MIN_BLOCK", "PRECISION", "Plan", "fitted", "forget_fitted", "plan",
           "q_side_fused_fwd", "slot_block", "step_a_q_fwd", "step_a_v_fwd", "step_b_q_fwd", "step_b_v_fwd",
           "token_major_blocks", "v_side_fused_fwd"]

# fp32 activations (fp32 weights) on a GPU: operands rounded to TF32 to nearest in registers, then tl.dot in
# TF32 (the tensor cores' truncation leaves them unchanged), fp32 accumulation: the oracle's "tf32-rne"
# model, declared "tf32" by the triton target (fuzz/targets/triton.py).  Under the interpreter, or with
# weights of another dtype, tiles are upcast and tl.dot is exact fp32 (unless LoRAOptions.fp32_dot="tf32").
# fp16/bf16: tensor-core products, fp32 accumulation.
PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "tf32"}


# the smallest rank block: buffers of rank up to 32 share one compiled kernel (Note [Specialization]); a
# rank-16 buffer computes 16 masked columns more (the benchmark shapes, R=32, are unaffected)
MIN_BLOCK_R = 32


def _block_r(R: int) -> int:
    return max(MIN_BLOCK_R, triton.next_power_of_2(R))


def _flags(x: torch.Tensor, weights: tuple[torch.Tensor, ...], base: Optional[torch.Tensor],
           fp32_dot: str = "auto") -> dict:
    """dtype switches (Note [Interpreter workarounds] in kernels.interpreter) and the dot's precision
    (``LoRAOptions.fp32_dot``)."""
    dtypes = [x.dtype] + [w.dtype for w in weights] + ([base.dtype] if base is not None else [])
    upcast = interpreting() or any(w.dtype != x.dtype for w in weights)
    # fp32 activations with fp32 weights: TF32, as upstream's tl.dot; upcast tiles (interpreter, mixed
    # weight dtypes): exact fp32, or TF32 on request (fp32_dot="tf32": the tensor cores emulated).  fp16/bf16
    # tiles ignore the setting.
    fp32_tiles = upcast or x.dtype == torch.float32
    if fp32_dot == "tf32" and fp32_tiles:
        prec = "tf32"
    else:
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
                SORTED=p.sorted_rows, FLAT=p.slot_block > 0,
                NSLOT=p.slot_block or FLAT_SLOTS_MIN_BLOCK)


# the keys of a BLOCKS entry that configure the launch, not the kernel's blocks (which the shared-memory fit
# sizes): warps, the requested pipelining stages, Note [Programmatic dependent launch], Note [Early reads]
LAUNCH_KEYS = ("num_warps", "num_stages", "PDL", "EARLY")


def kernel_blocks(blocks: dict) -> dict:
    """``blocks`` without :data:`LAUNCH_KEYS`: what :func:`_launch` fits and passes as the kernel's blocks."""
    return {k: v for k, v in blocks.items() if k not in LAUNCH_KEYS}


def _nothing_to_do(p: Plan, num_rows: int) -> bool:
    return p.n_launch == 0 or p.row_tiles == 0 or num_rows == 0


# (op, path, dtypes, BLOCK_R, device, requested blocks, slot-sorted rows, flat grid, ALIGN) -> (blocks, num_warps,
# num_stages) that compiled and launched.  What the options change about a launch is part of the key (the
# requested blocks, the route's kind), so a configuration fitted for one choice is never launched for another.
# ALIGN is part of the key: an aligned launch pipelines its loads through shared memory (cp.async) where
# the generic one cannot, so a configuration that fits the generic kernel may not fit the aligned one.
_FITTED: dict = {}


def fitted() -> dict:
    """A copy of the configurations fitted so far (key as above -> (blocks, num_warps, num_stages))."""
    return dict(_FITTED)


def forget_fitted() -> None:
    """Fit every configuration afresh from now on (a caller that changes what a device offers)."""
    _FITTED.clear()


def _launch(op: str, p: Plan, x: torch.Tensor, weights: tuple[torch.Tensor, ...], block_r: int, launch, *,
            align: int = 1, smem="device") -> None:
    """Run ``launch(blocks, num_warps, num_stages)`` with a configuration that fits the shared memory
    (Note [Shared memory] in :mod:`kernels.lora._smem`; ``smem``: bytes per block, ``"device"`` the launch
    device's): the benchmark winners when they fit, else the first smaller one the estimate admits; a launch
    that still runs out of shared memory steps further down the ladder (no valid input ever raises
    ``OutOfResources``)."""
    blocks, warps = kernel_blocks(p.blocks), p.blocks["num_warps"]
    first_stages = p.blocks.get("num_stages", DEFAULT_STAGES)
    pdl = _pdl_options(p.blocks.get("PDL", False), x.device, early=p.blocks.get("EARLY", False))
    limit = smem_limit(x.device) if smem == "device" else smem
    if limit is None:  # the interpreter: no shared memory, Triton's stage setting is ignored
        launch(blocks, warps, None)
        return
    key = (op, p.token_major, x.dtype, tuple(w.dtype for w in weights), block_r, str(x.device),
           tuple(sorted(p.blocks.items())), p.sorted_rows, p.slot_block, align)
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


# ---- one launcher for the six entry points ------------------------------------------------------

@dataclass(frozen=True)
class LaunchRow:
    """How an entry point launches ``<op>_kernel`` (a row of :data:`LAUNCHES`).

    Every entry point takes ``(x, *weights, batch_info[, base_output], *ints)``; the kernel's data pointers
    are ``x``, the weights and the output (the fresh ``(S, H, R)`` step-A output or ``base_output``) in
    that order, each with its three stride parameters (``strides``, innermost last).  ``rank``: the
    ``(weight, axis)`` holding the buffer rank ``R``; that weight's ``shape[0]`` is the slot count.
    ``sizes(call)``: the sizes passed divided by ``ALIGN`` (read before the plan, as every shape is);
    ``extra(call)``: the other integer arguments.  Grid ``(row tiles, heads, _axis2)``: ``head_block``, a
    program takes ``BH`` heads (``A`` is shared by all heads); ``out_blocks(call, blocks)``: the output
    blocks of grid axis 2 and the kernel arguments that go with them."""

    weights: int
    in_place: bool
    strides: tuple[str, ...]
    rank: tuple[int, int]
    sizes: Callable[[SimpleNamespace], dict]
    extra: Callable[[SimpleNamespace], dict]
    head_block: bool = False
    out_blocks: Callable[[SimpleNamespace, dict], tuple[int, dict]] = lambda call, blocks: (1, {})


def _column_blocks(size: str, block: str):
    """Output blocks of ``block`` columns over the size ``size``, one per program (grid axis 2)."""
    return lambda call, blocks: (triton.cdiv(call.sizes[size], blocks[block]), {})


def _q_side_blocks(call, blocks: dict) -> tuple[int, dict]:
    """The fused q side's output blocks: ``C_BLOCKS`` blocks of ``BLOCK_C`` columns per program, all of C
    unless the entry splits it (``C_SPLIT``, taken out of the blocks)."""
    C = call.sizes["C"]
    c_blocks = triton.cdiv(blocks.pop("C_SPLIT", None) or C, blocks["BLOCK_C"])
    return triton.cdiv(C, c_blocks * blocks["BLOCK_C"]), dict(C_BLOCKS=c_blocks)


LAUNCHES = {
    "step_a_q": LaunchRow(1, False, ("sx_t sx_h sx_d", "sb_l sb_row sb_r", "so_t so_h so_r"), (0, 2),
                          lambda c: dict(QK=c.x.shape[2]), lambda c: dict(FULL_K=c.ints[0], R=c.R)),
    "step_b_q": LaunchRow(1, True, ("sx_t sx_h sx_r", "sa_l sa_r sa_c", "sy_t sy_h sy_c"), (0, 1),
                          lambda c: dict(C=c.weights[0].shape[2]), lambda c: dict(H=c.H, R=c.R), True,
                          _column_blocks("C", "BLOCK_C")),
    "step_a_v": LaunchRow(1, False, ("sx_t sx_h sx_c", "sa_l sa_r sa_c", "so_t so_h so_r"), (0, 1),
                          lambda c: dict(C=c.x.shape[2]), lambda c: dict(H=c.H, R=c.R), True),
    "step_b_v": LaunchRow(1, True, ("sx_t sx_h sx_r", "sb_l sb_row sb_r", "sy_t sy_h sy_v"), (0, 2),
                          lambda c: dict(QK=c.ints[0], VD=c.ints[1]),
                          lambda c: dict(FULL_K=c.ints[0] + c.ints[1], R=c.R), False,
                          _column_blocks("VD", "BLOCK_V")),
    # R among the sizes: Note [Rank-wide loads] in kernels.lora._kernels
    "q_side_fused": LaunchRow(2, True, ("sx_t sx_h sx_d", "sb_l sb_row sb_r", "sa_l sa_r sa_c", "sy_t sy_h sy_c"),
                              (0, 2), lambda c: dict(QK=c.x.shape[2], C=c.weights[1].shape[2], R=c.R),
                              lambda c: dict(FULL_K=c.ints[0]), False, _q_side_blocks),
    "v_side_fused": LaunchRow(2, True, ("sx_t sx_h sx_c", "sa_l sa_r sa_c", "sb_l sb_row sb_r", "sy_t sy_h sy_v"),
                              (1, 2), lambda c: dict(QK=c.ints[0], VD=c.ints[1], C=c.x.shape[2]),
                              lambda c: dict(FULL_K=c.ints[0] + c.ints[1], R=c.R)),
}


def _run(op: str, args: tuple, strict):
    """Validate, plan and launch ``op`` on its entry point's arguments ``args`` (:data:`LAUNCHES`); returns
    the step-A output or ``base_output``."""
    max_len = validate_call(op, *args, strict=strict)
    row = LAUNCHES[op]
    x, weights, batch_info = args[0], args[1:1 + row.weights], args[1 + row.weights]
    S, H, _ = x.shape
    R = weights[row.rank[0]].shape[row.rank[1]]
    call = SimpleNamespace(x=x, weights=weights, ints=args[2 + row.weights + row.in_place:], H=H, R=R)
    call.sizes = row.sizes(call)
    out = args[2 + row.weights] if row.in_place else torch.empty((S, H, R), dtype=x.dtype, device=x.device)
    lora = current_options().lora
    slots = weights[row.rank[0]].shape[0]
    p = plan(op, batch_info, S, max_len, num_slots=slots, options=lora)
    if _nothing_to_do(p, S):
        return out

    operands = (x, *weights, out)
    names = [s.split() for s in row.strides]
    lay = _layout(call.sizes, {n[2]: t.stride(2) for n, t in zip(names, operands)}, operands,
                  **{name: t.stride(axis) for n, t in zip(names, operands) for axis, name in enumerate(n[:2])})
    block_r = _block_r(R)
    flags = _flags(x, weights, out if row.in_place else None, lora.fp32_dot)
    scalings = dict(scalings=batch_info.scalings) if row.in_place else {}

    def launch(blocks, warps, stages):
        n_out, more = row.out_blocks(call, blocks)
        heads = triton.cdiv(H, blocks["BH"]) if row.head_block else H
        _family(getattr(K, f"{op}_kernel"), lay)[(p.row_tiles, heads, _axis2(p, slots, n_out))](
            *operands, **_meta(batch_info, p, S, n_out), **scalings, **row.extra(call), **more, **lay,
            BLOCK_R=block_r, **flags, **blocks, num_warps=warps, **_stages(stages))

    _launch(op, p, x, weights, block_r, launch, align=lay["ALIGN"])
    return out


# ---- entry points (SGLang signatures) ------------------------------------------------------------

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, *, strict=None):
    """(S,H,qk) @ K-half of B_buf -> fresh (S,H,R) in q_nope's dtype; undefined outside routed rows
    and rank columns (``torch.empty``)."""
    return _run("step_a_q", (q_nope, B_buf, batch_info, full_K_per_head), strict)


def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output, *, strict=None):
    """``base_output[t,h,:] += s * (q_lora_a[t,h,:r] @ A_buf[w,:r,:])`` in place; returns base_output."""
    return _run("step_b_q", (q_lora_a, A_buf, batch_info, base_output), strict)


def step_a_v_fwd(attn_output, A_buf, batch_info, *, strict=None):
    """(S,H,C) @ A_buf[w,:r,:].T -> fresh (S,H,R) in attn_output's dtype."""
    return _run("step_a_v", (attn_output, A_buf, batch_info), strict)


def step_b_v_fwd(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *, strict=None):
    """``base_output[t,h,:] += s * (attn_lora_a[t,h,:r] @ V-half of B_buf[w].T)`` in place."""
    return _run("step_b_v", (attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim), strict)


def q_side_fused_fwd(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head, *, strict=None):
    """Step A_q then B_q in one kernel, into ``base_output`` (S,H,C) in place; the scaled delta is
    rounded to base_output's dtype."""
    return _run("q_side_fused", (q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head), strict)


def v_side_fused_fwd(attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *,
                     strict=None):
    """Step A_v then B_v in one kernel, into ``base_output`` (S,H,vd) in place; the scaled delta is
    rounded to base_output's dtype."""
    return _run("v_side_fused", (attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim),
                strict)
