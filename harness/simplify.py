"""The smallest example of a finding, and the metadata its defect depends on.

Note [Minimal examples]
-----------------------
Hypothesis shrinks a failing case within the strategy that drew it, and a campaign stops shrinking
when its budget runs out; what comes out can still be a 48-row batch with stale host counts, drifted
``seg_lens`` and a metadata mutation, none of which the defect needs.  A variant with fewer or shorter
segments keeps stale host ints stale (no larger than the segments left, less one), so a defect that
needs them (SGLang 0.5.12's skipped segments, PR #28371) shrinks to one short segment too.  A reader who reproduces it
must then find out by hand which of those matter.  :func:`minimise` finishes the job after the
search: it tries the *simplifications* of :func:`simplifications` one at a time (drop the mutation,
or trade a malformed one for an upstream-contract or partial-metadata one; drop a segment or sequence; shorten one; one head; no extra rows; no drift, no stale CUDA-graph
counts, no padding, no strided or offset views, no poison) and keeps each variant that still fails
with the same root cause (the same :class:`~harness.buckets.Bucket`), until none applies.  The order
puts what makes a repro short to read first.

Then it asks what the defect *depends on*: each *feature* of :data:`FEATURES` (the permutation, the
slots, the ranks, the scalings, the stale host ints of a CUDA-graph replay, the CUDA-graph padding; for
vision the v/o offsets: GQA, a window, sinks, a softmax scale and gaps are the needed features of
:mod:`harness.features`, part of the bucket) is neutralised in turn (no permutation; every segment on one
slot; every rank the buffer's R; every scaling 1; host ints that count the replayed batch; no padding,
asked only of a case without stale host ints, which need the graph; v and o at the q/k offsets).  A variant that still
fails with the same root cause is kept (the defect does not need that feature); one that passes
names a feature the defect depends on, which the finding's headline says
(:func:`harness.headline.headline`: ``...; it depends on the permutation``).  A variant that fails
otherwise (another root cause) is neither kept nor counted.

Each variant is one more call of the target (the campaign counts it as a case); :data:`MAX_ATTEMPTS`
bounds them.  Problems are frozen dataclasses, so a variant is a ``dataclasses.replace``; a variant
the problem's own rules refuse (its materialisation raises) is skipped by the caller.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional

__all__ = ["FEATURES", "MAX_ATTEMPTS", "Minimal", "features", "minimise", "simplifications"]

# variants one finding's minimisation may run, at most
MAX_ATTEMPTS = 80

# feature -> how a headline names it ("it depends on <words>")
FEATURES = {
    "permutation": "the permutation",
    "slot": "the slot of each segment",
    "rank": "the slot's rank",
    "scaling": "the slot's scaling",
    "stale host ints": "stale host ints at CUDA-graph replay (bs, num_segments below the replayed batch)",
    "cuda graph": "CUDA-graph padding",
    "offsets": "the v/o offsets",
}


def _plainer_mutations(m) -> Iterator:
    """Mutations plainer than ``m``: for a malformed one, each upstream-contract and partial-metadata kind
    of its family (``drop_max_len_and_seg_lens`` says "missing max_len" plainer than a broken indptr
    that also dropped it); then ``m`` at index 0 and amount 1."""
    from kernel_oracle.harness.mutations import Mutation, kinds

    if m.category == "malformed":
        for kind in kinds(m.family, ("upstream", "partial")):
            yield Mutation(m.family, kind)
    if (m.index, m.amount) != (0, 1):
        yield Mutation(m.family, m.kind)


def simplifications(case) -> Iterator:
    """Smaller or plainer variants of ``case`` (a :class:`~harness.check.Case`), the first the most
    worth keeping (Note [Minimal examples])."""
    if case.mutation is not None:
        yield type(case)(case.problem, None)
        for m in _plainer_mutations(case.mutation):
            yield type(case)(case.problem, m)
    p = case.problem
    for variant in p.simplifications():  # each family's problem knows its own
        if variant is not None and variant != p:
            yield type(case)(variant, case.mutation)


def features(case) -> Iterator:
    """``(feature, variant)`` of every feature of :data:`FEATURES` that ``case`` has, the variant
    without it (Note [Minimal examples])."""
    for name, variant in case.problem.feature_variants().items():  # each family's problem knows its own
        if variant is not None:
            yield name, type(case)(variant, case.mutation)


@dataclasses.dataclass
class Minimal:
    """What :func:`minimise` found: the smallest failing ``case`` with its ``verdict`` and ``bucket``,
    the features its defect ``depends_on`` (keys of :data:`FEATURES`), and the larger failing cases
    it ``replaced`` (more cases of the same root cause)."""

    case: object
    verdict: object
    bucket: object
    depends_on: list
    replaced: list


def minimise(case, verdict, bucket, run: Callable, *, attempts: int = MAX_ATTEMPTS) -> Minimal:
    """The smallest variant of the failing ``case`` that fails with the same root cause ``bucket``, and
    what its defect depends on (Note [Minimal examples]).  ``run(case) -> (verdict, bucket)``, or None
    when the variant could not run (its rules refuse it, or the budget is spent)."""
    found = Minimal(case, verdict, bucket, [], [])
    tried: dict = {}
    left = [attempts]

    def attempt(variant) -> Optional[tuple]:
        key = variant.to_json()
        if key not in tried:
            if left[0] <= 0:
                return None
            left[0] -= 1
            tried[key] = run(variant)
        return tried[key]

    def same_cause(result) -> bool:
        return result is not None and not result[0].ok and result[1] == found.bucket

    def keep(variant, result) -> None:
        found.replaced.append(found.case)
        found.case, (found.verdict, found.bucket) = variant, result

    changed = True
    while changed and left[0] > 0:
        changed = False
        for variant in simplifications(found.case):
            result = attempt(variant)
            if same_cause(result):
                keep(variant, result)
                changed = True
                break
    for name in FEATURES:  # each variant from the case as kept so far: what it drops stays dropped
        variant = dict(features(found.case)).get(name)
        result = None if variant is None else attempt(variant)
        if same_cause(result):
            keep(variant, result)
        elif result is not None and result[0].ok:
            found.depends_on.append(name)
    return found
