"""Several releases side by side, each finding bucket per release (``kernel-oracle matrix``).

Note [Release matrix]
---------------------
``kernel-oracle matrix --targets sglang==0.5.12,sglang==0.5.23`` runs, for each target, one
fuzz campaign (:func:`fuzz.campaign.run_campaign`, the same strategies and seed for every release)
and the real-bug corpus entries of that target family (:mod:`kernel_oracle.jobs.bug_corpus`), then folds
it all into one record of kind ``"main"`` with a ``release_matrix`` section that the Markdown and
HTML reports render as a table: one row per finding bucket (:mod:`harness.buckets`, one root
cause), one column per release ordered by version, the failing-case count in each cell (``-``: that
release did not run), and the derived **introduced in** (the first release that has the bucket) and
**fixed in** (the release after the last one that has it).  A bucket's target frame is compared
by file and function (``kv_b_lora_absorbed:_max_segment_len``), since releases move their modules.
Campaigns generate no malformed metadata unless ``--with-malformed``: released kernels implement no
strict validation, so those cases would only repeat the same validation gaps in every release.  A campaign is a random search: a bucket
absent from a release within its budget is evidence, not proof; the corpus rows are exact.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from pathlib import Path
from typing import Optional

__all__ = ["build_matrix", "release_key", "run_matrix", "runs_dir"]


# ---- the matrix (pure data: records in, table out) ------------------------------------------------------

def release_key(spec) -> tuple:
    """Sort key of a target spec (a string or TargetSpec): by its ``==X.Y.Z`` release number, then by
    name (a spec without a release first)."""
    from kernel_oracle.harness.targets import TargetSpec

    parsed = TargetSpec.parse(spec)
    nums = tuple(int(n) for n in re.findall(r"\d+", parsed.release or ""))
    return (nums, parsed.name if parsed.release is not None else str(parsed))


def build_matrix(runs: list[dict], corpus: list[dict]) -> dict:
    """``runs``: ``[{spec, available, reason, cases, findings: [finding records]}]``; ``corpus``:
    ``[{id, title, upstream, status, results: {spec: {...}}}]``.  Returns the ``release_matrix``
    section (see the Note): releases in version order, one row per bucket, introduced / fixed in."""
    from kernel_oracle.harness.buckets import bucket_of_record

    runs = sorted(runs, key=lambda r: release_key(r["spec"]))
    specs = [r["spec"] for r in runs]
    rows: dict[str, dict] = {}
    for run in runs:
        for f in run["findings"]:
            b = bucket_of_record(f)
            if b.frame:  # releases move modules (and are loaded under private names): compare file:function
                b = dataclasses.replace(b, frame=b.frame.rpartition(".")[2])
            row = rows.setdefault(b.label, {"bucket": b.label, "kind": b.kind, "counts": {}, "examples": {}})
            row["counts"][run["spec"]] = row["counts"].get(run["spec"], 0) + int(f.get("count") or 1)
            row["examples"].setdefault(run["spec"], f["id"])
    ran = [r["spec"] for r in runs if r["available"] and r["cases"]]
    for row in rows.values():
        for spec in ran:
            row["counts"].setdefault(spec, 0)
        present = [s for s in specs if row["counts"].get(s)]
        row["introduced_in"] = present[0] if present else None
        later = [s for s in ran if specs.index(s) > specs.index(present[-1])] if present else []
        row["fixed_in"] = later[0] if later else None
    ordered = sorted(rows.values(), key=lambda r: (specs.index(r["introduced_in"]) if r["introduced_in"] else 0,
                                                   r["kind"], r["bucket"]))
    return {"releases": [{k: r[k] for k in ("spec", "available", "reason", "cases")} | {"findings": len(r["findings"])}
                         for r in runs],
            "rows": ordered, "corpus": corpus}


# ---- running it ------------------------------------------------------------------------------------------

def _corpus_results(entries, spec: str, device: str, sglang_wheel: Optional[str] = None) -> dict:
    """``{entry id: {outcome, expected, as_expected}}`` of the entries of ``spec``'s target family."""
    from kernel_oracle.jobs.bug_corpus import run_entry
    from kernel_oracle.fuzz.targets import TargetSources, TargetSpec, resolve_target

    parsed = TargetSpec.parse(spec)
    base = parsed.name if parsed.release is not None else str(parsed)
    release = parsed.release or ""
    out = {}
    for e in entries:
        if e.target != base or e.device != device:
            continue
        expected = "fails" if release in e.buggy else ("passes" if release in e.fixed else None)
        t = resolve_target(parsed, device, sources=TargetSources(sglang_wheel=sglang_wheel))
        if not t.available:
            out[e.id] = {"outcome": "unavailable", "expected": expected, "as_expected": None}
            continue
        o = run_entry(e, t, device)
        outcome = f"fails: {o.kind}" if o.failed else "passes"
        as_expected = None if expected is None else (o.matches(e) if expected == "fails" else not o.failed)
        out[e.id] = {"outcome": outcome, "expected": expected, "as_expected": as_expected}
    return out


def _corpus_rows(entries, corpus_by_spec: dict, record: dict) -> list:
    """The corpus section: each entry that ran, its result per spec; a result against the entry's
    own record (a buggy release that passes, a fixed one that fails) is also a note."""
    from kernel_oracle.harness.schema import add_note

    corpus = []
    for e in entries:
        results = {s: r[e.id] for s, r in corpus_by_spec.items() if e.id in r}
        if results:
            corpus.append({"id": e.id, "title": e.title, "upstream": e.upstream, "status": e.status,
                           "expect": e.expect, "results": results})
            for s, r in results.items():
                if r["as_expected"] is False:
                    add_note(record, f"corpus {e.id} on {s}: {r['outcome']}, but the entry says it "
                                     f"{r['expected']} there")
    return corpus


def _write(record: dict, out: Path) -> None:
    from kernel_oracle.harness.schema import save
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    path = save(record, out / "matrix.json", overwrite=True)
    result = Result.from_dict(record, source=str(path))
    (out / "matrix.md").write_text(render_markdown(result), encoding="utf-8")
    (out / "matrix.html").write_text(render_html(result, with_plots=False), encoding="utf-8")


def runs_dir(out) -> Path:
    """Where a matrix run written to ``out`` keeps its campaigns: ``out/runs/<UTC time>``."""
    return Path(out) / "runs" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def run_matrix(specs: list, *, entries: list, op: str = "lora", budget: Optional[int] = None,
               time_s: Optional[float] = None, seed: int = 0, device: str = "cpu", out="reports/matrix",
               campaigns_dir=None, quiet: bool = False, upstream_contracts_only: bool = True,
               sglang_wheel: Optional[str] = None, log=None) -> dict:
    """One campaign (:class:`~kernel_oracle.fuzz.campaign_config.CampaignConfig`, the same seed for
    every release) and the corpus ``entries`` per spec of ``specs`` (strings or TargetSpecs), folded
    into one record of kind ``main`` with its ``release_matrix`` (Note [Release matrix]), written as
    ``out/matrix.{json,md,html}``; campaigns go under ``campaigns_dir`` (default :func:`runs_dir`).
    Returns the record; raises ``CampaignError`` naming the spec, and ``CampaignInterrupted``."""
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, run_campaign
    from kernel_oracle.harness.schema import merge, new_record

    out = Path(out)
    campaigns_dir = Path(campaigns_dir) if campaigns_dir is not None else runs_dir(out)
    if budget is None and time_s is None:
        time_s = 60.0
    record = new_record("main", seeds={"seed": seed}, device=device)
    runs, corpus_by_spec = [], {}
    for spec in sorted((str(s) for s in specs), key=release_key):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
        try:
            rec = run_campaign(CampaignConfig(
                target=spec, op=op, budget=budget, time_s=time_s, seed=seed, device=device,
                out_dir=campaigns_dir / slug, progress=not quiet,
                upstream_contracts_only=upstream_contracts_only, sglang_wheel=sglang_wheel))
        except CampaignError as exc:
            raise CampaignError(f"{spec}: {exc}") from None
        merge(record, rec, seeds_key=spec)
        t = rec["targets"][0] if rec["targets"] else {}
        runs.append({"spec": spec, "available": bool(t.get("available")), "reason": t.get("reason"),
                     "cases": int(rec["campaign"]["executed"]), "findings": rec["findings"]})
        corpus_by_spec[spec] = _corpus_results(entries, spec, device, sglang_wheel)
        if log is not None:
            log(f"{spec}: {rec['campaign']['executed']} cases, {len(rec['findings'])} findings"
                + ("" if t.get("available") else f" (unavailable: {t.get('reason')})"))
    record["release_matrix"] = build_matrix(runs, _corpus_rows(entries, corpus_by_spec, record))
    record["summary"] = {"targets": [str(s) for s in specs], "op": op, "time_s_per_target": time_s,
                         "budget_per_target": budget}
    _write(record, out)
    return record
