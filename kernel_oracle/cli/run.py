"""``kernel-oracle run``: parse, check every option before any work, run the main job, print where
the reports are (:mod:`kernel_oracle.jobs.main_job`, Note [The main job]).

Exit codes (docs/semantics.md#exit-codes): 0 clean, 1 new findings, 2 usage or I/O error (one line), 3 incomplete (a
part could not run, nothing was tested) or interrupted (SIGTERM / SIGINT).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from kernel_oracle.cli import options
from kernel_oracle.harness.family import default_family_names
from kernel_oracle.fuzz.time_budget import DEFAULT_TIME_S
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "main"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)  # a usage error: one line, exit 2 (docs/semantics.md#exit-codes)
    options.add(parser, "device")
    options.add(parser, "time",
                help=f"wall-clock budget of the whole job (default {DEFAULT_TIME_S['run']['cpu']:g} s on CPU, "
                     f"{DEFAULT_TIME_S['run']['cuda']:g} s on GPU)")
    options.add(parser, "seed", help="seed of the selfcheck and of every campaign")
    options.add(parser, "out", default="reports/out",
                help="where latest.{json,md,html}, history/ and runs/ go (default reports/out)")
    options.add(parser, "targets", help="target specs to fuzz (default: every built-in target that is available "
                                        "here); " + options.OPTIONS["targets"][1]["help"])
    options.add(parser, "op", default=",".join(default_family_names()),
                help=f"comma-separated op families to fuzz: {options.op_families_text()} (default: "
                     f"{','.join(default_family_names())})")
    parser.add_argument("--no-selfcheck", action="store_true", help="skip the references' selfcheck")
    options.add(parser, "quiet", help="no progress lines")
    options.add(parser, "triton_cache")
    options.add(parser, "sglang_wheel")
    options.add(parser, "gpus")
    options.add(parser, "scheduler")
    options.add(parser, "db")
    options.add(parser, "with_malformed")


class _Interrupted(KeyboardInterrupt):
    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


def _checked(args: argparse.Namespace) -> dict:
    """The main job's keywords from ``args``; ``ValueError`` (one line) for a usage error, before any work."""
    from kernel_oracle.harness.device import resolve_device, use_triton_cache
    from kernel_oracle.harness.known_issues import load_known_issues
    from kernel_oracle.jobs.main_job import check_out

    families = tuple(options.families(args.op))
    if args.db is not None and args.gpus is None and args.scheduler is None:
        raise ValueError("--db needs --gpus or --scheduler (the main job's campaigns share it)")
    load_known_issues()  # a bad $KERNEL_ORACLE_KNOWN_ISSUES file: KnownIssuesError, a ValueError
    check_out(args.out)
    cluster = options.cluster_settings(args)
    device = resolve_device(args.device)  # the arguments first: looking for a GPU imports torch
    if args.triton_cache is not None:
        use_triton_cache(args.triton_cache)  # before the worker starts: it inherits the cache
    return dict(device=device, time_s=args.time_s, seed=args.seed, out=args.out, targets=args.targets,
                families=families, selfcheck=not args.no_selfcheck, quiet=args.quiet, cluster=cluster,
                sglang_wheel=args.sglang_wheel, with_malformed=args.with_malformed)


def _report(result: dict) -> int:
    """Print the job's summary and where its reports are; the exit code."""
    from kernel_oracle.harness.schema import SELFCHECK_TARGET

    rec = result["record"]
    cases = sum(g["cases"] for g in rec["groups"])
    fuzz = [g for g in rec["groups"] if g["target"] != SELFCHECK_TARGET]
    rows = [g for g in rec["groups"] if g["target"] == SELFCHECK_TARGET]
    gaps = sum(int(g.get("gaps", 0)) for g in fuzz)
    new = [f for f in rec["findings"] if not f.get("known")]
    known = len(rec["findings"]) - len(new)
    print(f"{sum(g['cases'] for g in fuzz)} fuzz cases ({sum(g['passes'] for g in fuzz)} passed"
          + (f", {gaps} validation gaps" if gaps else "") + f"), {sum(g['cases'] for g in rows)} selfcheck rows "
          f"({sum(g['passes'] for g in rows)} passed), {len(rec['findings'])} findings"
          + (f" ({known} known upstream issues)" if known else "") + f", {len(rec['notes'])} notes")
    for note in rec["notes"]:
        print(f"  note: {note}")
    from kernel_oracle.harness.malformed import gap_lines

    for line in gap_lines(rec.get("validation_gaps") or []):
        print(line)
    for f in rec["findings"]:
        if f.get("known"):
            print(f"  known: {f['id']} is upstream issue {f['known']}: {f.get('upstream')}")
    print(f"JSON:     {result['json']}")
    print(f"Markdown: {result['md']}")
    print(f"HTML:     {result['html']}")
    print(f"history:  {result['history']}")
    failed = rec["summary"].get("failed_parts") or []
    outcome = run_outcome(new_findings=len(new), known_findings=known, incomplete=bool(failed), tested=cases > 0)
    if outcome.verdict == "incomplete":
        print(f"incomplete: {len(failed)} part(s) could not run (exit 3)")
    elif outcome.verdict == "empty":
        print("incomplete: no case ran (exit 3)")
    return outcome.exit_code


def main(args: argparse.Namespace) -> int:
    try:
        job = _checked(args)
    except ValueError as exc:  # usage errors only: everything in _checked runs before any work
        print(f"kernel-oracle run: {exc}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    from kernel_oracle.fuzz.stopping import take_signal
    from kernel_oracle.jobs.main_job import run_main_job

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Interrupted("SIGTERM")

    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if take_signal() is not None:  # noted by the command line while this imported (Note [Stopping a campaign])
            raise _Interrupted("SIGTERM")
        result = run_main_job(**job)
    except KeyboardInterrupt as exc:
        signame = getattr(exc, "signame", "SIGINT")
        print(f"kernel-oracle run: interrupted by {signame}; no report written (campaign files kept under "
              f"{Path(args.out) / 'runs'})", file=sys.stderr)
        return run_outcome(interrupted=True).exit_code
    except OSError as exc:
        print(f"kernel-oracle run: error: cannot write the report: {exc}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    finally:
        signal.signal(signal.SIGTERM, old)
    return _report(result)
