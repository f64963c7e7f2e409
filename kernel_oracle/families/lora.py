"""The ``lora`` family's record: SGLang's kv_b LoRA steps of absorbed MLA (six ops, one batch info)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.contracts_lora import LORA_ROWS
from kernel_oracle.reference.signatures import Signature

__all__ = ["LORA", "LORA_SIGNATURES"]

_STEP_B = dict(inplace="base_output")

# the six steps, SGLang's signatures (Note [Signatures] in reference/signatures.py)
LORA_SIGNATURES = (
    Signature("step_a_q", "lora", "step_a_q_fwd", "step_a_q_oracle",
              ("q_nope", "B_buf", "batch_info", "full_K_per_head"),
              batch_info="batch_info", routing_weight="B_buf", sizes=("full_K_per_head",)),
    Signature("step_b_q", "lora", "step_b_q_fwd", "step_b_q_oracle",
              ("q_lora_a", "A_buf", "batch_info", "base_output"),
              batch_info="batch_info", routing_weight="A_buf", **_STEP_B),
    Signature("step_a_v", "lora", "step_a_v_fwd", "step_a_v_oracle",
              ("attn_output", "A_buf", "batch_info"),
              batch_info="batch_info", routing_weight="A_buf"),
    Signature("step_b_v", "lora", "step_b_v_fwd", "step_b_v_oracle",
              ("attn_lora_a", "B_buf", "batch_info", "base_output", "qk_nope_head_dim", "v_head_dim"),
              batch_info="batch_info", routing_weight="B_buf", sizes=("qk_nope_head_dim", "v_head_dim"), **_STEP_B),
    Signature("q_side_fused", "lora", "q_side_fused_fwd", "q_side_fused_oracle",
              ("q_nope", "B_buf", "A_buf", "batch_info", "base_output", "full_K_per_head"),
              batch_info="batch_info", routing_weight="B_buf", sizes=("full_K_per_head",), **_STEP_B),
    Signature("v_side_fused", "lora", "v_side_fused_fwd", "v_side_fused_oracle",
              ("attn_output", "A_buf", "B_buf", "batch_info", "base_output", "qk_nope_head_dim", "v_head_dim"),
              batch_info="batch_info", routing_weight="B_buf", sizes=("qk_nope_head_dim", "v_head_dim"), **_STEP_B),
)


def _reference():
    from kernel_oracle.reference import lora

    return lora


def _problem():
    from kernel_oracle.harness.problem_lora import LoRAProblem

    return LoRAProblem


def _strategies():
    from kernel_oracle.fuzz.strategies_lora import lora_problems

    return lora_problems


def _cases():
    from kernel_oracle.fuzz.strategies_lora import lora_cases

    return lora_cases


def _locator():
    from kernel_oracle.harness.problem_lora import lora_locator

    return lora_locator


def _declined():
    from kernel_oracle.harness.problem_lora import lora_declined

    return lora_declined


def _independent():
    from kernel_oracle.reference.independent_lora import lora_independent

    return lora_independent


def _opinfos():
    from kernel_oracle.harness.opinfo_lora import LORA_OPINFOS

    return LORA_OPINFOS


def _tile_models():
    from kernel_oracle.harness.tiles_lora import LORA_TILE_MODELS

    return LORA_TILE_MODELS


def _mutations():
    from kernel_oracle.harness.mutations_lora import LORA_MUTATIONS

    return LORA_MUTATIONS


def _valid_part():
    from kernel_oracle.harness.malformed_lora import LORA_VALID_PART

    return LORA_VALID_PART


def _row_structure():
    from kernel_oracle.harness.buckets_lora import lora_rows

    return lora_rows


def _triggers():
    from kernel_oracle.harness.triggers_lora import LORA_TRIGGERS

    return LORA_TRIGGERS


def _words():
    from kernel_oracle.harness.headline_lora import lora_words

    return lora_words


def _warm_up():
    from kernel_oracle.harness.warmup_lora import lora_warm_up_cases

    return lora_warm_up_cases


def _variants():
    from kernel_oracle.harness.warmup_lora import lora_variant_cases

    return lora_variant_cases


def _kernels():
    from kernel_oracle.kernels import lora

    return lora


def _benchmark():
    from kernel_oracle.benchmarks import bench_lora

    return bench_lora


LORA = Family(
    name="lora",
    label="LoRA",
    signatures=LORA_SIGNATURES,
    contract_rows=LORA_ROWS,
    error_multiplier=2.0,  # the tolerance rule's k (FlashAttention uses 2 for the forward output)
    reference=_reference,
    problem=_problem,
    strategies=_strategies,
    cases=_cases,
    locator=_locator,
    declined=_declined,
    independent=_independent,
    opinfos=_opinfos,
    mutations=_mutations,
    tile_models=_tile_models,
    valid_part=_valid_part,
    row_structure=_row_structure,
    triggers=_triggers,
    words=_words,
    warm_up=_warm_up,
    variants=_variants,
    kernels=_kernels,
    benchmark=_benchmark,
    # our Triton kernels specialize into many variants (Note [Specialization] in kernels/lora)
    compiling_targets=("triton",),
    # the six steps share one routing: a corpus entry's cases run for every op the target has (fuzz.known_cases)
    corpus_across_ops=True,
)
