"""Pure-torch reference for SGLang's ``flashinfer_cudnn`` vision attention (docs/semantics.md#vision-attention).

Non-causal softmax attention confined to each packed sequence.  ``flashinfer_cudnn_oracle`` returns
the float64 output (or, with ``faithful=True``, the same computation with a flash kernel's rounding
points in the input dtype: fp32 scores and softmax, probabilities rounded to the input dtype before
the PV product, fp32 accumulation, output rounded) and the mask of covered tokens.  Faithful
fp32 results carry the same computation in other summation orders (``OracleResult.alternates``;
see reference.tolerance, Note [Baseline orders]).
``flashinfer_cudnn_attention`` has SGLang's forward signature and returns the input's dtype.

Shapes: ``q`` (T,H,D) or (b,s,H,D); ``k`` (T,H_kv,D) and ``v`` (Tv,H_kv,Dv) with ``H % H_kv == 0``
(query head ``h`` attends key/value head ``h // (H // H_kv)``: Note [Grouped-query attention] in
:mod:`reference.vision_metadata`); output (T,H,Dv) (4-D in, 4-D out).  ``window_size`` and ``s_aux``
(attention sinks) as Note [Window and sinks] in :mod:`reference.vision_arguments` defines them.
Memory stays bounded on long sequences by processing queries in blocks (not one token at a time).
"""

from __future__ import annotations

from typing import Optional

import torch

from kernel_oracle.reference.lora import OracleResult
from kernel_oracle.reference.strict import resolve_strict
from kernel_oracle.reference.tolerance import check_faithful, round_to_tf32, tf32_mode
from kernel_oracle.reference.vision_arguments import NO_WINDOW, window_mask
from kernel_oracle.reference.vision_metadata import (
    VisionAttentionMetadata,
    VisionPlan,
    prepare_flashinfer_cudnn_metadata,
    resolve_flashinfer_cudnn,
)

__all__ = [
    "VisionAttentionMetadata",
    "FP32_BASELINE_ORDERS",
    "attention_block",
    "baseline_orders",
    "flashinfer_cudnn_attention",
    "flashinfer_cudnn_oracle",
    "prepare_flashinfer_cudnn_metadata",
]

# bytes of one score block: queries are processed in blocks that keep (H, block, n) under this
_SCORE_BLOCK_BYTES = 256 * 2**20


def attention_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *, faithful: bool | str,
                    out_dtype: torch.dtype, order: Optional[tuple[torch.Tensor, Optional[torch.Tensor]]] = None,
                    exp2: bool = False, key_block: Optional[int] = None, window: tuple[int, int] = NO_WINDOW,
                    sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
    """softmax(q k^T * scale) v for one sequence.

    q (n,H,D), k (n,H,D), v (n,H,Dv) -> (n,H,Dv) in float64, or ``out_dtype`` when faithful (k and v
    with q's heads: a caller expands grouped key/value heads first).  ``window`` (left, right): query
    ``i`` attends keys ``i-left .. i+right`` (-1: no limit); ``sinks`` (H,): one extra logit per head in
    the softmax denominator (Note [Window and sinks] in :mod:`reference.vision_arguments`).
    ``order``: (head-dim permutation (D,), key permutation (n,)): the same result with the sums of
    q k^T, the softmax and the PV product taken in another order (see :func:`baseline_orders`).
    ``exp2`` (faithful only): the flash-attention form of the same softmax -- ``scale * log2(e)``
    folded into one factor, ``exp2`` of the shifted scores, the division by the row sum deferred to
    the output -- over keys in blocks of ``key_block`` (None: one block) with the online softmax's
    running maximum and rescaling of the partial sums (Note [Baseline orders]).  A key permutation
    of None keeps the keys in order.
    """
    check_faithful(faithful)
    if isinstance(faithful, str) and faithful == "tf32":
        raise ValueError("faithful='tf32' means both TF32 modes: pass 'tf32-rne' or 'tf32-trunc' to attention_block")
    key_pos = torch.arange(k.shape[0], device=q.device)
    if order is not None:
        dims, keys = order
        q, k = q[..., dims], k[..., dims]
        if keys is not None:
            k, v, key_pos = k[keys], v[keys], key_pos[keys]
    compute = torch.float32 if faithful else torch.float64
    mode = tf32_mode(faithful)  # tl.dot's fp32 operands on GPUs (reference.tolerance, Note [TF32 rounding])
    mm = (lambda t: round_to_tf32(t, mode)) if mode else (lambda t: t)
    n, H, _ = q.shape
    kt = mm(k.to(compute)).permute(1, 2, 0)  # (H, D, n)
    vh = mm(v.to(compute)).transpose(0, 1)  # (H, n, Dv)
    out = torch.empty(n, H, v.shape[2], dtype=out_dtype if faithful else compute, device=q.device)
    elem = torch.finfo(compute).bits // 8
    block = max(1, min(n, _SCORE_BLOCK_BYTES // max(1, H * n * elem)))
    sink = None if sinks is None else sinks.to(compute).view(H, 1, 1)
    windowed = window[0] >= 0 or window[1] >= 0
    for s in range(0, n, block):
        qb = mm(q[s:s + block].to(compute)).transpose(0, 1)  # (H, b, D)
        keep = window_mask(torch.arange(s, s + qb.shape[1], device=q.device), key_pos, window) if windowed else None
        if exp2 and faithful:
            ob = _online_softmax_pv(qb, kt, vh, scale * LOG2E, key_block or n, q.dtype, mm, keep, sink)
        else:
            scores = torch.bmm(qb, kt) * scale  # (H, b, n)
            if keep is not None:
                scores = scores.masked_fill(~keep, float("-inf"))
            if sink is None:
                p = torch.softmax(scores, dim=-1)
            else:  # the sink joins the softmax as one more logit per head, and is dropped after it
                p = torch.softmax(torch.cat([scores, sink.expand(H, scores.shape[1], 1)], dim=-1), dim=-1)[..., :-1]
            if faithful:
                p = mm(p.to(q.dtype).to(compute))
            ob = torch.bmm(p, vh)  # (H, b, Dv)
        out[s:s + block] = ob.transpose(0, 1).to(out.dtype)
    return out


def _online_softmax_pv(qb, kt, vh, scale2: float, block: int, in_dtype, mm, keep=None, sink=None) -> torch.Tensor:
    """softmax(qb kt * scale) vh as a flash-attention kernel takes it, in qb's dtype: base-2 logits,
    keys in blocks of ``block`` with a running row maximum ``m``, row sum ``l`` and output ``acc``
    rescaled by ``exp2(m_old - m_new)`` at each block, the probabilities rounded to the input dtype
    for the PV product, the division by ``l`` last.  qb (H,b,D), kt (H,D,n), vh (H,n,Dv) -> (H,b,Dv).
    ``keep`` (b,n): the window's keys (a row whose block holds none of them keeps its running values);
    ``sink`` (H,1,1): the sink logits, added to ``l`` as ``exp2(sink * log2(e) - m)`` before the division."""
    H, b, n = qb.shape[0], qb.shape[1], kt.shape[2]
    m = torch.full((H, b, 1), float("-inf"), dtype=qb.dtype, device=qb.device)
    l = torch.zeros((H, b, 1), dtype=qb.dtype, device=qb.device)
    acc = torch.zeros((H, b, vh.shape[2]), dtype=qb.dtype, device=qb.device)
    for j in range(0, n, max(block, 1)):
        s = torch.bmm(qb, kt[:, :, j:j + block]) * scale2
        if keep is not None:
            s = s.masked_fill(~keep[:, j:j + block], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)  # no key yet: exp2(-inf) = 0
        alpha = torch.exp2(m - m_safe)
        p = torch.exp2(s - m_safe)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + torch.bmm(mm(p.to(in_dtype).to(qb.dtype)), vh[:, j:j + block])
        m = m_new
    if sink is not None:
        l = l + torch.exp2(sink * LOG2E - m)
    return acc * (1.0 / l)


# Note [Baseline orders] (reference.tolerance): fp32 baselines are taken in this many summation
# orders and the worst counts; the alternates at even positions use the flash-attention form
# (``attention_block(exp2=True)``) with keys in order, in blocks of FA_KEY_BLOCKS.  Measured (TRITON_INTERPRET, fp32, logits x30, one head, D=16): with
# 1 order, torch fp32 itself in a random order failed the rule in 7/400 (4 tokens) and 22/300
# (12+7 tokens) draws; 2 orders 4/400 and 7/300; 4 orders 1/400 and 2/300; 8 orders 0/400, 0/300.
FP32_BASELINE_ORDERS = 8
# the flash-attention form among the alternates (off only to measure what it changes)
FA_FORM_ALTERNATES = True
# key blocks of the flash-attention alternates (None: one block): what FA kernels use (ours: 32 in fp32)
FA_KEY_BLOCKS = (32, 64, 128, None)
LOG2E = 1.4426950408889634


def baseline_orders(n: int, d: int, count: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count - 1`` (head-dim, key) permutations besides the natural order: the reverse order, then
    fixed pseudo-random ones (a seeded generator: the same baselines on every run)."""
    if count <= 1:
        return []
    orders = [(torch.arange(d - 1, -1, -1), torch.arange(n - 1, -1, -1))]
    gen = torch.Generator().manual_seed(n * 1009 + d)
    orders += [(torch.randperm(d, generator=gen), torch.randperm(n, generator=gen)) for _ in range(count - 2)]
    return [(a.to(device), b.to(device)) for a, b in orders]


def _run(plan: VisionPlan, faithful: bool | str) -> OracleResult:
    if isinstance(faithful, str) and faithful == "tf32":  # both TF32 modes; the rule takes the worst
        rne, trunc = _run(plan, "tf32-rne"), _run(plan, "tf32-trunc")
        return OracleResult(rne.value, rne.defined, rne.alternates + trunc.baselines)
    check_faithful(faithful)
    q, k, v = plan.q, plan.k, plan.v
    group = plan.kv_group
    T, H, Dv = q.shape[0], q.shape[1], v.shape[2]
    dtype = q.dtype if faithful else torch.float64
    value = torch.zeros(T, H, Dv, dtype=dtype, device=q.device)
    n_orders = FP32_BASELINE_ORDERS if faithful and q.dtype == torch.float32 else 1
    reordered = [torch.zeros_like(value) for _ in range(n_orders - 1)]  # Note [Baseline orders]
    defined = torch.zeros(T, H, Dv, dtype=torch.bool, device=q.device)
    skip = set(plan.undefined)
    if not plan.all_undefined:
        for b in range(plan.num_sequences):
            n = int(plan.lengths[b])
            if n == 0 or b in skip:
                continue
            qs, vs, os = int(plan.qk_start[b]), int(plan.v_start[b]), int(plan.o_start[b])
            # each query head's key/value head (Note [Grouped-query attention]): expanded to H heads
            kb, vb = (x.repeat_interleave(group, dim=1) if group > 1 else x for x in (k[qs:qs + n], v[vs:vs + n]))
            extra = dict(window=plan.window, sinks=plan.sinks)
            value[os:os + n] = attention_block(q[qs:qs + n], kb, vb, plan.scale, faithful=faithful, out_dtype=dtype,
                                               **extra)
            orders = baseline_orders(n, q.shape[2], n_orders, q.device)
            for i, (alt, order) in enumerate(zip(reordered, orders)):
                fa = FA_FORM_ALTERNATES and i % 2 == 0
                alt[os:os + n] = attention_block(
                    q[qs:qs + n], kb, vb, plan.scale, faithful=faithful, out_dtype=dtype,
                    order=(order[0], None) if fa else order, exp2=fa,
                    key_block=FA_KEY_BLOCKS[(i // 2) % len(FA_KEY_BLOCKS)] if fa else None, **extra)
            defined[os:os + n] = True
        for b in skip:  # an unspecified sequence may overwrite outputs that another one defined
            n, os = int(plan.lengths[b]), int(plan.o_start[b])
            if n > 0 and os >= 0:
                defined[os:os + n] = False
    if plan.reshape_batch is not None:
        value = value.unflatten(0, (plan.reshape_batch, -1))
        defined = defined.unflatten(0, (plan.reshape_batch, -1))
        reordered = [alt.unflatten(0, (plan.reshape_batch, -1)) for alt in reordered]
    return OracleResult(value, defined, tuple(reordered))


def flashinfer_cudnn_oracle(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None, *,
                            faithful: bool = False, strict: Optional[bool] = None, **kwargs) -> OracleResult:
    """The expected output (float64, or faithful in q's dtype) and the mask of covered tokens."""
    plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata,
                                    strict=resolve_strict(strict), **kwargs)
    return _run(plan, faithful)


def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                               **kwargs) -> torch.Tensor:
    """SGLang's ``VisionFlashInferAttention.forward`` contract; output in q's dtype, zeros where
    no sequence writes.  Accepts ``faithful=`` and ``strict=`` keywords beside SGLang's kwargs."""
    faithful = kwargs.pop("faithful", False)
    strict = kwargs.pop("strict", None)
    res = flashinfer_cudnn_oracle(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata,
                                  faithful=faithful, strict=strict, **kwargs)
    return res.value.to(q.dtype)
