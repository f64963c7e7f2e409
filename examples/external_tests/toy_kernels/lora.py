"""kv_b LoRA step A in plain torch, in SGLang's signatures (what a user's kernel module exports).

``step_a_q_fwd(q_nope (S,H,qk), B_buf (L,H*FULL_K,R), batch_info, FULL_K) -> (S,H,R)`` and
``step_a_v_fwd(attn_output (S,H,C), A_buf (L,R,C), batch_info) -> (S,H,R)``: for every segment,
its rows (through ``batch_info.permutation`` when given) times the slot's LoRA weight, rank
``min(R, lora_ranks[slot])``, accumulated in fp32 and rounded to the activation dtype.  Like
SGLang's kernels it implements the upstream contract (missing ``max_len`` and ``seg_lens``) but no
strict validation of malformed metadata.
"""

from __future__ import annotations

from typing import Iterator

import torch

MISSING_MAX_LEN = "LoRA batch_info must provide max_len or seg_lens."


def _segments(batch_info, *, permuted: bool = True) -> Iterator[tuple[torch.Tensor, int, int]]:
    """(physical rows, slot, effective rank) of every segment the kernel processes."""
    if batch_info.max_len is None and batch_info.seg_lens is None:
        raise ValueError(MISSING_MAX_LEN)
    # CUDA-graph replay: every captured segment (the host ints are capture-time values)
    count = batch_info.weight_indices.shape[0] if batch_info.use_cuda_graph else (
        batch_info.num_segments or batch_info.bs)
    indptr = batch_info.seg_indptr.tolist()
    slots = batch_info.weight_indices.tolist()
    ranks = batch_info.lora_ranks.tolist()
    for b in range(count):
        start, end = indptr[b], indptr[b + 1]
        rows = torch.arange(start, end)
        if permuted and batch_info.permutation is not None:
            rows = batch_info.permutation[start:end].long().cpu()
        yield rows, slots[b], ranks[slots[b]]


def step_a_q(q_nope, B_buf, batch_info, full_K_per_head, *, permuted: bool = True):
    S, H, qk = q_nope.shape
    R = B_buf.shape[2]
    out = torch.zeros(S, H, R, dtype=q_nope.dtype, device=q_nope.device)
    for rows, slot, rank in _segments(batch_info, permuted=permuted):
        r = min(R, rank)
        if r == 0 or rows.numel() == 0:
            continue
        rows = rows.to(q_nope.device)
        w = B_buf[slot].view(H, full_K_per_head, R)[:, :qk, :r].float()  # (H, qk, r): the K half
        out[rows, :, :r] = torch.einsum("thd,hdr->thr", q_nope[rows].float(), w).to(q_nope.dtype)
    return out


def step_a_v(attn_output, A_buf, batch_info, *, permuted: bool = True):
    S, H, _ = attn_output.shape
    R = A_buf.shape[1]
    out = torch.zeros(S, H, R, dtype=attn_output.dtype, device=attn_output.device)
    for rows, slot, rank in _segments(batch_info, permuted=permuted):
        r = min(R, rank)
        if r == 0 or rows.numel() == 0:
            continue
        rows = rows.to(attn_output.device)
        w = A_buf[slot, :r, :].float()  # (r, C)
        out[rows, :, :r] = torch.einsum("thc,rc->thr", attn_output[rows].float(), w).to(attn_output.dtype)
    return out


def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    return step_a_q(q_nope, B_buf, batch_info, full_K_per_head)


def step_a_v_fwd(attn_output, A_buf, batch_info):
    return step_a_v(attn_output, A_buf, batch_info)
