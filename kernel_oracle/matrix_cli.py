"""``kernel-oracle matrix``: several releases side by side, each finding bucket per release.

Note [Release matrix]
---------------------
``kernel-oracle matrix --target sglang==0.5.12 --target sglang==0.5.23`` runs, for each target, one
fuzz campaign (:func:`fuzz.campaign.run_campaign`, the same strategies and seed for every release)
and the real-bug corpus entries of that target family (:mod:`kernel_oracle.bug_corpus`), then folds
it all into one record of kind ``"main"`` with a ``release_matrix`` section that the Markdown and
HTML reports render as a table: one row per finding bucket (:mod:`harness.buckets`, one root
cause), one column per release ordered by version, the failing-case count in each cell (``-``: that
release did not run), and the derived **introduced in** (the first release that has the bucket) and
**fixed in** (the release after the last one that has it).  A bucket's target frame is compared
by file and function (``kv_b_lora_absorbed:_max_segment_len``), since releases move their modules.
Campaigns generate no malformed metadata unless ``--with-malformed``: released kernels implement no
strict validation, so those cases would only repeat the same validation gaps in every release.  A campaign is a random search: a bucket
absent from a release within its budget is evidence, not proof; the corpus rows are exact.

Exit codes (SPEC.md): 0 nothing found anywhere and every corpus entry as recorded; 1 findings, or a
corpus entry that does not fail on a buggy release or does not pass on a fixed one; 2 usage error;
3 nothing tested (every target unavailable or no case ran).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import re
import sys
from pathlib import Path
from typing import Optional

from kernel_oracle.cli_errors import one_line_errors

__all__ = ["add_arguments", "build_matrix", "main", "release_key"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)  # a usage error: one line, exit 2 (SPEC.md)
    parser.add_argument("--target", dest="targets", action="append", required=True, metavar="SPEC",
                        help="a target per release, repeatable: sglang==X.Y.Z, sglang-trt==X.Y.Z (or any spec)")
    parser.add_argument("--op", default="lora", help="lora, vision or one LoRA op (default lora)")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--time", dest="time_s", type=float, default=None, metavar="S",
                        help="seconds of fuzzing per target (default 60)")
    amount.add_argument("--budget", type=int, default=None, metavar="N", help="cases per target instead of --time")
    parser.add_argument("--seed", type=int, default=0, metavar="K", help="the same seed for every release")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when a GPU is visible, else cpu (Triton interpreter)")
    parser.add_argument("--out", default="reports/matrix", metavar="DIR",
                        help="writes DIR/matrix.{json,md,html}; campaigns go under DIR/runs/<UTC time>/")
    parser.add_argument("--sglang-wheel", default=None, metavar="PATH|DIR",
                        help="wheels of the sglang==X.Y.Z targets (machines without a package registry)")
    parser.add_argument("--corpus", default=None, metavar="DIR", help="the real-bug corpus (default: corpus/)")
    parser.add_argument("--no-corpus", action="store_true", help="campaigns only")
    parser.add_argument("--with-malformed", dest="upstream_contracts_only", action="store_false",
                        help="also generate malformed metadata (off by default: released kernels implement no "
                             "strict validation, so every release would show the same validation gaps)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


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
    from kernel_oracle.bug_corpus import run_entry
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


def _error(text: str, code: int = 2) -> int:
    print(f"kernel-oracle matrix: {text}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.harness.device import configure_process, default_device

    device = args.device or default_device()
    if len(set(args.targets)) != len(args.targets):
        return _error(f"error: --target given twice ({args.targets}); pass each release once")
    try:
        configure_process(device)  # the corpus runs here: before any kernel import
    except RuntimeError as exc:
        return _error(f"error: {exc}")
    from kernel_oracle.bug_corpus import CorpusError, load_corpus
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, CampaignInterrupted, run_campaign
    from kernel_oracle.harness.schema import add_note, merge, new_record, save
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    try:
        entries = [] if args.no_corpus else load_corpus(args.corpus)
    except CorpusError as exc:
        return _error(f"error: {exc}")
    out = Path(args.out)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    budget, time_s = args.budget, args.time_s
    if budget is None and time_s is None:
        time_s = 60.0
    record = new_record("main", seeds={"seed": args.seed}, device=device)
    runs, corpus_by_spec = [], {}
    for spec in sorted(args.targets, key=release_key):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
        try:
            rec = run_campaign(CampaignConfig(
                target=spec, op=args.op, budget=budget, time_s=time_s, seed=args.seed, device=device,
                out_dir=out / "runs" / stamp / slug, progress=args.progress,
                upstream_contracts_only=args.upstream_contracts_only, sglang_wheel=args.sglang_wheel))
        except CampaignError as exc:
            return _error(f"error: {spec}: {exc}")
        except CampaignInterrupted as exc:
            return _error(f"interrupted by {exc.signame} during {spec}; campaigns are under {out / 'runs' / stamp}", 3)
        merge(record, rec, seeds_key=spec)
        t = rec["targets"][0] if rec["targets"] else {}
        runs.append({"spec": spec, "available": bool(t.get("available")), "reason": t.get("reason"),
                     "cases": int(rec["campaign"]["executed"]), "findings": rec["findings"]})
        corpus_by_spec[spec] = _corpus_results(entries, spec, device, args.sglang_wheel)
        print(f"{spec}: {rec['campaign']['executed']} cases, {len(rec['findings'])} findings"
              + ("" if t.get("available") else f" (unavailable: {t.get('reason')})"), file=sys.stderr)
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
    record["release_matrix"] = build_matrix(runs, corpus)
    record["summary"] = {"targets": args.targets, "op": args.op, "time_s_per_target": time_s,
                         "budget_per_target": budget}
    path = save(record, out / "matrix.json", overwrite=True)
    result = Result.from_dict(record, source=str(path))
    (out / "matrix.md").write_text(render_markdown(result), encoding="utf-8")
    (out / "matrix.html").write_text(render_html(result, with_plots=False), encoding="utf-8")
    for row in record["release_matrix"]["rows"]:
        cells = ", ".join(f"{s}: {row['counts'].get(s, '-')}" for s in (r["spec"] for r in runs))
        print(f"  {row['bucket']}: {cells}; introduced in {row['introduced_in'] or '-'}, fixed in "
              f"{row['fixed_in'] or '-'}")
    print(f"report: {out / 'matrix.md'}, {out / 'matrix.html'}")
    if not any(r["available"] and r["cases"] for r in runs):
        return _error("tested nothing: no target was available or ran a case (exit 3)", 3)
    bad_corpus = any(r["as_expected"] is False for c in corpus for r in c["results"].values())
    return 1 if record["findings"] or bad_corpus else 0
