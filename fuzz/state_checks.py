"""What a campaign's state files may hold: counts, seconds, ratios, text and finding lines, each checked
on load with the field named (Note [Validated state] in :mod:`fuzz.state`), and the per-group counters
built from them (:class:`GroupKey`, :class:`GroupCounts`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

from kernel_oracle.harness.schema import FINDING_KINDS

__all__ = ["GroupCounts", "GroupKey", "ID_NUMBER", "MAX_COUNT", "checked_count", "checked_objects", "checked_ratio", "checked_seconds",
           "checked_text", "finding_problem", "region_counts"]

# the largest count or number of seconds state.json may hold (Note [Validated state])
MAX_COUNT = 10**12
ID_NUMBER = re.compile(r"^F(\d+)-")


def checked_count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{name}={value!r} is not a count in [0, {MAX_COUNT}]")
    return value


def checked_objects(name: str, value) -> list:
    """``value`` if it is a list of JSON objects, else ``ValueError`` naming ``name``."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{name}={value!r} is not a list of objects")
    return value


def checked_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{name}={value!r} is not a finite number of seconds in [0, {MAX_COUNT}]")
    return float(value)


def checked_ratio(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"ratios holds {value!r}, not a finite error ratio >= 0")
    return float(value)


def checked_text(name: str, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} is not a string")
    return value


_FINDING_TEXT = ("id", "target", "op", "kind", "message", "repro")
_FINDING_OPTIONAL = {"dtype": str, "dtypes": list, "regions": (list, dict), "headline": str, "shape_class": str,
                     "expected": str, "note": str, "figures": dict, "problem": (dict, type(None)), "bucket": dict,
                     "count": int, "examples": list, "consequence": str, "rows": (str, type(None))}


def region_counts(value) -> dict:
    """``{region: cases}`` of a finding's hits (a plain list counts each region once)."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return {r: 1 for r in value}
    if value is None:
        return {}
    raise ValueError(f"regions={value!r} is not an object of region -> count")


def finding_problem(item) -> Optional[str]:
    """Why ``item`` (a parsed line of ``findings.jsonl``) is not a finding, or None (Note [Validated state])."""
    if not isinstance(item, dict):
        return f"a JSON {type(item).__name__}, not a finding object"
    missing = [k for k in _FINDING_TEXT if k not in item]
    if missing:
        return f"a finding lacks the fields {missing}"
    bad = [k for k in _FINDING_TEXT if not isinstance(item[k], str)]
    bad += [k for k, t in _FINDING_OPTIONAL.items() if k in item and not isinstance(item[k], t)]
    if bad:
        return f"the fields {bad} have the wrong type"
    if not ID_NUMBER.match(item["id"]):
        return f"id={item['id']!r} is not a finding id (F<number>-...)"
    if item["kind"] not in FINDING_KINDS:
        return f"kind={item['kind']!r} is not one of {list(FINDING_KINDS)}"
    bucket = item.get("bucket")
    if bucket is not None and not (isinstance(bucket.get("kind"), str) and isinstance(bucket.get("cause", ""), str)
                                   and isinstance(bucket.get("config", []), list)
                                   and isinstance(bucket.get("flags", []), list)):
        return "its bucket is not a bucket object"
    return None


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
