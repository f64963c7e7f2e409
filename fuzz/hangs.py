"""A case silent past its timeout is a hang only once a retry with a longer wait is silent too.

Note [Confirmed hangs]
----------------------
A campaign's case timeout can be short (the main job gives a short campaign share 1.5 s).  The
worker's waits for a core do not count against it (Note [Busy machines] in :mod:`fuzz.cpu_wait`), nor
does a first call's warm-up (Note [Workers] in :mod:`fuzz.worker`), but a correct case may still take
longer: a slower machine, a case larger than those the timeout was chosen for, a machine whose waits
cannot be measured.  Silence past the timeout is no defect of the target then, and a hang finding for
it would be a false alarm.  So when the worker returns a ``hang`` (:meth:`fuzz.worker.Worker.check`:
no answer in time, the worker killed), the campaign runs the same case once more, on a fresh worker,
waiting :func:`retry_wait_s`:

* an answer is the case's verdict (a pass, or a real failure, found as any other): no hang, and the
  case counts in the summary's ``slow_cases``, with one note that the case timeout was too short for
  the target's cases on this machine;
* silence again is the hang, its message saying both waits (``no answer within 1s, nor within 10s on
  a retry``).

The retry runs only where a new hang finding would be made, so a hang costs one retry per finding
and a slow machine a bounded number; otherwise the hang is reported as the worker saw it, its
message saying ``unconfirmed:`` and why:

* a hang finding of this campaign covers the case's bucket (the case is one more hit of it; a vision
  case whose needs turn out to differ is a new finding with that label);
* the campaign has run :data:`MAX_HANG_RETRIES` retries (counted in ``hang_retries``, kept across a
  resume);
* the clock has not the retry's time left (its wait plus a fresh worker's start, as long as the
  last start took) before the campaign's time plus its ``shrink_slack_s``, the most a campaign may run
  past its time: ``no time left for a retry``.  A budget of cases alone has no clock to overrun.

A case timeout of :data:`~fuzz.campaign_config.MAX_CASE_TIMEOUT_S` is itself the longest wait a
campaign gives a case, so its silence is the hang, without a retry.  Shrinking a hang (at most
``HANG_SHRINKS`` steps in :mod:`fuzz.campaign`, none by default) retries a silent step like any case
that would become the finding: the finding shows its last failing step, which must be a confirmed
hang, and a step its retry answers simply does not shrink it.  The cases that compute a vision hang's
needs (Note [Needed features] in :mod:`harness.features`) are retried the same way, within the same limit.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from kernel_oracle.fuzz.campaign_config import MAX_CASE_TIMEOUT_S
from kernel_oracle.fuzz.crashes import is_crash, judged_by_consequence

__all__ = ["MAX_HANG_RETRIES", "RETRY_FACTOR", "RETRY_MIN_S", "confirmed_check", "retry_wait_s"]

# The retry waits RETRY_FACTOR x the case timeout, at least RETRY_MIN_S, at most MAX_CASE_TIMEOUT_S.
# 4x: eight busy processes on two cores share each core four ways, so a case ran up to about four
# times slower than alone where waits for a core cannot be measured (a 1.5-s case against a 1-s
# timeout); it is also the factor a compiling worker gets for a compilation on a busy GPU host
# (fuzz.worker.COMPILE_GRACE_FACTOR).  10 s: a short case timeout (the main job's) leaves no room for
# a loaded host's scheduling; 10 s is over six times the slowest correct case seen there, and a true
# hang pays it once per finding.  MAX_CASE_TIMEOUT_S: the longest any campaign lets a case run.
RETRY_FACTOR = 4.0
RETRY_MIN_S = 10.0
# retries per campaign: a hanging target needs one per hang finding (hangs share one bucket per
# family, split only by a vision case's needs), and after three slow cases the note already tells
# the user the case timeout is too short for the machine; each retry costs up to its wait (10 to
# 120 s) plus a fresh worker's start, so three bound what confirmations add to a campaign
MAX_HANG_RETRIES = 3


def retry_wait_s(case_timeout_s: float, first_wait_s: float) -> Optional[float]:
    """Seconds the retry of a case silent past ``case_timeout_s`` waits (the first try waited
    ``first_wait_s``: a compiling worker's compile grace included, which the fresh worker needs
    again); None when the case timeout is already the longest wait (no retry)."""
    wait_s = min(MAX_CASE_TIMEOUT_S, max(RETRY_FACTOR * case_timeout_s, RETRY_MIN_S))
    return max(wait_s, first_wait_s) if wait_s > case_timeout_s else None


def confirmed_check(search, case):
    """The worker's answer to ``case`` (:meth:`fuzz.worker.Worker.check`: a ``Verdict``, or an
    ``Observed`` crash or hang), a hang retried once first (Note [Confirmed hangs]) and a crash replayed
    in a fresh worker (Note [Confirmed crashes]).  ``search``: the
    running campaign (``fuzz.campaign._Search``), whose state counts the retries and slow cases."""
    worker, state = search.worker, search.state

    def ask(wait_s=None):
        return worker.check(search.target, case.to_dict(), sources=search.config.sources, wait_s=wait_s)

    previous, search.previous_case = search.previous_case, case  # the case before this one on the worker
    answer = ask()
    if is_crash(answer):  # Note [Confirmed crashes]: what ran before it, for the replay of its example
        search.previous_case = None
        if previous is not None and not judged_by_consequence(search, case):
            search.crash_previous[case.to_json()] = previous
        return answer
    wait_s = retry_wait_s(search.case_timeout_s, worker.last_wait_s) if _silent(answer) else None
    if wait_s is None:
        return answer
    search.previous_case = None
    why = _why_not(search, case, answer, wait_s)
    if why is not None:
        return _with(answer, f" (unconfirmed: {why})")
    state.hang_retries += 1
    retry = ask(wait_s)
    if _silent(retry):
        return _with(answer, f", nor within {wait_s:g}s on a retry")
    if not (_observed(retry) and retry.kind == "crash"):  # it answered: the case was slow, not hung
        state.slow_cases += 1
        note = (f"a case answered only when retried with a longer wait: the case timeout of "
                f"{search.case_timeout_s:g}s is too short for this target's cases on this machine (slow_cases in "
                f"the summary counts such cases; each is judged by its retry, none is a hang finding)")
        if note not in state.notes:
            state.notes.append(note)
    return retry


def _why_not(search, case, answer, wait_s: float) -> Optional[str]:
    """Why a silent case gets no retry (None: it does)."""
    from kernel_oracle.harness.buckets import bucket_of
    from kernel_oracle.harness.check import Verdict

    if search._known(bucket_of(case, Verdict(False, "hang", answer.message), observed=answer)) is not None:
        return "one more case of a hang finding"
    if search.state.hang_retries >= MAX_HANG_RETRIES:
        return f"the campaign's retries ({MAX_HANG_RETRIES}) are spent"
    start_s = search.worker.startup_s[-1] if search.worker.startup_s else 0.0
    if search.time_s is not None and search.elapsed() + start_s + wait_s > search.time_s + search.shrink_slack_s:
        return "no time left for a retry"
    return None


def _observed(answer) -> bool:
    from kernel_oracle.harness.check import Observed

    return isinstance(answer, Observed)


def _silent(answer) -> bool:
    return _observed(answer) and answer.kind == "hang"


def _with(answer, words: str):
    """The hang ``answer`` with ``words`` after its waits (before ``; worker killed and replaced``)."""
    head, sep, tail = (answer.message or "no answer").partition("; ")
    return dataclasses.replace(answer, message=f"{head}{words}{sep}{tail}")
