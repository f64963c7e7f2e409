"""``kernel-oracle fuzz``: run (or resume) a fuzzing campaign against one target.

Exit codes (docs/semantics.md#exit-codes): 0 cases ran and found nothing new (every finding, if any, is a known upstream
issue of the known-issues file, which it names), 1 new findings, 2 usage or I/O error (one line: a
bad option, ``--out`` a file or unwritable or held by another campaign, a target that cannot run
this op here), 3 interrupted (SIGTERM / SIGINT: state saved, rerun to resume) or nothing tested.
The library API is :func:`fuzz.campaign.run_campaign` of a :class:`fuzz.campaign_config.CampaignConfig`;
this module only parses and prints.  ``--gpus N|all`` / ``--scheduler tcp://HOST:8786`` run the
campaign as shards on a Dask cluster (:mod:`fuzz.cluster`, the optional ``cluster`` extra; then
``--targets`` may name several targets); ``--db redis://HOST:6379/N`` shares one Hypothesis example
database (and the findings' cases) between all campaigns.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from kernel_oracle.cli import options
from kernel_oracle.cli.report import report_beside
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "end_line", "finding_line", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)  # a usage error: one line, exit 2 (docs/semantics.md#exit-codes)
    options.add(parser, "targets", required=True,
                help="the target spec (several, comma-separated, with --gpus/--scheduler); "
                     + options.OPTIONS["targets"][1]["help"])
    options.add(parser, "op", required=True, type=options.campaign_op,
                help=options.op_help("one op family or some of its ops (step_a_q,step_b_q)"))
    amount = parser.add_mutually_exclusive_group()
    options.add(amount, "cases", help="cases to execute, shrinking included (default 100)")
    options.add(amount, "time", help="seconds to run")
    parser.add_argument("--case-timeout", dest="case_timeout_s", type=options.timeout_seconds, default=None,
                        metavar="S", help="seconds one case may run before it is a hang (default: half of --time, "
                                          "between 5 and 120; 120 with --cases)")
    options.add(parser, "seed")
    options.add(parser, "device")
    options.add(parser, "out", required=True, help="output directory; rerunning with the same DIR resumes the "
                                                   "campaign (the same target code, op and seed only)")
    options.add(parser, "fresh")
    parser.add_argument("--upstream-contracts-only", action="store_true",
                        help="generate no malformed metadata at all")
    options.add(parser, "with_malformed")
    options.add(parser, "memcheck")
    options.add(parser, "limits")
    parser.add_argument("--no-isolate", dest="isolate", action="store_false",
                        help="run the target in this process (faster start; a crash or hang ends the campaign)")
    options.add(parser, "quiet", help="no progress bar")
    options.add(parser, "gpus")
    options.add(parser, "scheduler")
    options.add(parser, "db", help="one Hypothesis example database in Redis shared by every worker: a failure "
                                   "found by one is replayed by all")
    parser.add_argument("--shards", type=options.positive_int, default=1, metavar="K",
                        help="with --gpus/--scheduler: K shards per target x op x dtype, seeds SEED..SEED+K-1")
    parser.add_argument("--dtypes", default=None, metavar="LIST",
                        help="with --gpus/--scheduler: one shard per dtype of LIST (default: one shard for all)")
    options.add(parser, "triton_cache")
    options.add(parser, "warm_up", help="before the clock starts, let the worker warm the target up for up to S "
                                        "seconds (harness.warmup: on CUDA our LoRA kernels' variants compile in "
                                        "parallel); default none")
    options.add(parser, "sglang_wheel")


def finding_line(f: dict) -> str:
    """The console lines of one finding record: ``FINDING`` (new) or ``KNOWN`` (a known upstream issue,
    with its id and link) and its one-sentence headline; beneath it its dtypes, its smallest example
    in words and what it expected, two more examples and its repro command."""
    from kernel_oracle.harness.headline import dtypes_of, example_text, headline

    head = "KNOWN" if f.get("known") else "FINDING"
    text = f"{head} {f['id']}: {f.get('headline') or headline(f)}"
    if f.get("known"):
        text += f"\n  known upstream issue {f['known']}: {f.get('upstream')}"
    for entry in f.get("corpus") or ():  # Note [Known cases]
        text += f"\n  matches corpus entry {entry['id']}: {entry['title']} ({entry['upstream']})"
    text += f"\n  dtypes: {', '.join(dtypes_of(f)) or '-'}"
    seen = f.get("malformed_sightings") or {}
    if seen:  # the same defect, shown by malformed inputs too (Note [One defect through malformed input])
        text += "\n  also seen through malformed metadata: " + ", ".join(
            f"{kind} ({n} case{'s' if n != 1 else ''})" for kind, n in seen.items())
    text += f"\n  smallest example: {example_text(f)}"
    if f.get("expected"):
        text += f"\n  expected: {f['expected']}"
    for ex in (f.get("examples") or [])[:2]:
        if isinstance(ex, dict):
            text += f"\n  also: {example_text(ex)}"
    return text + f"\n  repro: {f['repro']}"


def end_line(out, findings: list, cases: int) -> str:
    """The run's last line: what to do next (``next: kernel-oracle report DIR`` and the first new
    finding's repro) or ``clean: N cases, no findings``."""
    new = [f for f in findings if not f.get("known")] or findings
    if not new:
        return f"clean: {cases} cases, no findings"
    return f"next: kernel-oracle report {out}\n  first finding: {new[0]['repro']}"


def _error(text: str, code: Optional[int] = None) -> int:
    """Print ``text`` as one line; ``code``, or the usage-error exit code."""
    print(f"kernel-oracle fuzz: {text}", file=sys.stderr)
    return run_outcome(usage_error=True).exit_code if code is None else code


def _outcome(findings: list, *, tested: bool, incomplete: bool = False):
    """The run's outcome: a finding that is a known upstream issue does not count as new."""
    new = sum(1 for f in findings if not f.get("known"))
    return run_outcome(new_findings=new, known_findings=len(findings) - new, incomplete=incomplete, tested=tested)


def _config(args: argparse.Namespace, target, device: str):
    """The campaign configuration of ``args`` for ``target`` (the first shard's, on a cluster)."""
    from kernel_oracle.jobs.fuzz_campaign import fuzz_config

    return fuzz_config(target, args.op, device=device, out_dir=args.out, cases=args.cases, time_s=args.time_s,
                       seed=args.seed, warm_up_s=args.warm_up_s, progress=not args.quiet,
                       upstream_contracts_only=args.upstream_contracts_only, with_malformed=args.with_malformed,
                       limits=args.limits, isolate=args.isolate, case_timeout_s=args.case_timeout_s,
                       sglang_wheel=args.sglang_wheel, fresh=args.fresh, memcheck=args.memcheck)


def _cluster_main(args: argparse.Namespace, cluster: dict) -> int:
    """``--gpus`` / ``--scheduler``: the shards of ``--targets`` x op x dtype x seed."""
    from kernel_oracle.fuzz.campaign_config import CampaignError
    from kernel_oracle.fuzz.cluster import ClusterError, plan_shards, run_cluster
    from kernel_oracle.fuzz.strategies import ALL_DTYPES
    from kernel_oracle.harness.device import resolve_device
    from kernel_oracle.harness.family import campaign_ops

    try:
        dtypes = options.parse_list(args.dtypes, "--dtypes", ALL_DTYPES) if args.dtypes else None
        # the shards run on the cluster's workers: this machine needs no GPU for --device cuda
        device = "cuda" if cluster["gpus"] and args.device == "auto" else resolve_device(args.device, here=False)
    except ValueError as exc:
        return _error(f"error: {exc}")
    ops = list(campaign_ops(args.op)[1])
    shards = plan_shards(args.targets, ops, dtypes, range(args.seed, args.seed + args.shards))
    try:
        record = run_cluster(shards, _config(args, shards[0].target, device), gpus=cluster["gpus"],
                             scheduler=cluster["scheduler"], db_url=cluster["db"], log=None if args.quiet else print)
    except (ClusterError, CampaignError) as exc:
        return _error(f"error: {exc}")
    except OSError as exc:  # an unreachable scheduler or Redis
        return _error(f"error: cannot reach the cluster: {exc}")
    cases = sum(g["cases"] for g in record["groups"])
    camp = record.get("campaign") or {}
    print(f"{len(shards)} shards, {cases} cases, {len(record['findings'])} findings (bucketed)"
          + (f"; {camp['wall_s']:.1f}s wall, {camp['cases_per_s']:.1f} cases/s" if camp.get("wall_s") else ""))
    for note in record.get("notes", []):
        print(f"  note: {note}")
    for f in record["findings"]:
        print(finding_line(f))
    from kernel_oracle.harness.malformed import gap_lines

    for line in gap_lines(record.get("validation_gaps") or []):
        print(line)
    print(f"summary: {args.out}/summary.json; findings: {args.out}/findings.jsonl; shards: {args.out}/shards/")
    print(end_line(args.out, record["findings"], cases))
    outcome = _outcome(record["findings"], tested=cases > 0)
    if outcome.verdict == "empty":
        return _error("tested nothing: no case ran (exit 3)", outcome.exit_code)
    return outcome.exit_code


def _prepare(args: argparse.Namespace):
    """``(cluster settings or None, device, shared example database or None)``; ``ValueError`` (one
    line) for a usage error."""
    from kernel_oracle.fuzz.campaign_config import check_flags
    from kernel_oracle.harness.device import configure_process, resolve_device, use_triton_cache
    from kernel_oracle.harness.known_issues import load_known_issues
    from kernel_oracle.jobs.main_job import check_out

    if args.gpus is None and args.scheduler is None:
        for flag, given in (("--shards", args.shards != 1), ("--dtypes", args.dtypes is not None)):
            if given:  # their shards exist only on a cluster: without one they would be ignored
                raise ValueError(f"{flag} shards a campaign over --gpus or --scheduler; pass one of those, or drop "
                                 f"{flag}")
        if len(args.targets) != 1:
            raise ValueError(f"--targets names {len(args.targets)} targets; a campaign fuzzes one (pass --gpus or "
                             "--scheduler to run several as shards)")
    check_flags(with_malformed=args.with_malformed, memcheck=args.memcheck,
                upstream_contracts_only=args.upstream_contracts_only)
    load_known_issues()  # a bad $KERNEL_ORACLE_KNOWN_ISSUES file: KnownIssuesError, a ValueError
    check_out(args.out)
    if args.triton_cache is not None:
        use_triton_cache(args.triton_cache)
    cluster = options.cluster_settings(args)
    if cluster is not None:
        return cluster, None, None
    device = resolve_device(args.device)  # the arguments first: looking for a GPU imports torch
    database = None
    if args.db:
        from kernel_oracle.fuzz.cluster import open_database
        from kernel_oracle.harness.family import campaign_ops

        database = open_database(args.db, str(args.targets[0]), campaign_ops(args.op)[0])
    if not args.isolate:
        try:
            configure_process(device)  # the target runs here: before any kernel import
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
    return None, device, database


def _print_campaign(args: argparse.Namespace, record: dict) -> int:
    """Print one campaign's record; the exit code."""
    t = record["targets"][0] if record["targets"] else {}
    camp = record["campaign"]
    if not t.get("available", True) or not camp["ops"]:
        for note in record.get("notes", []):
            _error(note)
        return run_outcome(usage_error=True).exit_code
    print(f"{camp['target']} {args.op}: {camp['executed']} cases in {camp['elapsed_s']:.1f}s "
          f"(precision {t.get('precision')}; dtypes {', '.join(camp['dtypes'])})")
    if t.get("strict") is False and not camp.get("upstream_contracts_only"):
        from kernel_oracle.harness.malformed import lenient_line

        print(lenient_line(camp["target"], camp.get("with_malformed", False)))
    for note in record.get("notes", []):
        print(f"  note: {note}")
    for g in record["groups"]:
        bad = {k: v for k, v in g["findings"].items() if v}
        print(f"  {g['op']:>13} {g['dtype']:>9} {g['shape_class']:>13}: {g['passes']}/{g['cases']} passed"
              + (f", {g['gaps']} validation gaps" if g.get("gaps") else "")
              + (f", findings {bad}" if bad else "")
              + (f", max error ratio {g['error_ratio']['max']:.3g}" if g["error_ratio"]["max"] is not None else ""))
    for f in record["findings"]:  # printed when found too; here with the final dtypes, count and examples
        print(finding_line(f))
    from kernel_oracle.harness.malformed import gap_lines

    for line in gap_lines(record.get("validation_gaps") or []):
        print(line)
    print(f"summary: {args.out}/summary.json; findings: {args.out}/findings.jsonl")
    print(report_beside(f"{args.out}/summary.json"))
    print(end_line(args.out, record["findings"], camp["executed"]))
    outcome = _outcome(record["findings"], tested=camp["executed"] > 0,
                       incomplete=record["summary"].get("status") == "incomplete")
    if outcome.verdict != "findings" and record["findings"]:
        print(f"all {len(record['findings'])} findings are known upstream issues "
              f"({record['summary'].get('known_issues_file') or 'harness/known_issues.toml'})")
    if outcome.verdict == "incomplete":
        return _error(f"incomplete: {record['notes'][-1]} (exit 3)", outcome.exit_code)
    if outcome.verdict == "empty":
        return _error("tested nothing: no case ran (exit 3)", outcome.exit_code)
    return outcome.exit_code


def main(args: argparse.Namespace) -> int:
    try:
        cluster, device, database = _prepare(args)
    except ValueError as exc:  # ClusterError and TargetError too: no redis package, a bad URL, no GPU
        return _error(f"error: {exc}")
    if cluster is not None:
        return _cluster_main(args, cluster)
    from kernel_oracle.fuzz.campaign import CampaignError, CampaignInterrupted, run_campaign

    try:
        record = run_campaign(_config(args, args.targets[0], device), database=database, announce=print)
    except CampaignError as exc:
        return _error(f"error: {exc}")
    except CampaignInterrupted as exc:
        n = len((exc.record or {}).get("findings") or [])
        return _error(f"interrupted by {exc.signame} after {exc.executed} cases ({n} findings); state saved in "
                      f"{args.out}; rerun the same command to resume", run_outcome(interrupted=True).exit_code)
    return _print_campaign(args, record)
