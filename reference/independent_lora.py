"""The independent formulation of the kv_b LoRA steps (Note [Independent formulations]), which the ``lora``
record names (its ``independent``) and the selfcheck compares the reference with.

Note [Independent formulations]
-------------------------------
A reference is only worth trusting if something written differently agrees with it.  Each family's
formulation (this module, :mod:`reference.independent_vision`, :mod:`reference.independent_csgmv`) shares no
code with its reference (no routing, no grouping by slot, no plan), and its record names it
(``Family.independent``: ``f(op, args, kwargs) -> (value, defined)``, SGLang's positional ``args``).

Here the routing is re-read from the batch info with a plain loop over segments, and each slot's low-rank
update is materialised per head as a dense matrix ``Delta_q[w,h] = B_k[w,h][:, :r] @ A[w,:r,:]`` of shape
``(qk, C)`` (q side) and ``Delta_v[w,h] = (B_v[w,h][:, :r] @ A[w,:r,:]).T`` of shape ``(C, vd)`` (v side),
then applied to the segment's tokens with ``einsum``.  The step-A outputs use the per-head factors directly.

Everything is float64 and expects well-formed metadata (what strict validation accepts).  Each function
returns ``(value, defined)``: the expected output and the bool mask of the region the contract defines, both
of the output's full shape.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["lora_independent", "lora_segments"]

_F64 = torch.float64


def lora_segments(batch_info, max_rank: int) -> list[tuple[torch.Tensor, int, int, float]]:
    """``[(physical rows, slot, effective rank, scaling)]`` per launched non-empty, rank>0 segment.

    Re-derived from the batch info fields with a loop over segments (never over tokens).
    """
    n = int(batch_info.num_segments or batch_info.bs)
    if batch_info.use_cuda_graph:  # the launch covers the padded tail too (zero-length segments)
        n = max(n, int(batch_info.weight_indices.shape[0]))
    indptr = [int(x) for x in batch_info.seg_indptr.cpu().tolist()]
    slots = [int(x) for x in batch_info.weight_indices.cpu().tolist()]
    ranks = [int(x) for x in batch_info.lora_ranks.cpu().tolist()]
    scalings = [float(x) for x in batch_info.scalings.cpu().tolist()]
    perm = batch_info.permutation
    out = []
    for b in range(n):
        start, end = indptr[b], indptr[b + 1]
        w = slots[b]
        r = min(max_rank, ranks[w])
        if end <= start or r == 0:
            continue
        logical = torch.arange(start, end)
        rows = perm.cpu().to(torch.int64)[logical] if perm is not None else logical
        out.append((rows, w, r, scalings[w]))
    return out


def _heads(B_buf: torch.Tensor, H: int, qk: int, vd: int, w: int, r: int):
    """Per-head K and V halves of slot ``w``: (H, qk, r) and (H, vd, r), float64."""
    b = B_buf[w].to(_F64).reshape(H, qk + vd, -1)
    return b[:, :qk, :r], b[:, qk:qk + vd, :r]


def lora_independent(op: str, args: tuple, kwargs: Optional[dict] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected output of LoRA ``op`` called with SGLang's positional ``args`` (no keywords; inputs untouched).

    step A ops -> (S,H,R) value and mask (routed rows, ``[:r]``); step B and fused ops -> the full
    updated ``base_output`` (S,H,N) and an all-True mask.
    """
    if op == "step_a_q":
        x, B_buf, bi, full_k = args
        S, H, qk = x.shape
        R = B_buf.shape[2]
        value = torch.zeros(S, H, R, dtype=_F64)
        defined = torch.zeros(S, H, R, dtype=torch.bool)
        for rows, w, r, _ in lora_segments(bi, R):
            bk, _ = _heads(B_buf, H, qk, full_k - qk, w, r)
            value[rows, :, :r] = torch.einsum("thd,hdr->thr", x[rows.to(x.device)].cpu().to(_F64), bk.cpu())
            defined[rows, :, :r] = True
        return value, defined
    if op == "step_a_v":
        x, A_buf, bi = args
        S, H, C = x.shape
        R = A_buf.shape[1]
        value = torch.zeros(S, H, R, dtype=_F64)
        defined = torch.zeros(S, H, R, dtype=torch.bool)
        for rows, w, r, _ in lora_segments(bi, R):
            a = A_buf[w, :r].cpu().to(_F64)  # (r, C)
            value[rows, :, :r] = torch.einsum("thc,rc->thr", x[rows.to(x.device)].cpu().to(_F64), a)
            defined[rows, :, :r] = True
        return value, defined
    if op == "step_b_q":
        xa, A_buf, bi, base = args
        R = A_buf.shape[1]
        value = base.detach().cpu().to(_F64).clone()
        for rows, w, r, s in lora_segments(bi, R):
            a = A_buf[w, :r].cpu().to(_F64)
            value[rows] += s * torch.einsum("thr,rc->thc", xa[rows.to(xa.device)].cpu().to(_F64)[..., :r], a)
        return value, torch.ones(value.shape, dtype=torch.bool)
    if op == "step_b_v":
        xa, B_buf, bi, base, qk, vd = args
        H, R = xa.shape[1], B_buf.shape[2]
        value = base.detach().cpu().to(_F64).clone()
        for rows, w, r, s in lora_segments(bi, R):
            _, bv = _heads(B_buf.cpu(), H, qk, vd, w, r)
            value[rows] += s * torch.einsum("thr,hvr->thv", xa[rows.to(xa.device)].cpu().to(_F64)[..., :r], bv)
        return value, torch.ones(value.shape, dtype=torch.bool)
    if op == "q_side_fused":
        x, B_buf, A_buf, bi, base, full_k = args
        H, qk = x.shape[1], x.shape[2]
        R = B_buf.shape[2]
        value = base.detach().cpu().to(_F64).clone()
        for rows, w, r, s in lora_segments(bi, R):
            bk, _ = _heads(B_buf.cpu(), H, qk, full_k - qk, w, r)
            a = A_buf[w, :r].cpu().to(_F64)  # (r, C)
            delta_q = torch.einsum("hdr,rc->hdc", bk, a)  # dense (H, qk, C): B_k[h][:, :r] @ A[:r]
            value[rows] += s * torch.einsum("thd,hdc->thc", x[rows.to(x.device)].cpu().to(_F64), delta_q)
        return value, torch.ones(value.shape, dtype=torch.bool)
    if op == "v_side_fused":
        x, A_buf, B_buf, bi, base, qk, vd = args
        H = x.shape[1]
        R = B_buf.shape[2]
        value = base.detach().cpu().to(_F64).clone()
        for rows, w, r, s in lora_segments(bi, R):
            _, bv = _heads(B_buf.cpu(), H, qk, vd, w, r)
            a = A_buf[w, :r].cpu().to(_F64)
            delta_v = torch.einsum("hvr,rc->hcv", bv, a)  # dense (H, C, vd): (B_v[h][:, :r] @ A[:r]).T
            value[rows] += s * torch.einsum("thc,hcv->thv", x[rows.to(x.device)].cpu().to(_F64), delta_v)
        return value, torch.ones(value.shape, dtype=torch.bool)
    raise ValueError(f"op={op!r} is unknown; the only valid values are step_a_q, step_b_q, step_a_v, "
                     "step_b_v, q_side_fused, v_side_fused")
