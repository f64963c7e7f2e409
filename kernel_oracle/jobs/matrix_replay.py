"""A finding's example replayed on the other columns of its lane: "fixed in" only where it passes.

Note [Replayed absences]
------------------------
A campaign is a random search: a bucket that a column's campaign did not meet within its budget
may still be there (SGLang 0.5.17's vision column ran 137 cases in 10 s on two CPU cores and met
neither the ignored window nor the GQA offsets of 0.5.16's, whose file it changed).  Read as
history, that absence says "fixed in 0.5.17": a false claim about a release.  So after the
campaigns, :func:`replay_absences` runs each finding's example (its smallest case) on every other
column of the same lane (same target name, op family and configuration) that ran its own campaign
and has no finding in that bucket.  A replay that fails in the same bucket (its ``needs`` found
again on that column's code, the frame compared as ``file:function``) is a *replayed* cell: the bucket is
present there, the matrix shows ``replay`` instead of 0, and "introduced in" / "fixed in" count it.
A replay that passes is evidence of a fix; the cell stays 0.  Replays run in one worker
(:class:`~kernel_oracle.fuzz.worker.Worker`), so a case that crashes the target costs a restart, not
the matrix; hangs are not replayed (each would cost the case timeout), nor a case using a feature the
column's target declines (``Target.declines``, any family's: 0.5.10's wrapper is never given a window,
0.5.10's csgmv expand no output view); a case
whose metadata travels in ``forward_metadata`` replays as keywords on a release whose callers pass
no ``forward_metadata`` (before 0.5.16: the same call, the older spelling).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

__all__ = ["MAX_REPLAYS", "replay_absences", "row_bucket"]

MAX_REPLAYS = 400  # replays per matrix at most (a finding x column product can grow; each costs a case)


def row_bucket(finding: dict):
    """The bucket of a finding record as a matrix row keys it: the frame as ``file:function`` (releases
    load their modules under private names)."""
    from kernel_oracle.harness.buckets import bucket_of_record

    b = bucket_of_record(finding)
    return dataclasses.replace(b, frame=b.frame.rpartition(".")[2]) if b.frame else b


def _replayable(finding: dict, declines: dict) -> Optional[dict]:
    """The finding's case as a target declining ``declines`` can be given it: the case its family's record
    rewrites for those declines (``Family.for_declines``: a vision case whose metadata travels in
    ``forward_metadata`` goes as keywords to a release whose callers pass none, the same call: every release
    takes the keywords); None when it uses another declined feature (any family's: Note [Cases outside a
    campaign] in :mod:`kernel_oracle.fuzz.isolated`) or is no case at all."""
    from kernel_oracle.harness.check import case_from_dict
    from kernel_oracle.harness.family import FAMILY_OF, get_family

    case_dict = finding["problem"]
    family = FAMILY_OF.get(str((case_dict.get("problem") or {}).get("family")))
    adapt = get_family(family).resolve("for_declines") if family is not None else None
    if adapt is not None:  # the same call in a form the target takes (vision: the keywords)
        case_dict = adapt(case_dict, declines)
    try:
        case = case_from_dict(case_dict)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return None if case.declined(declines) else case_dict


def _attributed(check: Callable, spec: str, case_dict: dict):
    """The bucket of ``case_dict`` on ``spec`` as a row keys it (its ``needs`` found there, Note [Needed
    features]), or None when it passes."""
    from kernel_oracle.harness.check import case_from_dict
    from kernel_oracle.harness.features import with_needs

    memo: dict = {}

    def run(case):
        key = case.to_json()
        if key not in memo:
            got = check(spec, case.to_dict())
            memo[key] = (_Passed(got is None), None if got is None else with_needs(case, got, run))
        return memo[key]

    got = run(case_from_dict(case_dict))[1]
    return None if got is None else dataclasses.replace(got, frame=got.frame.rpartition(".")[2]) if got.frame else got


@dataclasses.dataclass(frozen=True)
class _Passed:
    ok: bool


def _worker_check(device: str, sources) -> tuple:
    """``(check(spec, case_dict) -> bucket or None, close)`` through one worker."""
    from kernel_oracle.fuzz.worker import Worker
    from kernel_oracle.harness.check import Verdict

    worker = Worker(device)

    def check(spec: str, case_dict: dict):
        answer = worker.check(spec, case_dict, sources=sources)
        if isinstance(answer, Verdict):
            return None if answer.ok else answer.bucket
        return None  # a hang or a dead worker: not the same bucket as a finding's

    return check, worker.close


def replay_absences(runs: list, *, device: str = "cpu", sources=None, check: Optional[Callable] = None,
                    log=None) -> int:
    """Replay every finding of ``runs`` (the matrix's run rows: ``spec``, ``family``, ``lane``,
    ``tested``, ``same_as``, ``available``, ``cases``, ``findings``) on the columns of its lane that
    lack its bucket (see the Note); each confirmed one is appended to that run's ``replayed`` list
    as ``{"bucket": its row's label, "from": spec, "id": finding id}``.  ``check(spec, case_dict)`` -> the
    failing case's bucket or None (default: one worker on ``device``).  Returns the replays run."""
    own = [r for r in runs if r.get("available") and r.get("cases") and r.get("ran", True)]
    buckets = {id(r): {row_bucket(f) for f in r["findings"]} for r in own}
    close = None
    if check is None and len(own) > 1:
        check, close = _worker_check(device, sources)
    done = 0
    try:
        for src in own:
            for f in src["findings"]:
                if f.get("kind") == "hang" or not isinstance(f.get("problem"), dict):
                    continue
                want = row_bucket(f)
                for dst in own:
                    if dst is src or dst.get("lane") != src.get("lane") or want in buckets[id(dst)]:
                        continue
                    case_dict = _replayable(f, dst.get("declines") or {})
                    if case_dict is None:
                        continue  # a case that target is never given (its callers never pass the feature)
                    if done >= MAX_REPLAYS:
                        return done
                    done += 1
                    got = _attributed(check, dst["tested"], case_dict)
                    if got == want:
                        buckets[id(dst)].add(want)
                        dst.setdefault("replayed", []).append({"bucket": want.label, "from": src["spec"],
                                                               "id": f.get("id")})
                        if log is not None:
                            log(f"{dst['spec']}: {src['spec']}'s {f.get('id')} fails here too on replay "
                                f"({want.label})")
    finally:
        if close is not None:
            close()
    return done
