"""``kernel-oracle matrix``: several releases side by side, each finding bucket per release
(:mod:`kernel_oracle.jobs.matrix`, Note [Release matrix]).

Exit codes (docs/semantics.md#exit-codes): 0 nothing found anywhere and every corpus entry as recorded; 1 findings, or a
corpus entry that does not fail on a buggy release or does not pass on a fixed one; 2 usage error;
3 nothing tested (every target unavailable or no case ran).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from kernel_oracle.cli import options
from kernel_oracle.fuzz.time_budget import DEFAULT_TIME_S
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)  # a usage error: one line, exit 2 (docs/semantics.md#exit-codes)
    options.add(parser, "targets", required=True,
                help="a target per release, comma-separated or repeated: sglang==X.Y.Z, sglang-trt==X.Y.Z, "
                     "sglang-v2==X.Y.Z, sglang-csgmv==X.Y.Z (or any spec); with --releases, sglang, sglang-trt, "
                     "sglang-v2 and sglang-csgmv stand for every release given there")
    options.add(parser, "op", default="lora",
                help=options.op_help("comma-separated op families or ops, one campaign per family (default lora)"))
    parser.add_argument("--releases", default=None, metavar="all|X.Y.Z[,X.Y.Z...]",
                        help="the releases of each target named without one (sglang, sglang-trt, sglang-v2, sglang-csgmv); all: "
                             "every release with a wheel in --sglang-wheel or the cache that has the op's code")
    parser.add_argument("--configurations", choices=("all",), default=None,
                        help="all: every configuration each target knows (sglang-trt: lora_opti, cublas, cublas_kv_b, "
                             "pdl on and off; sglang-v2: pdl on and off; sglang-csgmv: split_k=on and "
                             "deterministic=on where the release reads them; sglang and flashinfer-cudnn: engine, each "
                             "FlashInfer release staged); specs that run the same code path are tested once")
    amount = parser.add_mutually_exclusive_group()
    options.add(amount, "time", help=f"seconds of fuzzing per distinct code (default {DEFAULT_TIME_S['matrix']:g})")
    options.add(amount, "cases", help="cases per distinct code instead of --time")
    parser.add_argument("--regression-cases", type=options.positive_int, default=None, metavar="N",
                        help="at most N cases in each column whose releases are all older than the newest one "
                             "(default: the matrix's regression budget; the newest release's columns, and targets "
                             "that are no release, get the whole --time or --cases)")
    options.add(parser, "seed", help="the same seed for every release")
    options.add(parser, "device")
    options.add(parser, "out", default="reports/matrix",
                help="writes DIR/matrix.{json,md,html}; campaigns go under DIR/runs/<UTC time>/")
    options.add(parser, "sglang_wheel")
    parser.add_argument("--corpus", default=None, metavar="DIR", help="a folder of corpus entries (default: the installed corpus)")
    parser.add_argument("--no-corpus", action="store_true", help="campaigns only")
    options.add(parser, "with_malformed",
                help="count every malformed input a release accepts as a finding (default: judged by consequence: "
                     "defined rows changed or out-of-bounds memory are findings, rejected or harmless inputs are "
                     "the validation-gap counts of each column)")
    options.add(parser, "quiet", help="no progress bars")


def _error(text: str, code: Optional[int] = None) -> int:
    print(f"kernel-oracle matrix: {text}", file=sys.stderr)
    return run_outcome(usage_error=True).exit_code if code is None else code


def _print(record: dict) -> None:
    columns, summary = record["release_matrix"]["releases"], record["summary"]
    if summary.get("current_share") is not None:  # Note [Matrix budget]
        print(f"  cases: {summary['current_cases']} in the newest release's code ({summary['current_share']:.0%}), "
              f"{summary['regression_cases']} in older releases' (regression budget)")
    for label in summary.get("failed_columns") or ():
        print(f"  {label}: ran nothing ({next(c['failed'] for c in columns if c['spec'] == label)})")
    for c in columns:
        if len(c.get("members") or ()) > 1 or c.get("same_as"):
            same = f"; the same code as {c['same_as']}" if c.get("same_as") else ""
            print(f"  {c['spec']}: same code ({', '.join(c['members'])}), tested as {c['tested']}{same}")
    specs = [c["spec"] for c in columns]
    for row in record["release_matrix"]["rows"]:
        replayed = row.get("replayed") or {}
        cells = ", ".join(f"{s}: {'replay' if s in replayed and not row['counts'][s] else row['counts'][s]}"
                          for s in specs if s in row["counts"])
        history = "; ".join(f"{lane}: introduced in {h['introduced_in']}, fixed in {h['fixed_in'] or '-'}"
                            for lane, h in row.get("history", {}).items())
        print(f"  {row['bucket']}: {cells}; {history or 'introduced in -'}")
        if row.get("headline"):  # what failed, in words, and the upstream defect it is
            print(f"    {row['headline']}")


def _release_list(text, sglang_wheel) -> list:
    """The versions of ``--releases``: a comma list, or ``all`` (every cached or given wheel)."""
    from kernel_oracle.fuzz.targets.sglang_wheel import cache_dir
    from kernel_oracle.jobs.matrix import release_key

    if text != "all":
        return [v.strip() for v in str(text).split(",") if v.strip()]
    folders = [Path(sglang_wheel).expanduser()] if sglang_wheel and Path(sglang_wheel).is_dir() else []
    folders.append(cache_dir() / "wheels")
    found = {p.name.split("-")[1] for d in folders for p in d.glob("sglang-*.whl")}
    return sorted(found, key=lambda v: release_key(f"sglang=={v}"))


def _specs(args, device: str) -> list:
    from kernel_oracle.fuzz.targets import TargetSources
    from kernel_oracle.fuzz.targets.sglang import configuration_applies, release_identity
    from kernel_oracle.jobs.matrix import expand_targets

    families = list(options.op_list(args.op))
    sources = TargetSources(sglang_wheel=args.sglang_wheel)
    releases = _release_list(args.releases, args.sglang_wheel) if args.releases else None
    if args.releases == "all" and not releases:
        raise ValueError("--releases all: no sglang-*.whl in --sglang-wheel or the cache "
                         "(bash scripts/sglang_wheels.sh fetches them)")
    return expand_targets(args.targets, releases=releases, configurations=args.configurations == "all",
                          available=lambda s: any(release_identity(s, f, device, sources) for f in families)
                          if args.releases == "all" else True,
                          applies=lambda s: configuration_applies(s, sources))


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.harness.device import configure_process, resolve_device

    names = [str(s) for s in args.targets]
    if len(set(names)) != len(names):
        return _error(f"error: --targets names a target twice ({names}); pass each release once")
    try:  # the arguments first: looking for a GPU imports torch
        options.op_list(args.op)
        device = resolve_device(args.device)
        configure_process(device)  # the corpus runs here: before any kernel import
    except (ValueError, RuntimeError) as exc:
        return _error(f"error: {exc}")
    from kernel_oracle.fuzz.campaign import CampaignError, CampaignInterrupted
    from kernel_oracle.jobs.bug_corpus import CorpusError, load_corpus
    from kernel_oracle.jobs.matrix import run_matrix, runs_dir

    try:
        specs = _specs(args, device)
        entries = [] if args.no_corpus else load_corpus(args.corpus)
    except (CorpusError, ValueError) as exc:
        return _error(f"error: {exc}")
    campaigns = runs_dir(args.out)
    try:
        record = run_matrix(specs, entries=entries, op=args.op, budget=args.cases, time_s=args.time_s,
                            seed=args.seed, device=device, out=args.out, campaigns_dir=campaigns, quiet=args.quiet,
                            with_malformed=args.with_malformed, sglang_wheel=args.sglang_wheel,
                            log=lambda text: print(text, file=sys.stderr),
                            **({} if args.regression_cases is None else {"regression_cases": args.regression_cases}))
    except CampaignError as exc:
        return _error(f"error: {exc}")
    except CampaignInterrupted as exc:
        during = ((exc.record or {}).get("campaign") or {}).get("target")
        written = "release_matrix" in (exc.record or {})  # the columns that ran, without fix claims
        return _error(f"interrupted by {exc.signame}" + (f" during {during}" if during else "")
                      + (f"; the columns that ran: {Path(args.out) / 'matrix.md'}" if written else "")
                      + f"; campaigns are under {campaigns}", run_outcome(interrupted=True).exit_code)
    _print(record)
    print(f"report: {Path(args.out) / 'matrix.md'}, {Path(args.out) / 'matrix.html'}")
    releases = record["release_matrix"]["releases"]
    corpus = record["release_matrix"]["corpus"]
    # a release's findings are what the matrix is for: known upstream issues count here too
    outcome = run_outcome(new_findings=len(record["findings"]),
                          regressions=sum(r["as_expected"] is False for c in corpus for r in c["results"].values()),
                          tested=any(r["available"] and r["cases"] for r in releases),
                          incomplete=bool(record["summary"].get("failed_columns")))
    if outcome.verdict == "empty":
        return _error("tested nothing: no target was available or ran a case (exit 3)", outcome.exit_code)
    return outcome.exit_code
