"""A campaign's known upstream issues with a trigger: recognise them, then stop running their trigger.

Note [Known-issue triggers] (in ``harness/triggers.py``) says what a trigger is.  A campaign holds one
:class:`KnownAvoidance`: :meth:`issue_of` tells whether a failure is such an issue (its example is then
recorded as Hypothesis shrank it, not minimised), :meth:`recorded` starts avoiding an issue once its
finding is recorded, and :meth:`skips` answers, before a case runs, whether it sets off the trigger of
an issue found already (counted per issue in ``skipped``, the summary's ``known_skipped``); it also skips
malformed metadata that broke the CUDA context twice in an op (:meth:`context_broken`).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["CONTEXT_BREAKS", "KnownAvoidance"]

# malformed cases of one op and mutation kind that broke the CUDA context before the kind is skipped: two
# show it is the kind, not one draw, and each costs a new worker (a new CUDA context)
CONTEXT_BREAKS = 2


class KnownAvoidance:
    """``issues``: the entries the campaign matches against (None: the default file's); ``target`` and
    ``release``: the campaign's target name and the release its record names."""

    def __init__(self, issues, target: str, release: Optional[str]) -> None:
        self.issues, self.target, self.release = issues, target, release
        self.avoided: list = []
        self.skipped: dict = {}  # known issue id -> cases not run for setting its trigger off
        self.broken: dict = {}  # (op, mutation kind) -> cases whose malformed metadata broke the CUDA context

    def _match(self, finding: dict):
        from kernel_oracle.harness.known_issues import match_known

        issue = match_known(finding, self.target, self.release, issues=self.issues)
        return issue if issue is not None and issue.trigger is not None else None

    def issue_of(self, case, verdict, bucket):
        """The known issue with a trigger that a failure of ``case`` is, or None."""
        return self._match({"target": self.target, "op": case.op, "kind": verdict.kind,
                            "message": verdict.message or "", "problem": case.to_dict(), "bucket": bucket.to_dict()})

    def recorded(self, finding: dict) -> None:
        """After ``finding`` is recorded: when it is a known issue with a trigger, avoid that trigger."""
        issue = self._match(finding)
        if issue is not None and issue not in self.avoided:
            self.avoided.append(issue)

    def context_broken(self, case) -> None:
        """``case``'s malformed metadata broke the CUDA context (a validation gap, Note [Malformed
        consequences]); from the second such case of its op and mutation kind, that pair is skipped."""
        key = (case.op, case.mutation.kind)
        self.broken[key] = self.broken.get(key, 0) + 1

    def skips(self, case) -> bool:
        """Whether ``case`` sets off the trigger of an issue found already, or repeats malformed metadata
        that broke the CUDA context twice in its op (then it is counted, not run)."""
        if case.mutation is not None and self.broken.get((case.op, case.mutation.kind), 0) >= CONTEXT_BREAKS:
            name = f"breaks the CUDA context: {case.op} {case.mutation.kind}"  # harness.malformed.BROKEN_CONTEXT
            self.skipped[name] = self.skipped.get(name, 0) + 1
            return True
        if not self.avoided:
            return False
        from kernel_oracle.harness.triggers import trigger_holds

        data = case.to_dict()
        for issue in self.avoided:
            if trigger_holds(issue.trigger, data):
                self.skipped[issue.id] = self.skipped.get(issue.id, 0) + 1
                return True
        return False
