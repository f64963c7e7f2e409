"""The ``csgmv`` family's record: SGLang's chunked SGMV LoRA shrink and expand (its default LoRA backend)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.contracts_csgmv import CSGMV_ROWS
from kernel_oracle.reference.signatures import Signature

__all__ = ["CSGMV", "CSGMV_SIGNATURES"]

# the shrink and the expand, SGLang's signatures (Note [Signatures] in reference/signatures.py)
CSGMV_SIGNATURES = (
    Signature("csgmv_shrink", "csgmv", "chunked_sgmv_lora_shrink_forward", "shrink_reference",
              ("x", "weights", "batch_info", "num_slices"), keywords=("split_k",),
              batch_info="batch_info", routing_weight="weights", sizes=("num_slices",)),
    Signature("csgmv_expand", "csgmv", "chunked_sgmv_lora_expand_forward", "expand_reference",
              ("x", "weights", "batch_info", "slice_offsets", "max_slice_size", "base_output"),
              keywords=("slice_offsets_cpu",), batch_info="batch_info", routing_weight="weights",
              indptrs="slice_offsets", sizes=("max_slice_size",), inplace="base_output"),
)


def _reference():
    from kernel_oracle.reference import csgmv

    return csgmv


def _problem():
    from kernel_oracle.harness.problem_csgmv import CsgmvProblem

    return CsgmvProblem


def _strategies():
    from kernel_oracle.fuzz.strategies_csgmv import csgmv_problems

    return csgmv_problems


def _cases():
    from kernel_oracle.fuzz.strategies_csgmv import family_cases

    return family_cases


def _selfcheck():
    from kernel_oracle.jobs.selfcheck_csgmv import csgmv_rows

    return csgmv_rows


def _mismatch():
    from kernel_oracle.harness.problem_csgmv import csgmv_mismatch

    return csgmv_mismatch


def _independent():
    from kernel_oracle.reference.independent_csgmv import csgmv_independent

    return csgmv_independent


def _opinfos():
    from kernel_oracle.harness.opinfo_csgmv import CSGMV_OPINFOS

    return CSGMV_OPINFOS


def _tile_models():
    from kernel_oracle.harness.tiles_csgmv import CSGMV_TILE_MODELS

    return CSGMV_TILE_MODELS


def _mutations():
    from kernel_oracle.harness.mutations_csgmv import CSGMV_MUTATIONS

    return CSGMV_MUTATIONS


def _declined():
    from kernel_oracle.harness.mutations_csgmv import csgmv_declined

    return csgmv_declined


CSGMV = Family(
    name="csgmv",
    label="csgmv LoRA",
    signatures=CSGMV_SIGNATURES,
    contract_rows=CSGMV_ROWS,  # no error_multiplier: its own mismatch judges its outputs
    reference=_reference,
    problem=_problem,
    strategies=_strategies,
    cases=_cases,
    selfcheck=_selfcheck,
    mismatch=_mismatch,
    declined=_declined,
    independent=_independent,
    opinfos=_opinfos,
    mutations=_mutations,
    tile_models=_tile_models,
    # mutations_csgmv.UNCHECKED_BOUNDS_FEATURE: a permutation row past x is written unchecked (heap corruption)
    never_sent=("csgmv.unchecked_bounds",),
    # taken where --op names it (fuzz, matrix, mutants): no kernels of ours and no benchmark, so `run` and
    # `bench` have nothing of it to run by default; its mutants patch a release's files and need its wheel
    # (docs/csgmv.md#fuzzing)
    by_default=False,
)
