"""Findings shared between the campaigns of one target and family through a shared example database
(Note [Campaigns] in :mod:`fuzz.campaign`: ``fuzz.cluster`` passes one Redis database to every worker)."""

from __future__ import annotations

import json

__all__ = ["replay_shared", "shared_findings_key"]


def shared_findings_key(target: str, family: str) -> bytes:
    """The example-database key under which campaigns of ``target`` x ``family`` share their findings'
    cases (``Case.to_json()`` bytes, one entry per finding)."""
    return f"kernel-oracle-findings:{target}:{family}".encode()


def replay_shared(search) -> None:
    """Run the cases other campaigns found (shared database only) in the running campaign ``search``
    (``fuzz.campaign._Search``): each is recorded as a finding there unless a finding of that campaign
    already covers its bucket (then it is one more hit)."""
    if search.database is None:
        return
    from kernel_oracle.harness.check import prepared_call, case_from_dict

    for raw in sorted(search.database.fetch(shared_findings_key(search.target, search.family))):
        if search.out_of_budget():
            return
        try:
            case = case_from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError):  # not ours or from another version: not a case
            continue
        if case.op not in search.ops or case.dtype not in search.dtypes:
            continue
        if search.upstream_contracts_only and case.category == "malformed":
            continue
        verdict, bucket = search.memo.get(case.to_json()) or search._execute(case)
        if verdict.ok:
            continue
        fid = search._known(bucket)
        if fid is not None:
            search._hit(fid, case, bucket)
        else:
            search._record(case, verdict, bucket, prepared_call(case, search.device))
    search.state.save()
