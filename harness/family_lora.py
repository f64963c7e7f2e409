"""The ``lora`` family's record: SGLang's kv_b LoRA steps of absorbed MLA (six ops, one batch info)."""

from __future__ import annotations

from kernel_oracle.reference.signatures import ops_of

from kernel_oracle.harness.family import Family

LORA = Family(
    name="lora",
    ops=ops_of("lora"),  # step_a_q, step_b_q, step_a_v, step_b_v, q_side_fused, v_side_fused
    label="LoRA",
    reference="kernel_oracle.reference.lora",
    problem="kernel_oracle.harness.problems:LoRAProblem",
    strategies="kernel_oracle.fuzz.strategies:lora_problems",
    cases="kernel_oracle.fuzz.strategies:lora_cases",
    locator="kernel_oracle.harness.locators:lora_locator",
    declined="kernel_oracle.harness.declined:lora_declined",
    kernels="kernel_oracle.kernels.lora",
    benchmark="kernel_oracle.benchmarks.bench_lora",
    # our Triton kernels specialize into many variants (Note [Specialization] in kernels/lora)
    compiling_targets=("triton",),
)
