"""The ``lora`` family's record: SGLang's kv_b LoRA steps of absorbed MLA (six ops, one batch info)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.signatures import ops_of

__all__ = ["LORA"]


def _reference():
    from kernel_oracle.reference import lora

    return lora


def _problem():
    from kernel_oracle.harness.problems import LoRAProblem

    return LoRAProblem


def _strategies():
    from kernel_oracle.fuzz.strategies import lora_problems

    return lora_problems


def _cases():
    from kernel_oracle.fuzz.strategies import lora_cases

    return lora_cases


def _locator():
    from kernel_oracle.harness.locators import lora_locator

    return lora_locator


def _declined():
    from kernel_oracle.harness.declined import lora_declined

    return lora_declined


def _kernels():
    from kernel_oracle.kernels import lora

    return lora


def _benchmark():
    from kernel_oracle.benchmarks import bench_lora

    return bench_lora


LORA = Family(
    name="lora",
    ops=ops_of("lora"),  # step_a_q, step_b_q, step_a_v, step_b_v, q_side_fused, v_side_fused
    label="LoRA",
    reference=_reference,
    problem=_problem,
    strategies=_strategies,
    cases=_cases,
    locator=_locator,
    declined=_declined,
    kernels=_kernels,
    benchmark=_benchmark,
    # our Triton kernels specialize into many variants (Note [Specialization] in kernels/lora)
    compiling_targets=("triton",),
)
