"""What sets off a known upstream defect, as named predicates over a case's plain data.

Note [Known-issue triggers]
---------------------------
A known issue (:mod:`harness.known_issues`) may name a ``trigger``: a predicate of this table over a
case's dict (``Case.to_dict()``: ``{"problem": {...}, "mutation": ...}``).  Two things read it:

* matching: a finding is that issue only when its example sets the trigger off (besides the
  entry's target, op, kind and patterns), so a trigger-only entry never swallows another defect
  whose message looks the same;
* the budget: once a campaign has recorded a finding that is a known issue with a trigger, it runs
  no further case that sets the trigger off; it counts them (``known_skipped`` in its summary) and
  spends the time elsewhere (docs/fuzzing.md, "Known issues do not eat the budget").

Each predicate reads only problem fields (standard library only: reports and compare load this
module without torch) and is exact: it holds when the case's routed or covered data reaches the
defect, not merely when a field looks suspicious.
"""

from __future__ import annotations

from typing import Callable, Mapping

__all__ = ["TRIGGERS", "trigger_holds"]


def _lora_rank_above_buffer(case: Mapping) -> bool:
    """A non-empty segment routes a slot whose ``lora_ranks`` entry exceeds the buffer rank ``R``
    (the kv_b contract caps it at R; SGLang's memory pool never holds such a rank)."""
    p = case.get("problem") or {}
    if p.get("family") != "lora":
        return False
    ranks, R = list(p.get("lora_ranks") or ()), int(p.get("R") or 0)
    for length, slot in zip(p.get("seg_lens") or (), p.get("weight_indices") or ()):
        if int(length) > 0 and 0 <= int(slot) < len(ranks) and int(ranks[int(slot)]) > R:
            return True
    return False


TRIGGERS: Mapping[str, Callable[[Mapping], bool]] = {
    "lora_rank_above_buffer": _lora_rank_above_buffer,
}


def trigger_holds(name: str, case: Mapping) -> bool:
    """Whether the trigger ``name`` (a key of :data:`TRIGGERS`) holds for ``case`` (a case dict)."""
    return bool(TRIGGERS[name](case))
