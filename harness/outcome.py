"""A run's verdict and exit code, decided in one place (docs/semantics.md#exit-codes).

Note [Run outcome]
------------------
Every command (``fuzz``, ``run``, ``matrix``, ``compare``, ``mutants``, ``selfcheck``, ``repro``,
``report``, ``bench``) and the reports' status badge describe what happened as the same few facts and
hand them to :func:`run_outcome`, which applies one rule, first match wins:

========================================  ===============  ====
facts                                     verdict          exit
========================================  ===============  ====
a usage or I/O error                      ``usage``        2
interrupted (SIGINT / SIGTERM)            ``interrupted``  3
new findings (failed checks, survivors)   ``findings``     1
regressions                               ``regression``   1
a part could not run                      ``incomplete``   3
nothing was tested                        ``empty``        3
only known findings                       ``known``        0
otherwise                                 ``clean``        0
========================================  ===============  ====

A finding of an upstream target that matches ``harness/known_issues.toml`` is *known*: it is reported
with its link and does not make a run fail.  A run that tested nothing is never 0.  The caller decides
what counts as each fact (a campaign's ``incomplete`` status, the main job's failed parts, a matrix's
corpus entries that did not behave as recorded); the rule between the facts is only here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EXIT_CODES", "Outcome", "run_outcome"]

# verdict -> exit code, in the order the rule tries them
EXIT_CODES = {"usage": 2, "interrupted": 3, "findings": 1, "regression": 1, "incomplete": 3, "empty": 3,
              "known": 0, "clean": 0}

_REASONS = {"usage": "usage or I/O error", "interrupted": "interrupted", "findings": "new findings",
            "regression": "regressions", "incomplete": "incomplete: a part could not run",
            "empty": "tested nothing", "known": "only known upstream issues", "clean": "clean"}


@dataclass(frozen=True)
class Outcome:
    """``verdict`` (a key of :data:`EXIT_CODES`), its ``exit_code`` and a one-line ``reason``."""

    verdict: str
    exit_code: int
    reason: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Expected a non-negative int but got {name}={value!r}")
    return value


def run_outcome(*, new_findings: int = 0, known_findings: int = 0, regressions: int = 0,
                interrupted: bool = False, usage_error: bool = False, incomplete: bool = False,
                tested: bool = True) -> Outcome:
    """The verdict and exit code of a run (Note [Run outcome]).

    ``new_findings``: findings that fail the run (failed checks, surviving mutants, a reproduced case);
    ``known_findings``: findings that are known upstream issues; ``regressions``: what a comparison
    found worse; ``interrupted``: stopped by a signal; ``usage_error``: refused before or during the
    work for a usage or I/O error; ``incomplete``: a part could not run; ``tested``: at least one case,
    check or comparison ran."""
    new = _count("new_findings", new_findings)
    known = _count("known_findings", known_findings)
    worse = _count("regressions", regressions)
    facts = {"usage": usage_error, "interrupted": interrupted, "findings": new > 0, "regression": worse > 0,
             "incomplete": incomplete, "empty": not tested, "known": known > 0}
    verdict = next((v for v, holds in facts.items() if holds), "clean")
    reason = _REASONS[verdict]
    if verdict == "findings":
        reason = f"{new} new finding{'s' if new != 1 else ''}"
    elif verdict == "regression":
        reason = f"{worse} regression{'s' if worse != 1 else ''}"
    elif verdict == "known":
        reason = f"{known} known upstream issue{'s' if known != 1 else ''}, nothing new"
    return Outcome(verdict, EXIT_CODES[verdict], f"{reason} (exit {EXIT_CODES[verdict]})")
