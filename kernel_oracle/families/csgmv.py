"""The ``csgmv`` family's record: SGLang's chunked SGMV LoRA shrink and expand (its default LoRA backend)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.signatures import ops_of

__all__ = ["CSGMV"]


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


def _declined():
    from kernel_oracle.harness.mutations_csgmv import csgmv_declined

    return csgmv_declined


CSGMV = Family(
    name="csgmv",
    ops=ops_of("csgmv"),  # csgmv_shrink, csgmv_expand
    label="csgmv LoRA",
    reference=_reference,
    problem=_problem,
    strategies=_strategies,
    cases=_cases,
    selfcheck=_selfcheck,
    mismatch=_mismatch,
    declined=_declined,
    # mutations_csgmv.UNCHECKED_BOUNDS_FEATURE: a permutation row past x is written unchecked (heap corruption)
    never_sent=("csgmv.unchecked_bounds",),
    # taken where --op names it (fuzz, matrix, mutants): no kernels of ours and no benchmark, so `run` and
    # `bench` have nothing of it to run by default; its mutants patch a release's files and need its wheel
    # (docs/csgmv.md#fuzzing)
    by_default=False,
)
