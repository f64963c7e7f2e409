"""The same kernels with one planted bug: rows are read and written in logical order, ignoring
``batch_info.permutation`` (right whenever a batch is not permuted, so a test must permute)."""

from __future__ import annotations

from .lora import step_a_q, step_a_v


def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    return step_a_q(q_nope, B_buf, batch_info, full_K_per_head, permuted=False)


def step_a_v_fwd(attn_output, A_buf, batch_info):
    return step_a_v(attn_output, A_buf, batch_info, permuted=False)
