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

The path, grid and blocks of a call come from :func:`kernels.lora._plan.plan` (Note [Path choice] there),
under the LoRA options in force (:class:`kernels.options.LoRAOptions`), read once per call.
"""

from __future__ import annotations

import functools
from typing import Optional

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


# ---- entry points (SGLang signatures) ------------------------------------------------------------

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head, *, strict=None):
    """(S,H,qk) @ K-half of B_buf -> fresh (S,H,R) in q_nope's dtype; undefined outside routed rows
    and rank columns (``torch.empty``)."""
    max_len = validate_call("step_a_q", q_nope, B_buf, batch_info, full_K_per_head, strict=strict)
    S, H, QK = q_nope.shape
    R = B_buf.shape[2]
    out = torch.empty((S, H, R), dtype=q_nope.dtype, device=q_nope.device)
    lora = current_options().lora
    p = plan("step_a_q", batch_info, S, max_len, num_slots=B_buf.shape[0], options=lora)
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
            BLOCK_R=_block_r(R), **_flags(q_nope, (B_buf,), None, lora.fp32_dot),
            **blocks, num_warps=warps, **_stages(stages))

    _launch("step_a_q", p, q_nope, (B_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return out


def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output, *, strict=None):
    """``base_output[t,h,:] += s * (q_lora_a[t,h,:r] @ A_buf[w,:r,:])`` in place; returns base_output."""
    max_len = validate_call("step_b_q", q_lora_a, A_buf, batch_info, base_output, strict=strict)
    S, H, _ = q_lora_a.shape
    R, C = A_buf.shape[1], A_buf.shape[2]
    lora = current_options().lora
    p = plan("step_b_q", batch_info, S, max_len, num_slots=A_buf.shape[0], options=lora)
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
            BLOCK_R=_block_r(R), **_flags(q_lora_a, (A_buf,), base_output, lora.fp32_dot), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("step_b_q", p, q_lora_a, (A_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return base_output


def step_a_v_fwd(attn_output, A_buf, batch_info, *, strict=None):
    """(S,H,C) @ A_buf[w,:r,:].T -> fresh (S,H,R) in attn_output's dtype."""
    max_len = validate_call("step_a_v", attn_output, A_buf, batch_info, strict=strict)
    S, H, C = attn_output.shape
    R = A_buf.shape[1]
    out = torch.empty((S, H, R), dtype=attn_output.dtype, device=attn_output.device)
    lora = current_options().lora
    p = plan("step_a_v", batch_info, S, max_len, num_slots=A_buf.shape[0], options=lora)
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
            BLOCK_R=_block_r(R), **_flags(attn_output, (A_buf,), None, lora.fp32_dot), **blocks, num_warps=warps,
            **_stages(stages))

    _launch("step_a_v", p, attn_output, (A_buf,), _block_r(R), launch, align=lay["ALIGN"])
    return out


def step_b_v_fwd(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim, *, strict=None):
    """``base_output[t,h,:] += s * (attn_lora_a[t,h,:r] @ V-half of B_buf[w].T)`` in place."""
    max_len = validate_call("step_b_v", attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim,
                            v_head_dim, strict=strict)
    S, H, _ = attn_lora_a.shape
    R = B_buf.shape[2]
    lora = current_options().lora
    p = plan("step_b_v", batch_info, S, max_len, num_slots=B_buf.shape[0], options=lora)
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
            BLOCK_R=_block_r(R), **_flags(attn_lora_a, (B_buf,), base_output, lora.fp32_dot), **blocks, num_warps=warps,
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
    lora = current_options().lora
    p = plan("q_side_fused", batch_info, S, max_len, num_slots=B_buf.shape[0], options=lora)
    if _nothing_to_do(p, S):
        return base_output

    lay = _layout(dict(QK=QK, C=C, R=R),  # R too: Note [Rank-wide loads] in kernels.lora._kernels
                  dict(sx_d=q_nope.stride(2), sb_r=B_buf.stride(2), sa_c=A_buf.stride(2), sy_c=base_output.stride(2)),
                  (q_nope, B_buf, A_buf, base_output),
                  sx_t=q_nope.stride(0), sx_h=q_nope.stride(1), sb_l=B_buf.stride(0), sb_row=B_buf.stride(1),
                  sa_l=A_buf.stride(0), sa_r=A_buf.stride(1), sy_t=base_output.stride(0),
                  sy_h=base_output.stride(1))

    def launch(blocks, warps, stages):
        c_blocks = triton.cdiv(blocks.pop("C_SPLIT", None) or C, blocks["BLOCK_C"])  # BLOCK_C-column blocks per program
        ncb = triton.cdiv(C, c_blocks * blocks["BLOCK_C"])
        _family(K.q_side_fused_kernel, lay)[(p.row_tiles, H, _axis2(p, B_buf.shape[0], ncb))](
            q_nope, B_buf, A_buf, base_output, **_meta(batch_info, p, S, ncb), scalings=batch_info.scalings,
            FULL_K=full_K_per_head, C_BLOCKS=c_blocks,
            **lay,
            BLOCK_R=_block_r(R), **_flags(q_nope, (B_buf, A_buf), base_output, lora.fp32_dot),
            **blocks, num_warps=warps,
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
    lora = current_options().lora
    p = plan("v_side_fused", batch_info, S, max_len, num_slots=B_buf.shape[0], options=lora)
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
            BLOCK_R=_block_r(R), **_flags(attn_output, (A_buf, B_buf), base_output, lora.fp32_dot),
            **blocks, num_warps=warps,
            **_stages(stages))

    _launch("v_side_fused", p, attn_output, (A_buf, B_buf), _block_r(R), launch, align=lay["ALIGN"])
    return base_output
