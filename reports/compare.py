"""Compare a baseline result with a current one: what is new, what is fixed, what got worse.

Note [Regressions]
------------------
Three things gate CI (each a *regression*, exit 1 in ``kernel-oracle compare``):

* a **new finding**: a finding of CURRENT whose :attr:`~reports.model.Finding.signature` (the target
  and the root-cause bucket of :mod:`harness.buckets`, the definition campaigns use to merge
  findings) BASELINE lacks.  Signatures are matched as multisets, so three findings of one
  signature against one in the baseline are two new ones;
* **error-ratio growth**: a group (target x op x dtype x shape class) present in both whose max error
  ratio grew by more than ``max_ratio_growth`` times and now sits at or above ``ratio_floor``
  (ratios far below the tolerance move with every seed and do not matter), or that crossed 1;
* a **slowdown**: a benchmark (target, op, shape, dtype) present in both whose median time grew by
  more than ``max_slowdown`` (a fraction: 0.10 is 10 %).

Fixed findings, groups and benchmarks that appear or disappear, and environment differences that
make timings incomparable (another GPU, torch or triton) are reported but never fail the gate.

Known upstream defects (``harness/known_issues.toml``; a finding's ``known`` field, or a match of
the entries for records written before runs stored it) are not ours to fix: a known finding of
BASELINE that CURRENT no longer has is reported as **fixed upstream** (the upgrade fixed it), and a
known finding only CURRENT has is listed as known (a campaign's search found it this time) without
failing the gate.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from kernel_oracle.harness.known_issues import KnownIssuesError, load_known_issues, match_known, target_release
from kernel_oracle.reports.model import Finding, Result

__all__ = ["DEFAULT_MAX_RATIO_GROWTH", "DEFAULT_MAX_SLOWDOWN", "DEFAULT_RATIO_FLOOR", "ResultComparison",
           "Thresholds", "compare_results"]

# a group's worst error ratio may double before it counts (seeds and case mix move it)
DEFAULT_MAX_RATIO_GROWTH = 2.0
# ratios below a quarter of the tolerance are noise, whatever their growth
DEFAULT_RATIO_FLOOR = 0.25
# median time may grow 10 % before it counts (CUDA-event timing noise on a quiet GPU is ~2-5 %)
DEFAULT_MAX_SLOWDOWN = 0.10
_ENV_KEYS_FOR_TIMING = ("gpu", "cpu", "device", "torch", "triton", "cuda", "triton_interpret")


@dataclass(frozen=True)
class Thresholds:
    max_ratio_growth: float = DEFAULT_MAX_RATIO_GROWTH
    ratio_floor: float = DEFAULT_RATIO_FLOOR
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN

    def __post_init__(self) -> None:
        if not self.max_ratio_growth >= 1.0:
            raise ValueError(f"max_ratio_growth={self.max_ratio_growth} must be >= 1 (a factor: 2.0 allows doubling)")
        if not self.ratio_floor >= 0:
            raise ValueError(f"ratio_floor={self.ratio_floor} must be >= 0")
        if not self.max_slowdown >= 0:
            raise ValueError(f"max_slowdown={self.max_slowdown} must be >= 0 (a fraction: 0.10 allows 10 %)")


@dataclass
class ResultComparison:
    """What :func:`compare_results` found between a baseline result record and the current one."""

    new_findings: list = field(default_factory=list)      # [Finding]
    fixed_findings: list = field(default_factory=list)    # [Finding] (from the baseline)
    fixed_upstream: list = field(default_factory=list)    # [(Finding, known id, link)] (baseline, known issues)
    new_known: list = field(default_factory=list)         # [(Finding, known id, link)] (current, not gating)
    ratio_growth: list = field(default_factory=list)      # [dict(key, baseline, current, factor)]
    slowdowns: list = field(default_factory=list)         # [dict(key, baseline_us, current_us, change)]
    speedups: list = field(default_factory=list)
    groups_added: list = field(default_factory=list)
    groups_removed: list = field(default_factory=list)
    benchmarks_removed: list = field(default_factory=list)
    environment_changes: dict = field(default_factory=dict)  # key -> (baseline, current)
    notes: list = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.new_findings or self.ratio_growth or self.slowdowns)

    def to_dict(self) -> dict:
        def f(x):
            return {"id": x.id, "target": x.target, "op": x.op, "kind": x.kind, "dtype": x.dtype,
                    "shape_class": x.shape_class, "message": x.first_line, "repro": x.repro,
                    "bucket": x.bucket.label, "count": x.count}
        def k(row):
            x, kid, link = row
            return {**f(x), "known": kid, "upstream": link}
        return {"regressed": self.regressed,
                "new_findings": [f(x) for x in self.new_findings],
                "fixed_findings": [f(x) for x in self.fixed_findings],
                "fixed_upstream": [k(r) for r in self.fixed_upstream],
                "new_known_findings": [k(r) for r in self.new_known],
                "ratio_growth": self.ratio_growth, "slowdowns": self.slowdowns, "speedups": self.speedups,
                "groups_added": self.groups_added, "groups_removed": self.groups_removed,
                "benchmarks_removed": self.benchmarks_removed,
                "environment_changes": {k: list(v) for k, v in self.environment_changes.items()},
                "notes": self.notes}

    def format_text(self, thresholds: Thresholds) -> str:
        lines = []
        verdict = "REGRESSION" if self.regressed else "OK"
        lines.append(f"{verdict}: {len(self.new_findings)} new finding(s), {len(self.ratio_growth)} error-ratio "
                     f"growth(s), {len(self.slowdowns)} slowdown(s); {len(self.fixed_findings)} fixed"
                     + (f", {len(self.fixed_upstream)} fixed upstream" if self.fixed_upstream else "")
                     + (f", {len(self.new_known)} known upstream" if self.new_known else ""))
        if self.new_findings:
            lines.append("\nNew findings:")
            for x in self.new_findings:
                lines.append(f"  + [{x.kind}] {x.target} {x.op} {x.dtype} {x.shape_class}: {x.first_line}")
                if x.repro:
                    lines.append(f"      repro: {x.repro}")
        if self.new_known:
            lines.append("\nKnown upstream issues found (not regressions):")
            for x, kid, link in self.new_known:
                lines.append(f"  ~ [{x.kind}] {x.target} {x.op} {x.dtype} {x.shape_class}: known upstream issue "
                             f"{kid}: {link}")
        if self.fixed_findings:
            lines.append("\nFixed findings:")
            for x in self.fixed_findings:
                lines.append(f"  - [{x.kind}] {x.target} {x.op} {x.dtype} {x.shape_class}: {x.first_line}")
        if self.fixed_upstream:
            lines.append("\nFixed upstream (known upstream issues of BASELINE that CURRENT no longer has):")
            for x, kid, link in self.fixed_upstream:
                lines.append(f"  - [{x.kind}] {x.target} {x.op} {x.dtype} {x.shape_class}: fixed upstream: "
                             f"{kid} ({link})")
        if self.ratio_growth:
            lines.append(f"\nError-ratio growth (max ratio grew > {thresholds.max_ratio_growth:g}x and is "
                         f">= {thresholds.ratio_floor:g}, or crossed 1):")
            for g in self.ratio_growth:
                lines.append(f"  ! {' '.join(g['key'])}: {g['baseline']:.3g} -> {g['current']:.3g} ({g['factor']:.2f}x)")
        if self.slowdowns:
            lines.append(f"\nSlowdowns (median time grew > {100 * thresholds.max_slowdown:g} %):")
            for b in self.slowdowns:
                lines.append(f"  ! {' '.join(b['key'])}: {b['baseline_us']:.4g} us -> {b['current_us']:.4g} us "
                             f"({100 * b['change']:+.1f} %)")
        if self.speedups:
            lines.append("\nSpeed-ups:")
            for b in self.speedups:
                lines.append(f"    {' '.join(b['key'])}: {b['baseline_us']:.4g} us -> {b['current_us']:.4g} us "
                             f"({100 * b['change']:+.1f} %)")
        for title, rows in (("Groups only in CURRENT", self.groups_added), ("Groups only in BASELINE (coverage lost)",
                                                                            self.groups_removed),
                            ("Benchmarks only in BASELINE", self.benchmarks_removed)):
            if rows:
                lines.append(f"\n{title}:")
                lines.extend(f"    {' '.join(k)}" for k in rows)
        if self.environment_changes:
            lines.append("\nEnvironment differences (timings may not be comparable):")
            for k, (a, b) in sorted(self.environment_changes.items()):
                lines.append(f"    {k}: {a} -> {b}")
        for n in self.notes:
            lines.append(f"note: {n}")
        return "\n".join(lines) + "\n"


def _finite(v: Optional[float]) -> bool:
    return v is not None and not math.isnan(v)


def _unmatched(findings: list, others: list) -> list:
    """Findings of ``findings`` with no counterpart (same signature) left in ``others``."""
    budget = Counter(f.signature for f in others)
    left = []
    for f in findings:
        if budget[f.signature] > 0:
            budget[f.signature] -= 1
        else:
            left.append(f)
    return left


class _Known:
    """``(id, link)`` of the known upstream issue a finding is: its recorded ``known`` field, else a
    match of the known-issues entries (records written before runs stored it)."""

    def __init__(self, notes: list):
        self.notes, self.issues = notes, None

    def __call__(self, f: Finding, result: Result) -> Optional[tuple]:
        if f.known:
            return f.known, f.upstream
        if self.issues is None:
            try:
                self.issues = load_known_issues()
            except KnownIssuesError as exc:
                self.notes.append(f"known issues not applied: {exc}")
                self.issues = ()
        issue = match_known(f.raw, f.target, target_release(result.raw, f.target), issues=self.issues)
        return (issue.id, issue.upstream) if issue is not None else None


def compare_results(baseline: Result, current: Result, thresholds: Thresholds = Thresholds()) -> ResultComparison:
    out = ResultComparison()
    known = _Known(out.notes)

    # findings, as multisets of signatures; known upstream issues neither gate nor vanish silently
    for f in _unmatched(current.findings, baseline.findings):
        k = known(f, current)
        if k is None:
            out.new_findings.append(f)
        else:
            out.new_known.append((f, *k))
    for f in _unmatched(baseline.findings, current.findings):
        k = known(f, baseline)
        if k is None:
            out.fixed_findings.append(f)
        else:
            out.fixed_upstream.append((f, *k))

    # error ratios per group
    base_groups = {g.key: g for g in baseline.groups}
    cur_groups = {g.key: g for g in current.groups}
    for key, g in cur_groups.items():
        b = base_groups.get(key)
        if b is None:
            out.groups_added.append(key)
            continue
        if not _finite(g.ratio_max) or not _finite(b.ratio_max):
            if g.ratio_max is not None and math.isnan(g.ratio_max) and not (b.ratio_max is not None and math.isnan(b.ratio_max)):
                out.ratio_growth.append({"key": list(key), "baseline": b.ratio_max or 0.0, "current": float("nan"),
                                         "factor": float("inf")})
            continue
        crossed = g.ratio_max > 1.0 >= b.ratio_max
        grew = g.ratio_max > thresholds.max_ratio_growth * b.ratio_max and g.ratio_max >= thresholds.ratio_floor
        if crossed or grew:
            factor = g.ratio_max / b.ratio_max if b.ratio_max > 0 else float("inf")
            out.ratio_growth.append({"key": list(key), "baseline": b.ratio_max, "current": g.ratio_max,
                                     "factor": factor})
    out.groups_removed = [k for k in base_groups if k not in cur_groups]

    # benchmarks
    base_b = {b.key: b for b in baseline.benchmarks}
    cur_b = {b.key: b for b in current.benchmarks}
    for key, b in cur_b.items():
        old = base_b.get(key)
        if old is None or not old.median_us or old.median_us <= 0:
            continue
        change = b.median_us / old.median_us - 1.0
        row = {"key": list(key), "baseline_us": old.median_us, "current_us": b.median_us, "change": change}
        if change > thresholds.max_slowdown:
            out.slowdowns.append(row)
        elif change < -thresholds.max_slowdown:
            out.speedups.append(row)
    out.benchmarks_removed = [k for k in base_b if k not in cur_b]

    if baseline.benchmarks and current.benchmarks:
        for k in _ENV_KEYS_FOR_TIMING:
            a, c = baseline.environment.get(k), current.environment.get(k)
            if a != c:
                out.environment_changes[k] = (a, c)
    if baseline.kind != current.kind:
        out.notes.append(f"comparing a {baseline.kind!r} record with a {current.kind!r} record: "
                         f"groups and findings one of them never produces show up as added or removed")
    for n in current.notes:
        out.notes.append(f"CURRENT: {n}")
    return out
