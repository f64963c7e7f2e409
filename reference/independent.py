"""Independent formulations of the references, for checking the references themselves.

Note [Independent formulations]
-------------------------------
A reference is only worth trusting if something written differently agrees with it.  These
formulations share no code with :mod:`reference` (no routing, no grouping by slot, no plan):

* **LoRA**: the routing is re-read from the batch info with a plain loop over segments, and each
  slot's low-rank update is materialised per head as a dense matrix
  ``Delta_q[w,h] = B_k[w,h][:, :r] @ A[w,:r,:]`` of shape ``(qk, C)`` (q side) and
  ``Delta_v[w,h] = (B_v[w,h][:, :r] @ A[w,:r,:]).T`` of shape ``(C, vd)`` (v side), then applied to the
  segment's tokens with ``einsum``.  The step-A outputs use the per-head factors directly.
* **Vision**: every covered token is gathered through ``as_strided`` from its element offset (counted
  from the tensor's data pointer, addressed with the tensor's own strides; k's from the token that
  q's offset names) and one ``torch.nn.functional.scaled_dot_product_attention`` call runs over all of
  them with a block-diagonal boolean mask (and the window's band within each sequence), grouped
  key/value heads through its ``enable_gqa``.  Sinks rescale that output through the log-sum-exp of
  the logits: ``out * exp(lse) / (exp(lse) + exp(sink))``.  Memory is quadratic in the covered tokens:
  small cases only.

Everything is float64 and expects well-formed metadata (what strict validation accepts).  Each
function returns ``(value, defined)``: the expected output and the bool mask of the region the
contract defines, both of the output's full shape.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["independent", "lora_independent", "lora_segments", "vision_independent", "vision_sequences"]

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


def lora_independent(op: str, args: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected output of LoRA ``op`` called with SGLang's positional ``args`` (inputs untouched).

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


def vision_sequences(cu_seqlens, forward_metadata=None, **kwargs):
    """``(packed indptrs, sequence lengths)`` as Python int lists, from either metadata path."""
    if forward_metadata is not None and getattr(forward_metadata, "packed_indptrs", None) is not None:
        packed, lengths = forward_metadata.packed_indptrs, forward_metadata.sequence_lengths
    else:
        packed, lengths = cu_seqlens, kwargs["sequence_lengths"]
    return ([int(x) for x in torch.as_tensor(packed).reshape(-1).tolist()],
            [int(x) for x in torch.as_tensor(lengths).reshape(-1).tolist()])


def _at(t: torch.Tensor, elem: int, n: int) -> torch.Tensor:
    """``n`` tokens of ``t`` (T,H,D) starting ``elem`` elements after its data pointer."""
    return torch.as_strided(t, (n, t.shape[1], t.shape[2]), t.stride(), t.storage_offset() + elem)


def vision_independent(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                       **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected ``flashinfer_cudnn`` output (float64, q's leading shape) and the covered-token mask."""
    four_d = q.dim() == 4
    lead = q.shape[:2] if four_d else None
    if four_d:
        q, k, v = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)
    T, H, D = q.shape
    Dv = v.shape[2]
    packed, lengths = vision_sequences(cu_seqlens, forward_metadata, **kwargs)
    B = len(lengths)
    qk_ind, v_ind, o_ind = packed[:B + 1], packed[B + 1:2 * B + 2], packed[2 * B + 2:]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    left, right = kwargs.get("window_size") or (-1, -1)
    sinks = kwargs.get("s_aux")
    out = torch.zeros(T * H * Dv, dtype=_F64)
    covered = torch.zeros(T * H * Dv, dtype=torch.bool)
    qs, ks, vs, seq_id, pos = [], [], [], [], []
    for b, n in enumerate(lengths):
        if n <= 0:
            continue
        qs.append(_at(q, qk_ind[b], n))
        ks.append(_at(k, qk_ind[b] // q.stride(0) * k.stride(0), n))  # k at the token q's offset names
        vs.append(_at(v, v_ind[b], n))
        seq_id.append(torch.full((n,), b))
        pos.append(torch.arange(n))
    if qs:
        Q, K, V = (torch.cat(x).cpu().to(_F64).transpose(0, 1) for x in (qs, ks, vs))  # (H or H_kv, N, *)
        ids, p = torch.cat(seq_id), torch.cat(pos)
        mask = ids[:, None] == ids[None, :]  # block diagonal: attend within the sequence only
        if left >= 0:
            mask &= p[None, :] >= p[:, None] - left
        if right >= 0:
            mask &= p[None, :] <= p[:, None] + right
        o = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale,
                                                             enable_gqa=K.shape[0] != H)
        if sinks is not None:
            Kx = K.repeat_interleave(H // K.shape[0], dim=0)
            lse = torch.logsumexp((Q @ Kx.transpose(1, 2) * scale).masked_fill(~mask, float("-inf")), dim=-1)
            sink = sinks.detach().cpu().to(_F64)[:, None]  # (H, 1)
            o = o * torch.sigmoid(lse - sink)[..., None]  # exp(lse) / (exp(lse) + exp(sink))
        o = o.transpose(0, 1).reshape(-1, H * Dv)  # (N, H*Dv) in sequence order
        start = 0
        for b, n in enumerate(lengths):
            if n <= 0:
                continue
            span = slice(o_ind[b], o_ind[b] + n * H * Dv)  # the output is contiguous (T, H, Dv)
            out[span] = o[start:start + n].reshape(-1)
            covered[span] = True
            start += n
    shape = (*lead, H, Dv) if four_d else (T, H, Dv)
    return out.reshape(shape), covered.reshape(shape)


def independent(op: str, args: tuple, kwargs: Optional[dict] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatch by op name: ``"vision"`` or one of the six LoRA ops."""
    if op == "vision":
        return vision_independent(*args, **(kwargs or {}))
    return lora_independent(op, args)
