"""A user's kernel module, as the README's five-minute path has one: plain torch, SGLang's signatures.

:func:`write_user_module` writes it beside the test (``<folder>/<name>.py``), correct or with one
planted bug of :data:`PLANTS`.  It implements the upstream contract (the missing-``max_len`` error) and
no strict validation, like SGLang's own kernels; tests run it through ``kernel-oracle fuzz`` and
``--oracle-target`` from the folder that holds it, as a user would.
"""

from __future__ import annotations

import uuid
from pathlib import Path

__all__ = ["PLANTS", "SOURCE", "unique_name", "write_user_module"]

# plant -> what is wrong (each one bug in one op unless it says otherwise)
PLANTS = {
    "": "correct",
    "no_max_len_check": "no missing-max_len ValueError: both steps run on without a longest length",
    "drops_segment_end": "step_b_q leaves each segment's last row unchanged",
    "step_a_drops_segment_end": "step_a_q leaves each segment's last row zero",
    "ignores_permutation": "step_b_q reads and writes rows at their logical index",
    "ignores_scaling": "step_b_q adds the delta without the slot's scaling",
    "sloppy_slot_1": "step_b_q rounds the delta of slot 1's segments of more than 8 rows through bfloat16: wrong "
                     "only on some draws",
    "corrupts_on_bad_slot": "step_b_q adds 1 to every row when a weight index is outside the slots (right "
                            "on every valid batch: a defect only malformed metadata shows)",
    "nudges_last_row": "step_b_q moves the output's last row one ulp up, routed or not (within any tolerance: "
                       "only the bit-identical rule for unrouted rows sees it)",
}

SOURCE = '''"""kv_b LoRA steps A and B of the q side in plain torch (SGLang's signatures)."""
import torch

PLANT = {plant!r}


def _segments(bi, op):
    if bi.max_len is None and bi.seg_lens is None and PLANT != "no_max_len_check":
        raise ValueError("LoRA batch_info must provide max_len or seg_lens.")
    count = bi.weight_indices.shape[0] if bi.use_cuda_graph else (bi.num_segments or bi.bs)
    indptr, slots = bi.seg_indptr.tolist(), bi.weight_indices.tolist()
    ranks, scalings = bi.lora_ranks.tolist(), bi.scalings.tolist()
    for b in range(count):
        start, end = max(indptr[b], 0), indptr[b + 1]  # a negative bound must not wrap to the last rows
        if PLANT == ("drops_segment_end" if op == "b" else "step_a_drops_segment_end") and end > start:
            end -= 1
        rows = torch.arange(start, end)
        if bi.permutation is not None and not (op == "b" and PLANT == "ignores_permutation"):
            rows = bi.permutation[start:end].long().cpu()
        scaling = 1.0 if op == "b" and PLANT == "ignores_scaling" else scalings[slots[b]]
        yield rows, slots[b], ranks[slots[b]], scaling


def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    S, H, qk = q_nope.shape
    R = B_buf.shape[2]
    out = torch.zeros(S, H, R, dtype=q_nope.dtype, device=q_nope.device)
    for rows, slot, rank, _ in _segments(batch_info, "a"):
        r = min(R, rank)
        if r <= 0 or rows.numel() == 0:
            continue
        w = B_buf[slot].view(H, full_K_per_head, R)[:, :qk, :r].float()
        out[rows, :, :r] = torch.einsum("thd,hdr->thr", q_nope[rows].float(), w).to(q_nope.dtype)
    return out


def step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output):
    R = A_buf.shape[1]
    has_lengths = batch_info.max_len is not None or batch_info.seg_lens is not None  # the upstream contract first
    slots = batch_info.weight_indices.tolist()
    if PLANT == "corrupts_on_bad_slot" and has_lengths and any(not 0 <= w < A_buf.shape[0] for w in slots):
        return base_output.add_(1.0)
    for rows, slot, rank, scaling in _segments(batch_info, "b"):
        r = min(R, rank)
        if r <= 0 or rows.numel() == 0:
            continue
        delta = scaling * torch.einsum("thr,rc->thc", q_lora_a[rows][:, :, :r].float(), A_buf[slot, :r].float())
        if PLANT == "sloppy_slot_1" and slot == 1 and rows.numel() > 8:
            delta = delta.to(torch.bfloat16)
        base_output[rows] += delta.to(q_lora_a.dtype).to(base_output.dtype)
    if PLANT == "nudges_last_row" and has_lengths:
        base_output[-1] = torch.nextafter(base_output[-1], torch.full_like(base_output[-1], float("inf")))
    return base_output
'''


def unique_name(stem: str = "my_kernels") -> str:
    """A module name no earlier test imported (``sys.modules`` caches by name)."""
    return f"{stem}_{uuid.uuid4().hex[:8]}"


def write_user_module(folder: Path, name: str = "my_kernels", plant: str = "") -> Path:
    """Write the module ``name`` into ``folder``: correct, or with the bug ``plant`` of :data:`PLANTS`."""
    if plant not in PLANTS:
        raise ValueError(f"plant={plant!r} is unknown; the only valid values are {sorted(PLANTS)}")
    path = Path(folder) / f"{name}.py"
    path.write_text(SOURCE.format(plant=plant))
    return path
