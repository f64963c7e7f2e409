"""The cases a campaign draws, known before it draws them.

Note [The campaign's own stream]
--------------------------------
A campaign (:mod:`fuzz.campaign`) searches in Hypothesis runs of :data:`TIME_CHUNK_EXAMPLES` examples
(a time-boxed one; a budgeted one sizes its runs by the cases left), run ``r`` seeded with
:func:`run_seed` ``(seed, r)``, over the strategy :func:`campaign_strategy` builds from the target's
description.  While no case fails, what a run draws depends on nothing else: not on the verdicts, the
timing, the device or the other runs (a test draws the same cases here and in a real campaign, in the
same order).  A failure changes only the run it happens in (Hypothesis shrinks there) and, through the
example database, the replays at the start of later runs.

So the compile-only children beside the main job's campaigns (Note [Parallel precompilation] in
:mod:`fuzz.precompile`) compile the cases our LoRA campaign is about to run, run by run
(:func:`predicted_run`), before the fixed variant list: the variants it meets come in the order it
meets them, and a child is usually done with a run's new ones before the campaign reaches that run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["PREDICTED_RUNS", "TIME_CHUNK_EXAMPLES", "CampaignStream", "campaign_strategy", "declined_in_family",
           "excluded_dtypes", "predicted_run", "run_seed"]

# examples per Hypothesis run of a time-boxed campaign: its budget is checked between runs (once the time is
# spent, examples return at once but Hypothesis would keep generating them)
TIME_CHUNK_EXAMPLES = 25
# runs a precompile child predicts before the fixed variant list: 1,000 cases, twice what our LoRA campaign
# runs in the main job's window with a warm cache (docs/BENCHMARKS.md)
PREDICTED_RUNS = 40


@dataclass(frozen=True)
class CampaignStream:
    """What fixes a time-boxed campaign's stream of cases besides its target: the job's ``seed``, the size
    preset ``limits``, ``upstream_contracts_only``; ``runs``: how many of its runs to predict."""

    seed: int
    limits: str
    upstream_contracts_only: bool
    runs: int = PREDICTED_RUNS

    def cases(self, info: dict, family: str, runs: Sequence[int]):
        """The cases of each run in ``runs``, run by run (an empty stream where the target has no op or
        dtype of ``family``)."""
        _, _, strategy = campaign_strategy(info, family, family, self.limits,
                                           upstream_contracts_only=self.upstream_contracts_only)
        if strategy is None:
            return
        for run in runs:
            yield from predicted_run(strategy, self.seed, run)


def run_seed(seed: int, run: int) -> int:
    """The Hypothesis seed of run ``run`` (1, 2, ...) of a campaign of ``seed``."""
    return seed * 1_000_003 + run


def campaign_strategy(info: dict, family: str, op: str, limits: str, *, upstream_contracts_only: bool,
                      wanted_dtypes: Optional[Sequence[str]] = None) -> tuple:
    """(ops, dtypes, strategy) of a campaign of ``op`` (a family, or a comma list of its ops) on the target that
    ``info`` describes (``Target.to_record()``, as the worker describes it): the entry points it has, the
    dtypes it does not exclude (of ``wanted_dtypes``, None: all), malformed metadata unless
    ``upstream_contracts_only``, sizes around the blocks of its tile model of ``family`` (Note [Tile-aware sizes]
    in :mod:`kernel_oracle.fuzz.strategies_tiles`); the strategy is None where no op or no dtype is left."""
    from kernel_oracle.fuzz.strategies import ALL_DTYPES, cases
    from kernel_oracle.harness.family import campaign_ops

    entries = set(info.get("entry_points") or ())
    excluded = excluded_dtypes(info, family)
    wanted = campaign_ops(op)[1]
    ops = tuple(o for o in wanted if o in entries)
    dtypes = tuple(d for d in ALL_DTYPES if d not in excluded and (wanted_dtypes is None or d in wanted_dtypes))
    if not ops or not dtypes:
        return ops, dtypes, None
    categories = ("valid", "partial", "upstream") + (() if upstream_contracts_only else ("malformed",))
    strategy = cases(family, categories=categories, dtypes=dtypes, ops=ops, limits=limits,
                     declines=tuple(d for d in info.get("declines") or () if declined_in_family(family, d)),
                     tiles=(info.get("tiles") or {}).get(family))
    return ops, dtypes, strategy


def declined_in_family(family: str, feature: str) -> bool:
    """Whether a target's declined ``feature`` belongs to ``family``: a feature named with a registered
    family's prefix (``lora.``, ``csgmv.``) is that family's; one without is the family's whose features
    name it (vision's call features: ``FeatureTable.declinable`` of its record's ``features``)."""
    from kernel_oracle.harness.family import FAMILY_OPS, get_family

    owner = feature.partition(".")[0]
    if owner in FAMILY_OPS:
        return owner == family
    table = get_family(family).resolve("features") if family in FAMILY_OPS else None
    return table is not None and feature in table.declinable


def left_out_notes(info: dict, target: str, family: str) -> list:
    """The record's notes on what the campaign of ``family`` on the target ``info`` describes leaves out:
    the dtypes it excludes, and what it declines (LoRA: upstream contracts; vision: features of the call)."""
    notes = [f"{target}: {d} not fuzzed: {why}" for d, why in excluded_dtypes(info, family).items()]
    return notes + [f"{target}: no {feature} cases: {why}" for feature, why in (info.get("declines") or {}).items()
                    if declined_in_family(family, feature)]


def excluded_dtypes(info: dict, family: str) -> dict:
    """dtype -> reason, for the dtypes the target that ``info`` describes does not take in ``family``
    (``Target.excluded_for`` on the target's record)."""
    return {**(info.get("excluded_dtypes") or {}), **((info.get("excluded_dtypes_by_family") or {}).get(family) or {})}


def predicted_run(strategy, seed: int, run: int, examples: int = TIME_CHUNK_EXAMPLES) -> list:
    """The cases run ``run`` of a campaign of ``seed`` draws from ``strategy`` while none of them fails, in
    order, repeats included (a campaign runs a repeated case once)."""
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings

    drawn: list = []

    @settings(max_examples=examples, deadline=None, derandomize=False, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate,))
    @hseed(run_seed(seed, run))
    @given(strategy)
    def draw(case):
        drawn.append(case)

    draw()
    return drawn
