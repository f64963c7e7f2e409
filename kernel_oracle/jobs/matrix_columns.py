"""Running the release matrix's columns: what each may spend, and several at once on a GPU.

Note [Matrix budget]
--------------------
A matrix over every release has a few dozen columns of distinct code, and most of them are releases
nobody deploys any more: given equal shares, the code SGLang ships today (the newest release among the
specs: its default, TRT-LLM-style, ``triton_v2`` and csgmv codes and its vision wrapper) got a few dozen
cases of a matrix's thousands.  Unknown bugs live in today's code, so the budget is split by what a
column is for:

* a **current** column (:func:`is_current`: one of its releases is the newest, or it is no release at
  all -- a FlashInfer engine, our kernels, a user's module) gets the matrix's ``--time`` (or
  ``--cases``): it is searched;
* every other column is a **regression** column: at most ``regression_cases`` cases
  (:data:`REGRESSION_CASES` by default), within the same clock.  Its introduced / fixed history comes
  from those cases, from the replays of absences (Note [Replayed absences]) and from the corpus, which
  are exact where a campaign is a sample.

The summary says how the cases fell (``current_cases``, ``regression_cases``, ``current_share``).

Columns run side by side where a device has cores to spare (:func:`kernel_oracle.jobs.side_by_side.slots`:
on a GPU one campaign per two cores, each in a child process with its own worker and CUDA context,
Note [Campaigns side by side]); the current columns start first, since they run longest, and the
regression columns fill the slots they leave.  A column whose child dies or raises is no silent gap:
its row says why it ran nothing and the matrix counts it in ``failed_columns`` (exit 3 when nothing
else fails).  On the CPU (one slot) the columns run one after another in this process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

__all__ = ["REGRESSION_CASES", "campaign_record", "case_split", "column_config", "failed_row", "is_current",
           "newest_release", "run_campaigns"]

# cases of a regression column: enough for a defect that fails most draws of an op (PR #28371's stale
# host ints fail every CUDA-graph case of its op) to show, while 27 such columns stay under a third of
# a matrix whose 13 current columns run a 150-s clock on a GPU
REGRESSION_CASES = 40


def newest_release(specs: list) -> Optional[str]:
    """The newest ``==X.Y.Z`` release among ``specs`` (None: no release spec)."""
    from kernel_oracle.harness.targets import TargetSpec

    releases = [s.release for s in (TargetSpec.parse(x) for x in specs) if s.release is not None]
    return max(releases, key=lambda r: tuple(int(n) for n in re.findall(r"\d+", r))) if releases else None


def is_current(members: list, newest: Optional[str]) -> bool:
    """Whether a column of ``members`` (specs, version order) runs today's code (see the Note)."""
    from kernel_oracle.harness.targets import TargetSpec

    parsed = [TargetSpec.parse(m) for m in members]
    return any(p.release is None or p.release == newest for p in parsed)


def column_config(config: dict, current: bool, regression_cases: int) -> dict:
    """The campaign settings of a column: ``config`` for a current one; for a regression one the same
    clock with at most ``regression_cases`` cases."""
    if current:
        return config
    budget = config.get("budget")
    return {**config, "budget": regression_cases if budget is None else min(budget, regression_cases)}


def campaign_record(tested: str, op: str, config: dict, out_dir: str, known_cases=()) -> dict:
    """One column's campaign record (in a child process side by side, or here); ``known_cases``: the corpus
    cases that name the findings they show (Note [Known cases] in fuzz/known_cases.py)."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, run_campaign

    try:
        return run_campaign(CampaignConfig(target=tested, op=op, out_dir=Path(out_dir), known_cases=known_cases,
                                           **config))
    except CampaignError as exc:
        raise CampaignError(f"{tested}: {exc}") from None


def run_campaigns(columns: list, op_of: Callable, config: dict, campaigns_dir: Path, *, device: str,
                  at_once: int, newest: Optional[str], regression_cases: int, on_record: Callable,
                  known_cases: Callable = lambda column: ()) -> None:
    """The campaign of each column in ``columns`` (:class:`~kernel_oracle.jobs.matrix.Column`s of
    distinct code), ``at_once`` at a time (``known_cases(column)``: its corpus cases);
    ``on_record(column, record, problem)`` as each ends
    (``problem``: None, or one line saying why the column has no record).  Raises ``CampaignError``
    for a column that cannot run when they run one after another, as a single campaign does."""
    from kernel_oracle.jobs.side_by_side import ChildCall, run_side_by_side

    current = {c.label: is_current(c.members, newest) for c in columns}
    order = sorted(columns, key=lambda c: not current[c.label])  # current first: they run longest
    calls = []
    for c in order:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{c.tested}-{c.family}")
        own = column_config(config, current[c.label], regression_cases)
        kwargs = dict(tested=c.tested, op=op_of(c), out_dir=str(campaigns_dir / slug),
                      config=own | ({"shares_gpu": True} if at_once > 1 else {}), known_cases=known_cases(c))
        calls.append(ChildCall(c.label, campaign_record, kwargs))
    by_label = {c.label: c for c in order}
    if at_once <= 1 or len(calls) <= 1:
        for call in calls:
            on_record(by_label[call.key], call.fn(**call.kwargs), None)
        return
    run_side_by_side(calls, at_once=at_once,
                     on_done=lambda d: on_record(by_label[d.key], d.result, d.problem))


def failed_row(problem: str) -> dict:
    """The run row of a column whose campaign gave no record."""
    return {"available": False, "reason": f"its campaign gave no record: {problem}", "declines": {}, "cases": 0,
            "findings": [], "known_cases": 0, "known_skipped": 0, "validation_gaps": 0, "failed": problem}


def case_split(runs: list) -> dict:
    """How a matrix's cases fell between current and regression columns (the runs that ran a campaign)."""
    ran = [r for r in runs if r.get("ran")]
    current = sum(r["cases"] for r in ran if r.get("current"))
    regression = sum(r["cases"] for r in ran if not r.get("current"))
    total = current + regression
    return {"current_cases": current, "regression_cases": regression,
            "current_share": round(current / total, 3) if total else None}
