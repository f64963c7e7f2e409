"""The independent formulation of the vision attention (Note [Independent formulations] in
:mod:`reference.independent_lora`), which the ``vision`` record names (its ``independent``).

Every covered token is gathered through ``as_strided`` from its element offset (counted from the tensor's
data pointer, addressed with the tensor's own strides; k's from the token that q's offset names) and one
``torch.nn.functional.scaled_dot_product_attention`` call runs over all of them with a block-diagonal boolean
mask (and the window's band within each sequence), grouped key/value heads through its ``enable_gqa``.  Sinks
rescale that output through the log-sum-exp of the logits: ``out * exp(lse) / (exp(lse) + exp(sink))``.
Memory is quadratic in the covered tokens: small cases only.  Float64, well-formed metadata only; returns
``(value, defined)`` of the output's full shape.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["vision_formulation", "vision_independent", "vision_sequences"]

_F64 = torch.float64


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


def vision_formulation(op: str, args: tuple, kwargs: Optional[dict] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`vision_independent` of a call of the vision op: SGLang's positional ``args`` and its ``kwargs``."""
    return vision_independent(*args, **(kwargs or {}))
