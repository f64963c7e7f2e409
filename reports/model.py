"""The loaded result record every renderer and the comparison share.

Note [One loaded record type]
-----------------------------
Producers write plain JSON through :mod:`reports.schema`; readers (Markdown, HTML, compare) go through
:class:`Result`, built once by :func:`load_result`.  It normalises what producers may leave out
(optional figures, peers given as a bare number or as a dict, shapes given as a dict or a string),
and owns the two derived keys the readers must agree on:

* :attr:`Finding.signature`: what makes two findings "the same" across runs: the target and the
  finding's root-cause bucket (:mod:`harness.buckets`, the one definition campaigns, the main job and
  ``compare`` share: exception type, masked message and target frame, or region class and config;
  records without a bucket get the one their fields imply), so a different seed, op or worst
  element does not make an old finding look new; :attr:`Finding.count` is how many failing cases
  the campaign saw in that bucket;
* :attr:`Finding.anchor`: the HTML anchor that every link to a finding (and its repro command) uses;
* :attr:`Finding.known` / :attr:`Finding.upstream`: the known upstream defect a finding is
  (``harness/known_issues.toml``, stored by the run that found it) and its link; only https links
  without spaces or brackets are kept, so a report never renders a ``javascript:`` or broken link.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kernel_oracle.harness.buckets import Bucket, bucket_of_record
from kernel_oracle.harness.headline import example_text
from kernel_oracle.harness.outcome import run_outcome
from kernel_oracle.harness.schema import FINDING_KINDS, SCHEMA_VERSION, SELFCHECK_TARGET, validate
from kernel_oracle.harness.schema import load as _load_json
from kernel_oracle.harness.tile_coverage import CLASSES, CoverageTable

__all__ = ["Benchmark", "Finding", "Group", "Headline", "Result", "load_result", "record_path", "shape_key"]

def _num(x: Any) -> Optional[float]:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v


def shape_key(shape: Any) -> str:
    """A canonical string for a benchmark shape given as a string, a dict or a sequence."""
    if isinstance(shape, str):
        return shape
    if isinstance(shape, dict):
        return ",".join(f"{k}={shape[k]}" for k in sorted(shape))
    if isinstance(shape, (list, tuple)):
        return "x".join(str(s) for s in shape)
    return json.dumps(shape, sort_keys=True, default=str)


_HEADLINE_MESSAGE = 160  # characters of the first message line a built headline quotes
_SAFE_LINK = re.compile(r"https://[^\s<>()\[\]\"'`|]+")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


@dataclass
class Group:
    target: str
    op: str
    dtype: str
    shape_class: str
    precision: Optional[str]
    cases: int
    passes: int
    findings: dict
    ratio_max: Optional[float]
    ratio_median: Optional[float]
    ratios: list
    gaps: int = 0  # cases of the validation-gap table: neither passed nor failed

    @property
    def key(self) -> tuple:
        return (self.target, self.op, self.dtype, self.shape_class)

    @property
    def failures(self) -> int:
        return sum(self.findings.values())

    @property
    def pass_rate(self) -> Optional[float]:
        return self.passes / self.cases if self.cases else None

    @classmethod
    def from_dict(cls, g: dict) -> "Group":
        er = g.get("error_ratio") or {}
        values = [v for v in (_num(x) for x in er.get("values") or []) if v is not None]
        counts = {k: int((g.get("findings") or {}).get(k, 0)) for k in FINDING_KINDS}
        return cls(target=str(g["target"]), op=str(g["op"]), dtype=str(g["dtype"]),
                   shape_class=str(g["shape_class"]), precision=g.get("precision"),
                   cases=int(g.get("cases", 0)), passes=int(g.get("passes", 0)), findings=counts,
                   ratio_max=_num(er.get("max")), ratio_median=_num(er.get("median")), ratios=values,
                   gaps=int(g.get("gaps", 0) or 0))


@dataclass
class Finding:
    id: str
    target: str
    op: str
    dtype: str
    shape_class: str
    kind: str
    message: str
    repro: str
    figures: dict
    contract: Optional[str]
    problem: Any
    raw: dict = field(repr=False)

    @property
    def first_line(self) -> str:
        for line in self.message.splitlines():
            if line.strip():
                return line.strip()
        return ""

    @property
    def bucket(self) -> Bucket:
        return bucket_of_record(self.raw)

    @property
    def signature(self) -> tuple:
        return (self.target, self.bucket)

    @property
    def count(self) -> int:
        """Failing cases seen in this finding's bucket (1 for records without counts)."""
        n = self.raw.get("count")
        return int(n) if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1

    @property
    def examples(self) -> list:
        """A few more failing cases of the bucket besides this finding's own (smallest) one."""
        ex = self.raw.get("examples")
        return list(ex) if isinstance(ex, list) else []

    @property
    def example_lines(self) -> list:
        """Up to three more failing cases of the bucket, one line each, in words a reader can rebuild them
        from (:func:`harness.headline.example_text`); no line twice."""
        out: list = []
        for ex in self.examples:
            line = example_text(ex) if isinstance(ex, dict) else str(ex)
            if line not in out:
                out.append(line)
            if len(out) == 3:
                break
        return out

    @property
    def ops(self) -> list:
        """The ops its cases showed it in (its own op first)."""
        return list(dict.fromkeys([self.op, *(str(o) for o in self.raw.get("ops") or ())]))

    @property
    def known(self) -> Optional[str]:
        """The id of the known upstream issue this finding is (None: a new finding)."""
        k = self.raw.get("known")
        return str(k) if k else None

    @property
    def upstream(self) -> Optional[str]:
        """The known issue's upstream link (an https URL), or None."""
        link = self.raw.get("upstream")
        return link if isinstance(link, str) and _SAFE_LINK.fullmatch(link) else None

    @property
    def anchor(self) -> str:
        return f"finding-{_slug(self.id)}"

    @property
    def ratio(self) -> Optional[float]:
        return _num(self.figures.get("ratio"))

    @property
    def headline(self) -> str:
        """One sentence saying what failed: the record's ``headline``, or one built from its op, kind,
        dtypes, count and the first line of its message (records written without a headline)."""
        given = self.raw.get("headline")
        if isinstance(given, str) and given.strip():
            return " ".join(given.split())
        cases = f"{self.count} failing case{'s' if self.count != 1 else ''}"
        first = self.first_line or "no message"
        if len(first) > _HEADLINE_MESSAGE:  # the card below has the whole message
            first = first[: _HEADLINE_MESSAGE - 1] + "…"
        return f"{self.op} ({self.target}, {self.dtype}): {self.kind}, {cases}: {first}"

    @classmethod
    def from_dict(cls, f: dict) -> "Finding":
        contract = f.get("contract") or f.get("contract_id")
        repro = f.get("repro")
        if isinstance(repro, (list, tuple)):
            repro = " ".join(str(r) for r in repro)
        return cls(id=str(f["id"]), target=str(f["target"]), op=str(f["op"]),
                   dtype=_dtypes_of(f), shape_class=str(f.get("shape_class") or "-"),
                   kind=str(f["kind"]), message=str(f.get("message") or ""), repro=str(repro or ""),
                   figures=dict(f.get("figures") or {}), contract=str(contract) if contract else None,
                   problem=f.get("problem"), raw=f)


def _dtypes_of(f: dict) -> str:
    """A finding's dtype(s) as one string: its ``dtypes`` list joined, else its ``dtype``, else ``-``."""
    many = f.get("dtypes")
    if isinstance(many, (list, tuple)) and many:
        return ", ".join(str(d) for d in many)
    return str(f.get("dtype") or "-")


@dataclass
class Benchmark:
    target: str
    op: str
    shape: str
    dtype: str
    median_us: float
    bytes: Optional[float]
    flops: Optional[float]
    tbps: Optional[float]
    tflops: Optional[float]
    ceiling_tbps: Optional[float]
    ceiling_tflops: Optional[float]
    peers: dict  # peer name -> {"median_us": float | None, ...}

    @property
    def key(self) -> tuple:
        return (self.target, self.op, self.shape, self.dtype)

    @property
    def roofline_fraction(self) -> Optional[float]:
        """The larger of achieved/ceiling for bandwidth and for compute (the binding roof)."""
        fractions = []
        if self.tbps is not None and self.ceiling_tbps:
            fractions.append(self.tbps / self.ceiling_tbps)
        if self.tflops is not None and self.ceiling_tflops:
            fractions.append(self.tflops / self.ceiling_tflops)
        return max(fractions) if fractions else None

    def speedup_over(self, peer: str) -> Optional[float]:
        """peer time / our time (> 1: we are faster)."""
        p = self.peers.get(peer) or {}
        t = _num(p.get("median_us"))
        return t / self.median_us if t and self.median_us else None

    @classmethod
    def from_dict(cls, b: dict) -> "Benchmark":
        median = float(b["median_us"])
        nbytes, flops = _num(b.get("bytes")), _num(b.get("flops"))
        tbps, tflops = _num(b.get("tbps")), _num(b.get("tflops"))
        if tbps is None and nbytes and median > 0:
            tbps = nbytes / (median * 1e-6) / 1e12
        if tflops is None and flops and median > 0:
            tflops = flops / (median * 1e-6) / 1e12
        peers = {}
        for name, p in (b.get("peers") or {}).items():
            if isinstance(p, dict):
                peers[str(name)] = dict(p)
            else:
                peers[str(name)] = {"median_us": _num(p)}
        return cls(target=str(b["target"]), op=str(b["op"]), shape=shape_key(b["shape"]), dtype=str(b["dtype"]),
                   median_us=median, bytes=nbytes, flops=flops, tbps=tbps, tflops=tflops,
                   ceiling_tbps=_num(b.get("ceiling_tbps")), ceiling_tflops=_num(b.get("ceiling_tflops")),
                   peers=peers)


@dataclass(frozen=True)
class Headline:
    """One line of "What failed": ``anchor`` and ``id`` of its first finding, ``known`` (the upstream
    issue's id when every finding under it is known), the sentence, ``where`` (a matrix row's releases)
    and how many findings it stands for."""

    anchor: str
    id: str
    known: Optional[str]
    text: str
    where: str
    findings: int

    @property
    def tail(self) -> str:
        """`` (introduced in ..., fixed in ...; N findings)`` for a matrix row or several findings, else empty."""
        count = f"{self.findings} finding{'s' if self.findings != 1 else ''}"
        if self.where:
            return f" ({self.where}; {count})"
        return f" ({count})" if self.findings > 1 else ""


def _releases(column: Optional[str]) -> Optional[str]:
    """``0.5.12-0.5.13.post1`` of a matrix column label (``sglang-trt==0.5.12-0.5.13.post1@pdl=on lora``)."""
    if not column:
        return None
    m = re.search(r"==([^@\s]+)", column)
    return m.group(1) if m else column


def _one_per_known_issue(lines: list) -> list:
    """Lines that are all the same known upstream issue (its id) folded into the first: the known-issues
    entry says they are one documented root cause (a sinks defect that shows only with a softmax_scale in
    some cases is the same ignored sinks)."""
    first: dict = {}
    out: list = []
    for h in lines:
        k = h.known if h.known and h.known != "known" else None
        if k is None or k not in first:
            if k is not None:
                first[k] = len(out)
            out.append(h)
            continue
        i = first[k]
        kept = out[i]
        where = "; ".join(dict.fromkeys(w for x in (kept.where, h.where) for w in x.split("; ") if w))
        out[i] = dataclasses.replace(kept, where=where, findings=kept.findings + h.findings)
    return out


def _all_known(findings: list) -> Optional[str]:
    ids = {f.known for f in findings}
    return next(iter(ids)) if len(ids) == 1 and None not in ids else ("known" if None not in ids else None)


@dataclass
class Result:
    kind: str
    version: int
    created: str
    environment: dict
    seeds: dict
    groups: list
    findings: list
    benchmarks: list
    targets: list
    notes: list
    summary: dict
    source: Optional[str] = None
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, record: dict, *, source: Optional[str] = None) -> "Result":
        validate(record, source=source or "record")
        return cls(kind=str(record.get("kind")), version=int(record["version"]), created=str(record.get("created", "")),
                   environment=dict(record["environment"]), seeds=dict(record.get("seeds") or {}),
                   groups=[Group.from_dict(g) for g in record["groups"]],
                   findings=[Finding.from_dict(f) for f in record["findings"]],
                   benchmarks=[Benchmark.from_dict(b) for b in record["benchmarks"]],
                   targets=[dict(t) for t in record.get("targets") or [] if isinstance(t, dict)],
                   notes=[str(n) for n in record.get("notes") or []],
                   summary=dict(record.get("summary") or {}), source=source, raw=record)

    # ---- totals ----------------------------------------------------------------------------------
    @property
    def cases(self) -> int:
        return sum(g.cases for g in self.groups)

    @property
    def passes(self) -> int:
        return sum(g.passes for g in self.groups)

    @property
    def gaps(self) -> int:
        """Cases of the validation-gap table: accepted malformed metadata, neither passed nor failed."""
        return sum(g.gaps for g in self.groups)

    @property
    def selfcheck_rows(self) -> int:
        """The main job's selfcheck rows (the references against their independent formulations)."""
        return sum(g.cases for g in self.groups if g.target == SELFCHECK_TARGET)

    @property
    def selfcheck_passes(self) -> int:
        return sum(g.passes for g in self.groups if g.target == SELFCHECK_TARGET)

    @property
    def fuzz_cases(self) -> int:
        """Cases run on targets: every case but the selfcheck rows."""
        return self.cases - self.selfcheck_rows

    @property
    def fuzz_passes(self) -> int:
        return self.passes - self.selfcheck_passes

    @property
    def new_findings(self) -> list:
        """The findings that are not known upstream issues."""
        return [f for f in self.findings if not f.known]

    @property
    def known_findings(self) -> list:
        return [f for f in self.findings if f.known]

    @property
    def headlines(self) -> list:
        """What failed, one :class:`Headline` per root cause: per finding, or, in a release matrix, per
        row (its findings in every column of distinct code are one root cause: Note [Release matrix])."""
        rows = (self.raw.get("release_matrix") or {}).get("rows") or []
        members: dict = {}
        for f in self.findings:
            members.setdefault(f.raw.get("matrix_row") or f.id, []).append(f)
        out = []
        for row in rows:
            found = members.pop(row.get("bucket"), None)
            if not found:
                continue
            spans = [(_releases(h.get("introduced_in")), _releases(h.get("fixed_in")))
                     for h in (row.get("history") or {}).values() if h.get("introduced_in")]
            where = "; ".join(f"introduced in {i}" + (f", fixed in {x}" if x else "")
                              for i, x in dict.fromkeys(spans))  # one per distinct history, lanes folded
            text = " ".join(str(row.get("headline") or found[0].headline).split())
            out.append(Headline(found[0].anchor, found[0].id, _all_known(found), text, where, len(found)))
        for found in members.values():  # findings of no row (every finding, outside a release matrix)
            for f in found:
                out.append(Headline(f.anchor, f.id, f.known, f.headline, "", 1))
        return _one_per_known_issue(out)

    @property
    def findings_by_kind(self) -> dict:
        counts = {k: 0 for k in FINDING_KINDS}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return counts

    @property
    def ratio_max(self) -> Optional[float]:
        vals = [g.ratio_max for g in self.groups if g.ratio_max is not None and not math.isnan(g.ratio_max)]
        return max(vals) if vals else None

    @property
    def status(self) -> str:
        """The badge: the verdict of :func:`kernel_oracle.harness.outcome.run_outcome` for this record, the
        same the command that wrote it exited with: ``findings`` (new ones, or failed cases), ``interrupted``,
        ``incomplete`` (a failed part, or a campaign that stopped short), ``empty`` (nothing ran), ``known``
        (every finding a known upstream issue) or ``clean``."""
        new = len(self.new_findings) or int(not self.findings and any(g.failures for g in self.groups))
        status = self.summary.get("status")
        return run_outcome(new_findings=new, known_findings=len(self.findings) - len(self.new_findings),
                           interrupted=status == "interrupted",
                           incomplete=status == "incomplete" or bool(self.summary.get("failed_parts")),
                           tested=bool(self.cases or self.benchmarks)).verdict

    def by_target_op(self) -> list:
        """Groups rolled up per (target, op): cases, passes, findings, ratio max and median of maxima."""
        rows: dict = {}
        for g in self.groups:
            r = rows.setdefault((g.target, g.op), {"target": g.target, "op": g.op, "cases": 0, "passes": 0,
                                                   "findings": 0, "ratios": [], "dtypes": set()})
            r["cases"] += g.cases
            r["passes"] += g.passes
            r["findings"] += g.failures
            r["ratios"].extend(g.ratios or [v for v in (g.ratio_max,) if v is not None])
            r["dtypes"].add(g.dtype)
        out = []
        for r in rows.values():
            vals = sorted(v for v in r.pop("ratios") if not math.isnan(v))
            r["ratio_max"] = vals[-1] if vals else None
            r["ratio_median"] = vals[len(vals) // 2] if vals else None
            r["dtypes"] = ", ".join(sorted(r["dtypes"]))
            out.append(r)
        return sorted(out, key=lambda r: (r["op"], r["target"]))

    @property
    def validation_gaps(self) -> list:
        """The record's ``validation_gaps``: malformed inputs a target accepted that the reference
        rejects, each ``{op, malformation, consequence, dtypes, count, example}`` (informational, not
        findings); ``dtypes`` joined to one string, absent fields as ``-``."""
        gaps = self.raw.get("validation_gaps")
        out = []
        for g in gaps if isinstance(gaps, list) else []:
            if not isinstance(g, dict):
                continue
            row = {k: str(g.get(k) if g.get(k) not in (None, "") else "-")
                   for k in ("op", "malformation", "consequence", "example")}
            row["dtypes"] = _dtypes_of(g)
            n = g.get("count")
            row["count"] = n if isinstance(n, int) and not isinstance(n, bool) else "-"
            out.append(row)
        return out

    @property
    def coverage(self) -> list:
        """The tile coverage table (Note [Tile coverage] in :mod:`kernel_oracle.harness.tile_coverage`): per
        target, op and tiled dimension its ``blocks`` (one string), ``cases`` and the share of each class,
        ``split`` None where the code never splits that dimension."""
        rows = CoverageTable.from_record(self.raw.get("coverage")).to_record()["rows"]
        return [{**r, "blocks": ", ".join(str(b) if b else "the extent" for b in r["blocks"]),
                 **{c: None if r[c] is None else (r[c] / r["cases"] if r["cases"] else 0.0) for c in CLASSES}}
                for r in rows]

    @property
    def coverage_unknown(self) -> list:
        """``{target, family, reason}`` of the targets whose blocks are not known (no coverage rows)."""
        unknown = CoverageTable.from_record(self.raw.get("coverage")).unknown
        return [{"target": t, "family": f, "reason": why} for t, fams in sorted(unknown.items())
                for f, why in sorted(fams.items())]

    def target_rows(self) -> list:
        """The targets table: ``name, available, strict, precision, entry_points, missing, reason``,
        each a display string (``-`` where the record does not say); ``missing`` lists the entry
        points a target lacks with why (``entry: reason; ...``)."""
        rows = []
        for t in self.targets:
            strict = t.get("strict")
            missing = t.get("missing") or {}
            if isinstance(missing, dict):
                missing = "; ".join(f"{k}: {v}" if v else str(k) for k, v in sorted(missing.items()))
            elif isinstance(missing, (list, tuple)):
                missing = ", ".join(str(m) for m in missing)
            rows.append({"name": str(t.get("name") or "-"), "available": bool(t.get("available")),
                         "strict": "-" if strict is None else ("yes" if strict else "no (lenient)"),
                         "precision": str(t.get("precision") or "-"),
                         "entry_points": ", ".join(str(e) for e in t.get("entry_points") or []) or "-",
                         "missing": str(missing) or "-", "reason": str(t.get("reason") or "")})
        return rows

    def finding_by_id(self, fid: str) -> Optional[Finding]:
        return next((f for f in self.findings if f.id == fid), None)


def record_path(path: str | Path) -> tuple:
    """``(record file, page name or None)`` of a result given as a file or a directory: a directory stands
    for its campaign ``summary.json`` (pages named ``report``, what ``fuzz`` writes beside it) or the
    main job's ``latest.json``; ``ValueError`` for a directory with neither.  What ``report`` and
    ``compare`` both take."""
    p = Path(path)
    if p.is_dir():
        if (p / "summary.json").is_file():
            return p / "summary.json", "report"
        if (p / "latest.json").is_file():
            return p / "latest.json", None
        raise ValueError(f"{path} holds no summary.json (a campaign) or latest.json (the main job)")
    return p, None


def load_result(path: str | Path) -> Result:
    """Read and validate a result file, or the record a directory holds (:func:`record_path`);
    :class:`reports.schema.SchemaError` on a bad one."""
    path = record_path(path)[0]
    return Result.from_dict(_load_json(path), source=str(path))


SUPPORTED_VERSION = SCHEMA_VERSION
