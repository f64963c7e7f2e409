"""The counters of a campaign's state: one :class:`GroupKey` (target, op, dtype, shape class) per group of
the result record, and its :class:`GroupCounts`, each read back checked (Note [Validated state] in
:mod:`fuzz.state`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel_oracle.fuzz.state_checks import checked_count, checked_ratio, checked_text
from kernel_oracle.harness.schema import FINDING_KINDS

__all__ = ["GroupCounts", "GroupKey"]


@dataclass(frozen=True, order=True)
class GroupKey:
    """The counters' key: one group of the result record."""

    target: str
    op: str
    dtype: str
    shape_class: str

    def to_dict(self) -> dict:
        return {"target": self.target, "op": self.op, "dtype": self.dtype, "shape_class": self.shape_class}

    @classmethod
    def from_dict(cls, d: dict) -> "GroupKey":
        return cls(*(checked_text(f"key.{k}", d[k]) for k in ("target", "op", "dtype", "shape_class")))


@dataclass
class GroupCounts:
    cases: int = 0
    passes: int = 0
    ratios: list = field(default_factory=list)
    findings: dict = field(default_factory=lambda: {k: 0 for k in FINDING_KINDS})
    gaps: int = 0  # accepted malformed metadata of the validation-gap table: neither passed nor failed

    def to_dict(self) -> dict:
        return {"cases": self.cases, "passes": self.passes, "ratios": list(self.ratios),
                "findings": dict(self.findings), "gaps": self.gaps}

    @classmethod
    def from_dict(cls, d: dict) -> "GroupCounts":
        """Checked (Note [Validated state]): counts in range, ``passes <= cases``, finite ratios."""
        counts = {k: 0 for k in FINDING_KINDS}
        for k, v in (d.get("findings") or {}).items():
            if k not in FINDING_KINDS:
                raise ValueError(f"findings[{k!r}] is not a finding kind")
            counts[k] = checked_count(f"findings[{k!r}]", v)
        cases, passes = checked_count("cases", d.get("cases", 0)), checked_count("passes", d.get("passes", 0))
        gaps = checked_count("gaps", d.get("gaps", 0))
        if passes + gaps > cases:
            raise ValueError(f"passes={passes} and gaps={gaps} exceed cases={cases}")
        ratios = d.get("ratios") or []
        if not isinstance(ratios, list):
            raise ValueError(f"ratios={ratios!r} is not a list")
        return cls(cases, passes, [checked_ratio(r) for r in ratios], counts, gaps)
