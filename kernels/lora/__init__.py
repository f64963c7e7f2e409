"""Our Triton kernels for the kv_b LoRA steps of absorbed MLA (docs/semantics.md#kv_b-lora-steps).

Same names, signatures, in-place behaviour and error contracts as :mod:`reference.lora`; every
entry point also takes keyword-only ``strict=None`` (see :mod:`reference.strict`).

* ``step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head) -> (S,H,R)``
* ``step_b_q_fwd(q_lora_a, A_buf, batch_info, base_output) -> base_output``
* ``step_a_v_fwd(attn_output, A_buf, batch_info) -> (S,H,R)``
* ``step_b_v_fwd(attn_lora_a, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim)``
* ``q_side_fused_fwd(q_nope, B_buf, A_buf, batch_info, base_output, full_K_per_head)``
* ``v_side_fused_fwd(attn_output, A_buf, B_buf, batch_info, base_output, qk_nope_head_dim, v_head_dim)``

Precision (``PRECISION``): fp16/bf16 tiles go through ``tl.dot`` with fp32 accumulation; fp32
activations run ``tl.dot`` in TF32 on NVIDIA GPUs on operands the kernel rounds to TF32 to nearest
first, so their same-dtype baseline is the oracle's ``faithful="tf32"`` (under the interpreter fp32
dots are exact, which stays within that baseline).  Block sizes and stages fit the device's shared
memory (``_smem``).  How a call launches (path, grid, blocks, early reads, the fp32 dot) is the
:class:`~kernel_oracle.kernels.options.LoRAOptions` in force, read once per call::

    with options(lora={"early_reads": True}):   # Note [Early reads] in ``_kernels``
        q_side_fused_fwd(...)

``BLOCKS`` is the default block table (read-only); ``LoRAOptions.blocks`` launches others; ``plan`` and
``token_major_blocks`` say which path and blocks a call launches (host integers only).  Design notes:
``docs/kernels_lora.md``.
"""

from ._launch import (
    BLOCKS,
    PRECISION,
    q_side_fused_fwd,
    step_a_q_fwd,
    step_a_v_fwd,
    step_b_q_fwd,
    step_b_v_fwd,
    v_side_fused_fwd,
)
from ._plan import plan, token_major_blocks

__all__ = [
    "BLOCKS",
    "PRECISION",
    "plan",
    "q_side_fused_fwd",
    "step_a_q_fwd",
    "step_a_v_fwd",
    "step_b_q_fwd",
    "step_b_v_fwd",
    "token_major_blocks",
    "v_side_fused_fwd",
]
