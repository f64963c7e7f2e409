"""A finding that is a known upstream bug says which: the corpus's minimal cases, run after the search.

Note [Known cases]
------------------
The real-bug corpus (``corpus/``, :mod:`kernel_oracle.jobs.bug_corpus`) holds each upstream defect's
minimal cases.  A campaign of a target the corpus knows (``fuzz --targets sglang==0.5.12``) is given
those cases (``CampaignConfig.known_cases``: ``(label, Case)`` pairs, the label the entry's ``id``,
``title`` and ``upstream`` link) and runs each once after its search, beside the target like any case
(not counted: they are the corpus's cases, not the search's).  A case that fails in the root-cause
bucket of a finding names the entry on that finding (its ``corpus`` list): the console prints
``matches corpus entry sglang-pr-28371: ... (https://github.com/sgl-project/sglang/pull/28371)``.  The
cases of an entry of a family whose ops share one routing (its record's ``corpus_across_ops``: the kv_b
LoRA steps) also run for every other op of the family that the target has (one defect of the shared
routing shows in every step: PR #28371 skipped segments in all four).  Matching is by
bucket, so a finding names an entry only when the entry's own case fails with the same root cause.  A
case of a feature no command sends the target (Note [Cases outside a campaign] in :mod:`fuzz.isolated`)
is not run.
"""

from __future__ import annotations

import dataclasses

__all__ = ["expand_ops", "name_known_findings"]


def expand_ops(case, ops) -> list:
    """``case`` and, for a case of a family whose ops share one routing (its record's ``corpus_across_ops``:
    LoRA), the same problem for each other op of ``ops``."""
    from kernel_oracle.harness.family import get_family

    out = [case]
    if get_family(case.family).corpus_across_ops:
        for op in ops:
            if op != case.op:
                out.append(type(case)(dataclasses.replace(case.problem, op=op), case.mutation))
    return out


def _verdict(search, case):
    from kernel_oracle.harness.check import Verdict, check_case

    if case.declined(search.info.get("declines") or {}, never_sent=True):  # Note [Cases outside a campaign]
        return None
    if search.local_target is not None:
        return check_case(search.local_target, case, search.device)
    answer = search.worker.check(search.target, case.to_dict(), sources=search.config.sources)
    return answer if isinstance(answer, Verdict) else None  # a hang or crash names nothing


def name_known_findings(search) -> None:
    """Run the known cases of ``search`` (a running ``fuzz.campaign._Search``) and name each finding
    whose bucket one of them fails in (Note [Known cases])."""
    from kernel_oracle.harness.buckets import bucket_of_record

    findings = search.state.findings
    if not findings or not search.config.known_cases:
        return
    buckets = [(bucket_of_record(f), f) for f in findings]
    ops = tuple(getattr(search, "ops", ()))
    for label, case in search.config.known_cases:
        for variant in expand_ops(case, ops):
            if variant.op not in ops:
                continue
            try:
                verdict = _verdict(search, variant)
            except Exception:  # noqa: BLE001 - a corpus case that cannot run here names nothing
                continue
            if verdict is None or verdict.ok or verdict.bucket is None:
                continue
            for bucket, finding in buckets:
                named = finding.setdefault("corpus", [])
                if bucket.covers(verdict.bucket) and all(n.get("id") != label.get("id") for n in named):
                    named.append(dict(label))
    for f in findings:
        if not f.get("corpus"):
            f.pop("corpus", None)
