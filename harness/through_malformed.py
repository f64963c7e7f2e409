"""One defect seen through malformed input is the defect of the valid input that shows it too.

Note [One defect through malformed input]
-----------------------------------------
A target without our strict validation that accepts malformed metadata and then changes rows the
valid part defines (``defined rows changed``, Note [Malformed consequences] in :mod:`harness.malformed`)
is at fault, but not necessarily for a reason of the malformation: a kernel that drops each segment's
last row drops it next to a bad slot index too, and one that ignores the permutation writes the
wrong rows of the intact segments once a broken segment routes them to another slot.  Reporting that
as a second finding ("accepts negative_slot and defined rows changed") would split one defect in
two and point the reader at the metadata instead of the code.

:func:`valid_failure` therefore checks the valid inputs nearest to the malformed one, which its family's
valid part names (``ValidPart.neighbours``, :mod:`harness.malformed`): its valid part (the problem without the
mutation) and, for a LoRA case, for each segment the mutation broke, the problem with that segment routed to
each other slot of the batch and the problem without that segment (:mod:`harness.malformed_lora`).  The first of
them that fails is the verdict, with ``seen_through`` naming the mutation: the campaign records that
valid case as the example of the one defect and lists the malformed sighting under it.  When all of
them pass, the malformation is what broke the rows, and the validation-gap finding stands.  It runs
only for ``defined rows changed`` (rare, and already a failure), at most a few extra calls.
"""

from __future__ import annotations

from typing import Callable, Optional

__all__ = ["valid_failure"]

# the neighbours checked per malformed case, at most: each is one call of the target
MAX_NEIGHBOURS = 12


def valid_failure(case, call, clean_call, check: Callable) -> Optional[object]:
    """The failing verdict of the first valid neighbour of the malformed ``case`` (``check(problem) ->
    Verdict`` of the problem without a mutation), marked ``seen_through`` with the mutation's kind, or
    None when every neighbour passes."""
    from kernel_oracle.harness.malformed import valid_part

    part = valid_part(case)
    if clean_call is None or part is None:
        return None
    for i, problem in enumerate(part.neighbours(case.problem, call, clean_call)):
        if i >= MAX_NEIGHBOURS:
            break
        try:
            verdict = check(problem)
        except (ValueError, TypeError, IndexError):  # a neighbour the problem's own rules refuse: skip it
            continue
        if not verdict.ok:
            verdict.seen_through, verdict.valid_problem = case.mutation.kind, problem
            return verdict
    return None
