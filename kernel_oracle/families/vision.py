"""The ``vision`` family's record: the flashinfer_cudnn vision attention (one op of the family's name)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.contracts_vision import VISION_ROWS
from kernel_oracle.reference.signatures import Signature

__all__ = ["VISION", "VISION_SIGNATURES"]

# the one op, of the family's name: SGLang's flashinfer_cudnn forward (Note [Signatures] in reference/signatures.py)
VISION_SIGNATURES = (
    Signature("vision", "vision", "flashinfer_cudnn_attention", "flashinfer_cudnn_oracle",
              ("q", "k", "v", "cu_seqlens", "bsz", "seq_len"),
              keywords=("softmax_scale", "forward_metadata", "sequence_lengths", "max_seqlen", "window_size", "s_aux",
                        "attention_mask", "output_ws"),
              metadata="forward_metadata", indptrs="cu_seqlens", sizes=("bsz", "seq_len")),
)


def _reference():
    from kernel_oracle.reference import vision

    return vision


def _problem():
    from kernel_oracle.harness.problem_vision import VisionProblem

    return VisionProblem


def _strategies():
    from kernel_oracle.fuzz.strategies_vision import vision_problems

    return vision_problems


def _cases():
    from kernel_oracle.fuzz.strategies_vision import vision_cases

    return vision_cases


def _locator():
    from kernel_oracle.harness.problem_vision import vision_locator

    return vision_locator


def _declined():
    from kernel_oracle.harness.problem_vision import vision_declined

    return vision_declined


def _independent():
    from kernel_oracle.reference.independent_vision import vision_formulation

    return vision_formulation


def _opinfos():
    from kernel_oracle.harness.opinfo_vision import VISION_OPINFOS

    return VISION_OPINFOS


def _tile_models():
    from kernel_oracle.harness.tiles_vision import VISION_TILE_MODELS

    return VISION_TILE_MODELS


def _mutations():
    from kernel_oracle.harness.mutations_vision import VISION_MUTATIONS

    return VISION_MUTATIONS


def _row_structure():
    from kernel_oracle.harness.buckets_vision import vision_rows

    return vision_rows


def _features():
    from kernel_oracle.harness.features_vision import VISION_FEATURE_TABLE

    return VISION_FEATURE_TABLE


def _for_declines():
    from kernel_oracle.harness.problem_vision import vision_for_declines

    return vision_for_declines


def _words():
    from kernel_oracle.harness.headline_vision import vision_words

    return vision_words


def _warm_up():
    from kernel_oracle.harness.warmup_vision import vision_warm_up_cases

    return vision_warm_up_cases


def _kernels():
    from kernel_oracle.kernels import vision

    return vision


def _benchmark():
    from kernel_oracle.benchmarks import bench_vision

    return bench_vision


VISION = Family(
    name="vision",
    label="vision attention",
    signatures=VISION_SIGNATURES,
    contract_rows=VISION_ROWS,
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
    row_structure=_row_structure,
    features=_features,
    words=_words,
    warm_up=_warm_up,
    for_declines=_for_declines,
    kernels=_kernels,
    benchmark=_benchmark,
    bare_function_op="vision",  # a target module's bare function (package.module:attr) is the vision forward
)
