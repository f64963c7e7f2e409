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

Each family's record names its triggers (``Family.triggers``: name -> predicate, LoRA's in
:mod:`harness.triggers_lora`), and a trigger holds only for a case of its family.  Each predicate reads
only problem fields (standard library only: reports and compare load this module without torch) and is
exact: it holds when the case's routed or covered data reaches the defect, not merely when a field looks
suspicious.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

from kernel_oracle.harness.family import families

__all__ = ["TRIGGERS", "trigger_holds"]


def _owners() -> dict:
    """trigger name -> (its family, its predicate), every registered family's."""
    return {name: (family.name, predicate) for family in families()
            for name, predicate in (family.resolve("triggers") or {}).items()}


class _Triggers(Mapping):
    """trigger name -> predicate over a case dict: the registered families' triggers, read at each access."""

    def __getitem__(self, name: str) -> Callable[[Mapping], bool]:
        return _owners()[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(_owners())

    def __len__(self) -> int:
        return len(_owners())


TRIGGERS: Mapping[str, Callable[[Mapping], bool]] = _Triggers()


def trigger_holds(name: str, case: Mapping) -> bool:
    """Whether the trigger ``name`` (a key of :data:`TRIGGERS`) holds for ``case`` (a case dict): a case of
    the trigger's family whose predicate holds."""
    family, predicate = _owners()[name]
    return (case.get("problem") or {}).get("family") == family and bool(predicate(case))
