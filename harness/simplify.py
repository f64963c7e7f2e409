"""The smallest example of a finding, and the metadata its defect depends on.

Note [Minimal examples]
-----------------------
Hypothesis shrinks a failing case within the strategy that drew it, and a campaign stops shrinking
when its budget runs out; what comes out can still be a 48-row batch with stale host counts, drifted
``seg_lens`` and a metadata mutation, none of which the defect needs.  A reader who reproduces it
must then find out by hand which of those matter.  :func:`minimise` finishes the job after the
search: it tries the *simplifications* of :func:`simplifications` one at a time (drop the mutation,
or trade a malformed one for an upstream-contract or partial-metadata one; drop a segment or sequence; shorten one; one head; no extra rows; no drift, no stale CUDA-graph
counts, no padding, no strided or offset views, no poison) and keeps each variant that still fails
with the same root cause (the same :class:`~harness.buckets.Bucket`), until none applies.  The order
puts what makes a repro short to read first.

Then it asks what the defect *depends on*: each *feature* of :data:`FEATURES` (the permutation, the
slots, the ranks, the scalings, the CUDA-graph padding; for vision the v/o offsets: GQA, a window,
sinks, a softmax scale and gaps are the needed features of :mod:`harness.features`, part of the
bucket) is neutralised in turn (no permutation; every segment on one slot; every rank the buffer's
R; every scaling 1; no padding; v and o at the q/k offsets).  A variant that still
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
    "cuda graph": "CUDA-graph padding",
    "offsets": "the v/o offsets",
}


def _replace(problem, **changes):
    changed = {k: v for k, v in changes.items() if getattr(problem, k) != v}
    return dataclasses.replace(problem, **changed) if changed else None


def _lora_without_segment(p, b: int):
    keep = [i for i in range(len(p.seg_lens)) if i != b]
    # the host counts described the segments there were; the padding must still hold the real ones
    return dataclasses.replace(p, seg_lens=tuple(p.seg_lens[i] for i in keep),
                               weight_indices=tuple(p.weight_indices[i] for i in keep),
                               eager_counts=None, stale_host_ints=None, graph_tail=False)


def _shorter(n: int) -> list:
    return sorted({x for x in (1, 2, n // 2, n - 1) if 0 < x < n})


def _lora_simplifications(p) -> Iterator:
    for b in reversed(range(len(p.seg_lens))):
        yield _lora_without_segment(p, b)
    for b, n in enumerate(p.seg_lens):
        for m in _shorter(n):
            yield dataclasses.replace(p, seg_lens=p.seg_lens[:b] + (m,) + p.seg_lens[b + 1:], eager_counts=None,
                                      stale_host_ints=None)
    yield _replace(p, H=1)
    yield _replace(p, extra_rows=0)
    yield _replace(p, seg_lens_drift=None, eager_counts=None, max_len_slack=0)
    yield _replace(p, with_max_len=True)
    yield _replace(p, stale_host_ints=None)
    yield _replace(p, graph_tail=False)
    yield _replace(p, strided=False, offset_views=False)
    yield _replace(p, poison_beyond_rank=None)
    yield _replace(p, base_dtype=None)
    order = list(dict.fromkeys(w for w in p.weight_indices if 0 <= w < len(p.lora_ranks)))
    if order and len(order) == len(set(p.weight_indices)) and order != list(range(len(p.lora_ranks))):
        # only the slots the segments use, numbered 0.. in order of first use
        yield dataclasses.replace(p, weight_indices=tuple(order.index(w) for w in p.weight_indices),
                                  lora_ranks=tuple(p.lora_ranks[w] for w in order),
                                  scalings=tuple(p.scalings[w] for w in order))


def _vision_without_sequence(p, b: int):
    keep = [i for i in range(len(p.lengths)) if i != b]
    gaps = tuple(p.gaps[i] for i in keep) if p.gaps else ()
    return dataclasses.replace(p, lengths=tuple(p.lengths[i] for i in keep), gaps=gaps)


def _vision_simplifications(p) -> Iterator:
    for b in reversed(range(len(p.lengths))):
        yield _vision_without_sequence(p, b)
    for b, n in enumerate(p.lengths):
        for m in _shorter(n):
            yield dataclasses.replace(p, lengths=p.lengths[:b] + (m,) + p.lengths[b + 1:])
    yield _replace(p, H=1, H_kv=None)
    yield _replace(p, extra_tokens=0)
    yield _replace(p, four_d=False, batch=1)
    yield _replace(p, layout="contiguous")
    yield _replace(p, sequence_lengths_4d=False, max_seqlen_kind="int")
    yield _replace(p, full_call=False)
    yield _replace(p, logit_scale=1.0)


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
    own = getattr(p, "simplifications", None)  # a family whose problem knows its own (csgmv)
    for variant in (own() if callable(own) else
                    _lora_simplifications(p) if p.family == "lora" else _vision_simplifications(p)):
        if variant is not None and variant != p:
            yield type(case)(variant, case.mutation)


def features(case) -> Iterator:
    """``(feature, variant)`` of every feature of :data:`FEATURES` that ``case`` has, the variant
    without it (Note [Minimal examples])."""
    p = case.problem
    if p.family == "lora":
        slot = p.weight_indices[0] if p.weight_indices else 0
        variants = {"permutation": _replace(p, permute=False),
                    "slot": _replace(p, weight_indices=tuple(slot for _ in p.weight_indices)),
                    "rank": _replace(p, lora_ranks=tuple(p.R for _ in p.lora_ranks)),
                    "scaling": _replace(p, scalings=tuple(1.0 for _ in p.scalings)),
                    "cuda graph": _replace(p, cuda_graph_pad_to=None, stale_host_ints=None, graph_tail=False)}
    elif callable(getattr(p, "feature_variants", None)):  # a family whose problem knows its own (csgmv)
        variants = p.feature_variants()
    else:
        variants = {"offsets": _replace(p, v_shift=0, o_shift=0)}
    for name, variant in variants.items():
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
