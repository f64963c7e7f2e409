"""A campaign's findings of one root cause folded into one: what its record, console and reports show.

Note [One root cause across ops]
--------------------------------
While a campaign searches, a mismatch's bucket names its op (Note [Buckets] in :mod:`harness.buckets`):
nothing else yet tells the failures of two ops apart, so each op that shows a defect gets a finding of its
own, shrunk and minimised.  Once its minimal example is known, so is what the defect depends on (Note
[Minimal examples] in :mod:`harness.simplify`), and a defect of the routing every op shares shows it: SGLang
0.5.12's stale host ints (PR #28371) fail all four split steps, each example passing once the host ints
count the replayed batch.  So the record keys a mismatch whose minimal example depends on some metadata on
that dependence instead of its op (:func:`root_bucket`), and findings of one key are one finding; so are
findings that one bug-corpus entry names (Note [Known cases] in :mod:`fuzz.known_cases`).

The folded finding is the first one found, carrying the others' ops (``ops``, and ``op_counts``: failing
cases per op), counts, dtypes, regions, corpus entries and malformed sightings; its examples start with the
others' own smallest examples (one per op), and ``folded`` lists their ids (their case files stay in
``cases/``).  A mismatch with no dependence keeps its op in its key: two ops that are wrong everywhere may
well be two defects.  Standard library only (reports read it).
"""

from __future__ import annotations

from typing import Iterator, Optional

from kernel_oracle.harness.headline import dtypes_of

__all__ = ["fold_findings", "root_bucket"]


def root_bucket(finding: dict) -> Optional[dict]:
    """The bucket dict of ``finding`` keyed on its root cause: a mismatch whose minimal example depends on
    some metadata on that (``depends``, no ``op``: :class:`harness.buckets.Bucket`); any other one as
    stored; None where it stores none."""
    stored = finding.get("bucket")
    if not isinstance(stored, dict):
        return None
    depends = finding.get("depends_on") or ()
    if stored.get("kind") != "mismatch" or not depends:
        return stored
    return {**stored, "op": "", "depends": sorted(depends)}


def _keys(finding: dict) -> Iterator[tuple]:
    bucket = finding.get("bucket") or {}
    if bucket.get("depends"):
        yield ("depends", bucket.get("kind"), bucket.get("family"), bucket.get("cause"),
               tuple(bucket.get("needs") or ()), tuple(bucket["depends"]))
    for entry in finding.get("corpus") or ():
        yield ("corpus", finding.get("kind"), entry.get("id"))


def _example(finding: dict) -> dict:
    return {k: finding[k] for k in ("op", "dtype", "shape_class", "problem") if k in finding}


def _merge(base: dict, others: list) -> dict:
    rows = [base, *others]
    merged = dict(base)
    merged["ops"] = list(dict.fromkeys(op for r in rows for op in r.get("ops") or [r.get("op")] if op))
    counts: dict = {}
    for r in rows:
        for op, n in (r.get("op_counts") or {r.get("op"): r.get("count", 1)}).items():
            counts[op] = counts.get(op, 0) + int(n or 0)
    merged["op_counts"] = counts
    merged["count"] = sum(int(r.get("count", 1) or 1) for r in rows)
    merged["dtypes"] = dtypes_of({"dtypes": [d for r in rows for d in dtypes_of(r)]})
    merged["regions"] = list(dict.fromkeys(x for r in rows for x in r.get("regions") or ()))
    merged["examples"] = [_example(r) for r in others] + [e for r in rows for e in r.get("examples") or ()]
    corpus = {e.get("id"): e for r in rows for e in r.get("corpus") or ()}
    if corpus:
        merged["corpus"] = list(corpus.values())
    seen: dict = {}
    for r in rows:
        for kind, n in (r.get("malformed_sightings") or {}).items():
            seen[kind] = seen.get(kind, 0) + int(n)
    if seen:
        merged["malformed_sightings"] = seen
    merged["folded"] = [r["id"] for r in others] + [i for r in rows for i in r.get("folded") or ()]
    return merged


def fold_findings(findings: list) -> list:
    """``findings`` (record rows, each with its hits merged) with each mismatch keyed on its root cause
    (:func:`root_bucket`) and the rows of one root cause folded into the first (Note [One root cause
    across ops]); the order of first appearance is kept.  Headlines are the caller's to (re)build."""
    rows = [dict(f, bucket=root_bucket(f)) if isinstance(f.get("bucket"), dict) else dict(f) for f in findings]
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict = {}
    for i, row in enumerate(rows):
        for key in _keys(row):
            j = first.setdefault(key, i)
            parent[max(find(i), find(j))] = min(find(i), find(j))
    groups: dict = {}
    for i in range(len(rows)):
        groups.setdefault(find(i), []).append(rows[i])
    return [_merge(members[0], members[1:]) if len(members) > 1 else members[0] for members in groups.values()]
