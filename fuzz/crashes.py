"""A crash is the finding of the case that caused it only once a fresh process reproduces it.

Note [Confirmed crashes]
------------------------
A worker checks every case with the device synchronised after the target's call (``harness.check.execute``),
so an asynchronous CUDA error of a kernel surfaces in the case that launched it.  Still, what a crash
says about *this* case is not certain: a library may keep state between calls (FlashInfer caches a cuDNN
graph per key, and a key that misses a property replays another call's graph), a kernel of an earlier
case may have corrupted device memory that this case reads, and a loaded machine can kill a worker for
reasons of its own.  A crash finding that a user cannot reproduce is a false alarm, so when the worker
dies on a case whose crash no finding of the campaign covers yet, the campaign shrinks it as any failure
and then replays the minimal example on a fresh worker before it records it (:func:`confirmed_crash`):

* the case alone crashes again: the crash is the case's (a finding as before);
* it passes alone: the case that ran just before it on the dead worker runs first, then the case again;
  a crash now is a finding of the pair (its message says so, and the finding records the earlier case
  under ``after_case``: a sequence-dependent defect, such as a cache keyed on too little);
* it passes both times: no finding.  The case's verdict is the replay's, and the crash is kept in the
  summary's ``unconfirmed_crashes`` (its message and case) with a note, so nothing is lost.

Each confirmation costs a worker's start once more (twice when it needs the case before it); at most
:data:`MAX_CRASH_CONFIRMS` a campaign (then a crash is recorded as the worker saw it, ``unconfirmed:`` in
its message), and a crash that a finding covers already is one more hit of it, with no replay.  Which
case ran before a crash is remembered per crashing case (``crash_previous``) when the worker answers.  A crash of malformed metadata on a
target without strict validation is judged by its consequence instead (Note [Malformed consequences]).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["MAX_CRASH_CONFIRMS", "confirmed_crash", "fault_verdict", "is_crash", "judged_by_consequence"]

# replays per campaign: a new crash class needs one (two when it needs the case before it); three
# bound what confirmations add to a campaign whose target crashes often
MAX_CRASH_CONFIRMS = 3


def is_crash(answer) -> bool:
    from kernel_oracle.harness.check import Observed

    return isinstance(answer, Observed) and answer.kind == "crash"


def confirmed_crash(search, case, verdict):
    """The verdict to record for ``case``, the minimal example of a crash finding (``verdict``), or None
    when no replay reproduces it (see the Note: then it is kept in ``unconfirmed_crashes``).  The
    replays run on the campaign's worker, restarted before each."""
    if verdict.kind != "crash":
        return verdict
    why = _why_not(search, case, verdict)
    if why is not None:
        return dataclasses.replace(verdict, message=f"{verdict.message} (unconfirmed: {why})")
    worker, state = search.worker, search.state
    previous = search.crash_previous.get(case.to_json())

    def ask(c):
        return worker.check(search.target, c.to_dict(), sources=search.config.sources)

    state.crash_confirms += 1
    worker.kill()  # a fresh process: nothing another case did is left in it
    if is_crash(alone := ask(case)):
        return verdict
    if previous is not None:
        worker.kill()
        ask(previous)
        if is_crash(ask(case)):
            search.after_case[case.to_json()] = previous
            return dataclasses.replace(verdict, message=f"{verdict.message}; it crashes only after the case "
                                                        f"before it on the same worker (the case alone passes "
                                                        f"in a fresh process)")
    if not _answered(alone):  # the replay hung: the crash stands, unconfirmed
        return dataclasses.replace(verdict, message=f"{verdict.message} (unconfirmed: the replay gave no answer)")
    search.memo[case.to_json()] = (alone, None if alone.ok else alone.bucket)  # its verdict is the replay's
    state.unconfirmed_crashes.append({"message": verdict.message, "problem": case.to_dict()})
    note = ("a worker crashed on a case that passed when replayed alone in a fresh process (and after the case "
            "before it): no finding; unconfirmed_crashes in the summary lists each such crash with its case")
    if note not in state.notes:
        state.notes.append(note)
    return None


def _answered(answer) -> bool:
    from kernel_oracle.harness.check import Observed

    return not (isinstance(answer, Observed) and answer.kind in ("crash", "hang"))


def _why_not(search, case, verdict) -> Optional[str]:
    """Why a crash gets no replay (None: it does)."""
    if search.worker is None:
        return "the campaign runs its target in its own process (--no-isolate)"
    if search.state.crash_confirms >= MAX_CRASH_CONFIRMS:
        return f"the campaign's crash replays ({MAX_CRASH_CONFIRMS}) are spent"
    return None


def judged_by_consequence(search, case) -> bool:
    """Whether a crash of ``case`` is judged by its consequence, not replayed: malformed metadata on a
    target without strict validation (Note [Malformed consequences])."""
    return case.mutation is not None and search.info.get("strict") is False and not search.config.with_malformed


def fault_verdict(search, case, answer):
    """The verdict of a worker's ``answer`` to ``case`` (:func:`fuzz.worker.verdict_of`: a verdict stays one, a
    hang or crash is a finding of that kind), except a broken CUDA context on malformed metadata that a lenient
    target accepted: a validation gap of that consequence (and the mutation, seen so twice, is no longer drawn
    for the op: :class:`fuzz.known_avoidance.KnownAvoidance`)."""
    from kernel_oracle.fuzz.worker import verdict_of
    from kernel_oracle.harness.check import Verdict
    from kernel_oracle.harness.malformed import BROKEN_CONTEXT, breaks_context

    if is_crash(answer) and judged_by_consequence(search, case) and breaks_context(answer):
        search.known.context_broken(case)
        return Verdict(False, "validation-gap", f"target crashed: {answer.message}", consequence=BROKEN_CONTEXT)
    return verdict_of(case, answer)
