"""Which features of SGLang's vision call a failure needs: the part of a root cause the input names.

Note [Needed features]
----------------------
A wrapper can get one feature of SGLang's call wrong and every other right: read k at q's offsets
when k has fewer heads than q (GQA), ignore a ``window_size``, ignore the sinks.  Each such defect
fails with the same symptom (values differ, or a read past a tensor's end), so without more the
three are one bucket (``mismatch | vision | vision | values``), and one defect hides another.
What tells them apart is the input: a defect of the GQA path needs GQA to show.

So after a failing case, :func:`needed_features` asks, feature by feature (in its family's
order), whether the case still fails the same way (the same bucket) without it
(:func:`without_feature`, one more case run): a feature whose removal keeps the failure is not
needed, and the search goes on from the case without it; one whose removal makes the case pass or
fail another way is needed.  Then each needed feature gets a second look: one defect shows as wrong
values or as a read past a tensor's end depending on the sizes (SGLang's wrapper reads k at q's
offsets: inside k when gaps pad it, past its end without them), so a feature whose removal turns
the failure into another one that needs only the remaining features, and that does not fail on its
own (every other feature removed), is not needed either (the gaps of a GQA case).  A feature that
fails on its own stays: a crash of GQA's read past k's end, which its reruns (a fresh process, other
allocations) repeat only as wrong values, is not given to an ignored window the case also had.  A
failure of another defect (a case with GQA and sinks whose read past k's end turns, without GQA,
into the ignored sinks' wrong values) needs a feature this case keeps, and leaves the attribution
alone.  The result
is a set of present features each of which the failure needs, given the others
(a local minimum: the greedy delta debugging of Zeller's ddmin, one feature at a time), and it joins
the bucket's key (:attr:`~harness.buckets.Bucket.needs`): two defects of two features are two findings,
and a failure that needs none (a defect of every call) keys as before.

Each family's record names its features (``Family.features``: a :class:`FeatureTable`, vision's in
:mod:`harness.features_vision`): a feature is removed by setting it to what SGLang's layer passes when the
model does not use it: ``H_kv`` = ``H``, no ``window_size``, no ``s_aux``, no ``softmax_scale`` (the
head-dim default), no indptr gaps.  Failures that depend on earlier calls rather than on the case
(FlashInfer's graph cache: :data:`STATEFUL_CAUSES`) are not attributed: their variant passes or fails for
another reason than the feature.  A family without a table has no such features (LoRA's config flags are
``Bucket.flags``, which describe a case and are not compared).

Standard library only at import time (reports read the features' words through :func:`describe`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from kernel_oracle.harness.family import families, family_names, get_family

__all__ = ["STATEFUL_CAUSES", "FeatureTable", "declined_in", "describe", "features_of", "needed_features",
           "with_needs", "without_feature"]

# causes that depend on what ran before the case: a variant cannot tell which feature they need
STATEFUL_CAUSES = ("GraphCacheHazard",)


@dataclass(frozen=True)
class FeatureTable:
    """One family's features of a call.  ``names``: those a failure may need, in the order they are tried;
    ``words``: each one's words in a headline; ``uses``: feature -> whether a problem has it, ``f(get)`` with
    ``get(field, default=None)`` reading the problem (a dataclass or its dict), for the needed features and the
    features a target may decline; ``neutral``: needed feature -> the fields that remove it; ``declinable``: the
    features a target may decline (``Target.declines``), named without the family's prefix."""

    names: tuple
    words: Mapping[str, str]
    uses: Mapping[str, Callable]
    neutral: Mapping[str, dict]
    declinable: tuple = ()


def _table(problem) -> Optional[FeatureTable]:
    family = problem.get("family") if isinstance(problem, dict) else getattr(problem, "family", None)
    return get_family(family).resolve("features") if family in family_names() else None


def _present(table: FeatureTable, problem, feature: str) -> bool:
    if isinstance(problem, dict):
        return bool(table.uses[feature](problem.get))
    return bool(table.uses[feature](lambda name, default=None: getattr(problem, name, default)))


def declined_in(problem, declines) -> list:
    """The features of ``declines`` (a target's ``Target.declines``) a problem (dataclass or dict) uses, by its
    family's table: the cases a campaign never draws for that target (a replay of another target's case checks
    this first)."""
    table = _table(problem)
    return [] if table is None else [f for f in declines if f in table.uses and _present(table, problem, f)]


def features_of(problem) -> tuple:
    """The features a problem (dataclass) has, in its family's order; ``()`` for a family without any."""
    table = _table(problem) if dataclasses.is_dataclass(problem) else None
    return () if table is None else tuple(f for f in table.names if _present(table, problem, f))


def without_feature(problem, feature: str):
    """``problem`` without ``feature`` (see the Note for what each removal sets), or None when it
    does not have it."""
    table = _table(problem)
    if table is None or feature not in table.neutral:
        raise ValueError(f"unknown feature {feature!r}; the features are {list(table.names if table else ())}")
    if feature not in features_of(problem):
        return None
    return dataclasses.replace(problem, **table.neutral[feature])


def needed_features(case, bucket, run: Callable) -> tuple:
    """The features of ``case`` its failure in ``bucket`` needs (Note [Needed features]; a stateful
    cause is not attributed).

    ``run(case) -> (verdict, bucket or None)`` runs one case (the campaign's, memoised and counted;
    its buckets carry their own ``needs``).
    A variant that cannot be built or run counts as "the feature is needed"."""
    if _stateful(bucket):
        return ()
    needs = _same_failure(case, bucket, run)
    for feature in needs:  # the second look (see the Note)
        got = _variant(case, feature, run)
        rest = tuple(f for f in needs if f != feature)
        if (got is not None and not _stateful(got) and set(got.needs) <= set(rest)
                and not _fails_alone(case, feature, run)):
            return rest
    return needs


def _fails_alone(case, feature: str, run: Callable) -> bool:
    """Whether ``case`` with ``feature`` and none of its other features fails: then the feature is a
    defect of its own, not a feature that only moves another defect's symptom (the second look keeps it)."""
    problem = case.problem
    for other in features_of(case.problem):
        if other != feature:
            problem = without_feature(problem, other)
    try:
        verdict, _ = run(dataclasses.replace(case, problem=problem))
    except Exception:  # noqa: BLE001 - a variant the harness cannot build says nothing about the feature
        return False
    return not verdict.ok


def _variant(case, feature: str, run: Callable):
    """The bucket of ``case`` without ``feature`` (None: it passes, or the harness cannot build it)."""
    try:
        verdict, got = run(dataclasses.replace(case, problem=without_feature(case.problem, feature)))
    except Exception:  # noqa: BLE001 - a variant the harness cannot build says nothing about the feature
        return None
    return None if verdict.ok else got


def _same_failure(case, bucket, run: Callable) -> tuple:
    """The greedy pass: the features without which ``case`` no longer fails in ``bucket``."""
    base = dataclasses.replace(bucket, needs=())
    for feature in features_of(case.problem):
        got = _variant(case, feature, run)
        if got is not None and dataclasses.replace(got, needs=()) == base:
            return got.needs  # the same failure without this feature: what the variant needs
    return features_of(case.problem)


def _stateful(bucket) -> bool:
    return any(s in bucket.cause for s in STATEFUL_CAUSES)


def with_needs(case, bucket, run: Callable):
    """``bucket`` with the ``needs`` of :func:`needed_features` (unchanged for a case without features)."""
    if bucket is None or not features_of(case.problem):
        return bucket
    return dataclasses.replace(bucket, needs=needed_features(case, bucket, run))


def describe(needs) -> Optional[str]:
    """``"with k/v of fewer heads than q (GQA/MQA)"`` for a bucket's needs, None for none."""
    known = {f: w for family in families() for f, w in (family.resolve("features") or _NONE).words.items()}
    words = [known.get(f, f) for f in needs or ()]
    return " and ".join(words) if words else None


_NONE = FeatureTable((), {}, {}, {})
