"""``flashinfer_cudnn_attention``: SGLang's vision attention forward on our Triton kernel.

Note [One contract, one resolver]
---------------------------------
The contract (resolution order, the six upstream messages, strict validation, element-offset
packed indptrs) is not re-implemented here: :func:`reference.vision_metadata.resolve_flashinfer_cudnn`
resolves every call into a :class:`~reference.vision_metadata.VisionPlan` of per-sequence token
starts for q/k, v and o and lengths, exactly as for the reference.  This module turns the plan into
the kernel's block table (Note [Schedule] in :mod:`kernels.vision._kernel`) and launches once.

Host synchronisation: the resolver copies ``sequence_lengths`` and the packed indptrs to the CPU
(the bounds check of the upstream contract and the strict checks need their values), and the block
table is built there and copied back.  That is one device->host sync per call, as in SGLang's own
``flashinfer_cudnn`` path (its bounds check does ``.item()``); callers that reuse one metadata over
many layers can build a :class:`VisionLaunch` once with :func:`plan_attention` and call
:meth:`VisionLaunch.run` per layer, which launches without any sync.

Memory safety with ``strict=False``: a sequence whose token range lies outside q, k, v or the
output (only reachable when strict validation is off) has unspecified output by contract; the
kernel skips it rather than touching foreign memory.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch

from reference.contracts import raise_contract
from reference.vision_metadata import (
    VisionAttentionMetadata,
    VisionPlan,
    prepare_flashinfer_cudnn_metadata,
    resolve_flashinfer_cudnn,
)

from ._kernel import INTERPRETING, KernelConfig, default_config, head_dim_split, launch_attention

__all__ = [
    "FP32_PRECISIONS",
    "VisionAttentionMetadata",
    "VisionLaunch",
    "flashinfer_cudnn_attention",
    "plan_attention",
    "poisoned_output",
    "prepare_flashinfer_cudnn_metadata",
]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# fp32 inputs: "ieee" = exact fp32 products (the default; faithful=True baseline), "tf32" = tensor
# cores in TF32 on NVIDIA GPUs (faithful="tf32" baseline).  The interpreter is exact in both.
FP32_PRECISIONS = ("ieee", "tf32")

# Test hook: when True the output is allocated full of NaN instead of uninitialised, so tests can
# see that every covered token was written and nothing else was.
POISON_OUTPUT = False


@contextlib.contextmanager
def poisoned_output(enabled: bool = True) -> Iterator[None]:
    """Allocate outputs full of NaN inside this block (a debug / test hook)."""
    global POISON_OUTPUT
    old, POISON_OUTPUT = POISON_OUTPUT, enabled
    try:
        yield
    finally:
        POISON_OUTPUT = old


def _check_runnable(plan: VisionPlan, precision: str) -> None:
    q, k, v = plan.q, plan.k, plan.v
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"the Triton vision kernel supports float16, bfloat16 and float32, got q of dtype {q.dtype}; "
                        "cast q, k, v or use reference.vision.flashinfer_cudnn_attention")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype or t.device != q.device:
            raise TypeError(f"{name} must be a {q.dtype} tensor on {q.device} like q, got {t.dtype} on {t.device}; "
                            f"pass {name} in q's dtype and device")
    if k.dim() != 3 or k.shape != q.shape:
        raise_contract("vision.strict.shape_mismatch", field="k", got=tuple(k.shape), expected=tuple(q.shape),
                       why="q and k share shape (tokens, heads, head_dim)")
    if v.dim() != 3 or v.shape[1] != q.shape[1]:
        raise_contract("vision.strict.shape_mismatch", field="v", got=tuple(v.shape),
                       expected=("*", q.shape[1], "*"), why="v has q's head count")
    if precision not in FP32_PRECISIONS:
        raise ValueError(f"fp32_precision={precision!r} is invalid; the only valid values are {FP32_PRECISIONS}")
    if q.device.type == "cpu" and not INTERPRETING:
        raise RuntimeError("CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1 before importing "
                           "kernels.vision, or pass CUDA tensors")


def _block_table(plan: VisionPlan, block_m: int) -> torch.Tensor:
    """int32 (num_blocks, 5) rows [qk_tok, v_tok, o_tok, length, first query], longest first (CPU)."""
    n = plan.lengths
    tq, tk, tv = plan.q.shape[0], plan.k.shape[0], plan.v.shape[0]
    qs, vs, os = plan.qk_start, plan.v_start, plan.o_start
    keep = (n > 0) & (qs >= 0) & (qs + n <= min(tq, tk)) & (vs >= 0) & (vs + n <= tv) & (os >= 0) & (os + n <= tq)
    if plan.all_undefined:  # output offsets upstream would write out of place: nothing is defined
        keep &= False
    # numpy: torch.repeat_interleave costs ~10 ms per call on CPU tensors (torch 2.13)
    idx = np.flatnonzero(keep.numpy())
    n_np = n.numpy()
    idx = idx[np.argsort(-n_np[idx], kind="stable")]  # longest first
    nblk = (n_np[idx] + block_m - 1) // block_m
    seq = np.repeat(idx, nblk)
    first_blk = np.repeat(np.cumsum(nblk) - nblk, nblk)
    m0 = (np.arange(int(nblk.sum()), dtype=np.int64) - first_blk) * block_m
    table = np.stack([qs.numpy()[seq], vs.numpy()[seq], os.numpy()[seq], n_np[seq], m0], axis=1)
    return torch.from_numpy(np.ascontiguousarray(table, dtype=np.int32))


@dataclass(frozen=True)
class VisionLaunch:
    """A resolved call ready to launch: the plan, the device block table and the kernel config."""

    plan: VisionPlan
    table: torch.Tensor
    num_blocks: int
    config: KernelConfig
    precision: str

    def run(self, q: Optional[torch.Tensor] = None, k: Optional[torch.Tensor] = None,
            v: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Launch; q, k, v default to the planned ones and must otherwise match their shapes and
        strides (e.g. the next layer's activations under the same metadata).  No host sync."""
        plan = self.plan
        q3, k3, v3 = plan.q, plan.k, plan.v
        if q is not None:
            q3, k3, v3 = (x.flatten(0, 1) if x.dim() == 4 else x for x in (q, k, v))
            for name, new, old in (("q", q3, plan.q), ("k", k3, plan.k), ("v", v3, plan.v)):
                if new.shape != old.shape or new.stride() != old.stride() or new.dtype != old.dtype:
                    raise ValueError(f"{name} has shape {tuple(new.shape)}, strides {new.stride()}, {new.dtype}; "
                                     f"this launch was planned for {tuple(old.shape)}, {old.stride()}, {old.dtype}; "
                                     "plan again with plan_attention")
        T, H, DV = q3.shape[0], q3.shape[1], v3.shape[2]
        if POISON_OUTPUT:
            out = torch.full((T, H, DV), float("nan"), dtype=q3.dtype, device=q3.device)
        else:
            out = torch.empty((T, H, DV), dtype=q3.dtype, device=q3.device)
        if self.num_blocks and H:
            launch_attention(q3, k3, v3, out, self.table, self.num_blocks, plan.scale, self.config, self.precision)
        if plan.reshape_batch is not None:
            out = out.unflatten(0, (plan.reshape_batch, -1))
        return out


def plan_attention(q, k, v, cu_seqlens, bsz=None, seq_len=None, softmax_scale=None, forward_metadata=None,
                   **kwargs) -> VisionLaunch:
    """Resolve (contract + strict validation) and build the block table; see :class:`VisionLaunch`.

    Takes the forward's arguments; extra keywords: ``strict`` (None = the ambient setting),
    ``fp32_precision`` ("ieee" or "tf32"), ``config`` (a :class:`KernelConfig`, for benchmarks).
    """
    strict = kwargs.pop("strict", None)
    precision = kwargs.pop("fp32_precision", "ieee")
    config = kwargs.pop("config", None)
    plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, strict=strict, **kwargs)
    _check_runnable(plan, precision)
    if config is None:
        d_tiles = sum(head_dim_split(plan.q.shape[2]))
        dv_tiles = sum(head_dim_split(plan.v.shape[2]))
        config = default_config(d_tiles, dv_tiles, plan.q.element_size())
    table = _block_table(plan, config.block_m)
    return VisionLaunch(plan, table.to(plan.q.device), int(table.shape[0]), config, precision)


def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                               **kwargs) -> torch.Tensor:
    """SGLang's ``VisionFlashInferAttention.forward`` contract on the Triton kernel.

    q, k (T,H,D) or (b,s,H,D); v (T,H,Dv) (a strided view is fine); returns (T,H,Dv) (4-D in,
    4-D out) in q's dtype.  Tokens covered by no sequence are unspecified.  Beside SGLang's kwargs
    (``sequence_lengths``, ``max_seqlen``) accepts ``strict=`` and ``fp32_precision=``.
    """
    return plan_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata, **kwargs).run()
