"""Our Triton kernels: same entry points, signatures and contracts as :mod:`reference`.

* ``kernels.lora``   - kv_b LoRA steps (split and fused)
* ``kernels.vision`` - varlen vision attention with the ``flashinfer_cudnn`` contract

Without a GPU they run under the Triton interpreter: set ``TRITON_INTERPRET=1`` before importing
any kernel module (``kernels.interpreter`` explains the bf16 workarounds that needs).
"""
