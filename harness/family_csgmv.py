"""The ``csgmv`` family's record: SGLang's chunked SGMV LoRA shrink and expand (its default LoRA backend)."""

from __future__ import annotations

from kernel_oracle.reference.signatures import ops_of

from kernel_oracle.harness.family import Family

CSGMV = Family(
    name="csgmv",
    ops=ops_of("csgmv"),  # csgmv_shrink, csgmv_expand
    label="csgmv LoRA",
    reference="kernel_oracle.reference.csgmv",
    problem="kernel_oracle.harness.problem_csgmv:CsgmvProblem",
    strategies="kernel_oracle.fuzz.strategies_csgmv:csgmv_problems",
    cases="kernel_oracle.fuzz.strategies_csgmv:family_cases",
    selfcheck="kernel_oracle.jobs.selfcheck_csgmv:csgmv_rows",
    mismatch="kernel_oracle.harness.problem_csgmv:csgmv_mismatch",
    declined="kernel_oracle.harness.mutations_csgmv:csgmv_declined",
    # mutations_csgmv.UNCHECKED_BOUNDS_FEATURE: a permutation row past x is written unchecked (heap corruption)
    never_sent=("csgmv.unchecked_bounds",),
    # taken where --op names it (fuzz, matrix, mutants): no kernels of ours and no benchmark, so `run` and
    # `bench` have nothing of it to run by default; its mutants patch a release's files and need its wheel
    # (docs/csgmv.md#fuzzing)
    by_default=False,
)
