"""A finding's smallest example, minimised after the search within the campaign's budget.

:func:`harness.simplify.minimise` does the work (Note [Minimal examples]); this module gives it the
campaign's way to run a variant: remembered verdicts first, each new one a counted case of the shrink
allowance (and at most :data:`MINIMISE_CASES` of them, the needed-features runs of each failing variant
included), a variant the problem's own rules refuse skipped, and an accepted malformation of the
validation-gap table neither an instance of the finding nor a pass.
"""

from __future__ import annotations

__all__ = ["MINIMISE_CASES", "minimal_example"]

# cases one finding's minimisation may run
MINIMISE_CASES = 48


def minimal_example(search, case, verdict, bucket):
    """The :class:`~harness.simplify.Minimal` of a failing case of ``search`` (a running
    ``fuzz.campaign._Search``).  A crash or a hang is kept as shrunk (each variant would cost a fresh
    worker or a timeout)."""
    from kernel_oracle.fuzz.campaign_config import HarnessError
    from kernel_oracle.harness.simplify import Minimal, minimise

    if bucket.kind in ("crash", "hang"):
        return Minimal(case, verdict, bucket, [], [])
    start = search.state.executed

    def run(variant):
        if variant.to_json() in search.memo:
            result = search.memo[variant.to_json()]
        elif search.out_of_budget(extra=search.allowance) or search.state.executed - start >= MINIMISE_CASES:
            return None
        else:
            try:
                result = search._execute(variant)
            except HarnessError:  # a variant the problem's own rules refuse: not the target's failure
                return None
        return (result[0], None) if search._gap(variant, result[0], count=False) else result

    return minimise(case, verdict, bucket, run)
