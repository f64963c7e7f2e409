"""``kernel-oracle fuzz``: run (or resume) a fuzzing campaign against one target.

Exit codes (SPEC.md): 0 cases ran and found nothing new (every finding, if any, is a known upstream
issue of ``harness/known_issues.toml``), 1 new findings, 2 usage or I/O error (one line: a
bad option, ``--out`` a file or unwritable or held by another campaign, a target that cannot run
this op here), 3 interrupted (SIGTERM / SIGINT: state saved, rerun to resume) or nothing tested.
The library API is :func:`fuzz.campaign.run_campaign`; this module only parses and prints.
``--gpus N|all`` / ``--scheduler tcp://HOST:8786`` run the campaign as shards on a Dask cluster
(:mod:`fuzz.cluster`, the optional ``cluster`` extra); ``--db redis://HOST:6379/N`` shares one
Hypothesis example database (and the findings' cases) between all campaigns.
"""

from __future__ import annotations

import argparse
import sys

from kernel_oracle.cli_errors import finite_float, one_line_errors

__all__ = ["add_arguments", "finding_line", "main"]


def _positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds but got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 case but got {text!r}; a campaign of no cases "
                                         f"tests nothing")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kernel_oracle.fuzz.campaign import FAMILY_OF

    one_line_errors(parser)  # a usage error: one line, exit 2 (SPEC.md)
    parser.add_argument("--target", required=True,
                        help="reference, triton, sglang, torch-varlen, flashinfer-cudnn, mutant:NAME or "
                             "package.module[:attr]")
    parser.add_argument("--op", required=True, choices=sorted(FAMILY_OF), help="lora, vision or one LoRA op")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--budget", type=_positive_int, default=None, metavar="N",
                        help="cases to execute, shrinking included (default 100)")
    amount.add_argument("--time", dest="time_s", type=_positive_float, default=None, metavar="S",
                        help="seconds to run")
    parser.add_argument("--case-timeout", dest="case_timeout_s", type=_positive_float, default=None, metavar="S",
                        help="seconds one case may run before it is a hang (default: half of --time, "
                             "between 5 and 120; 120 with --budget)")
    parser.add_argument("--seed", type=int, default=0, metavar="K")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when a GPU is visible, else cpu (Triton interpreter)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory; rerunning with the same DIR resumes the campaign")
    parser.add_argument("--upstream-contracts-only", action="store_true",
                        help="generate no malformed metadata (for targets without strict validation, e.g. sglang)")
    parser.add_argument("--limits", choices=("tiny", "small", "gpu", "full"), default=None,
                        help="problem sizes (default: tiny for interpreted Triton, small for the CPU reference, "
                             "gpu on a GPU: small and tile-edge heavy with a share of full-size cases)")
    parser.add_argument("--no-isolate", dest="isolate", action="store_false",
                        help="run the target in this process (faster start; a crash or hang ends the campaign)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--gpus", default=None, metavar="N|all",
                        help="one pinned worker per GPU of this machine (Dask); the work is sharded by target x "
                             "op x dtype x seed and merged into one report in --out")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                        help="run the shards on an existing Dask cluster (dask scheduler / dask worker)")
    parser.add_argument("--db", default=None, metavar="redis://HOST:6379/N",
                        help="one Hypothesis example database in Redis shared by every worker: a failure "
                             "found by one is replayed by all")
    parser.add_argument("--seeds", type=_positive_int, default=1, metavar="K",
                        help="with --gpus/--scheduler: K shards per target x op x dtype, seeds SEED..SEED+K-1")
    parser.add_argument("--dtypes", default=None, metavar="LIST",
                        help="with --gpus/--scheduler: one shard per dtype of LIST (default: one shard for all)")
    parser.add_argument("--triton-cache", default=None, metavar="DIR",
                        help="a directory for Triton's compiled kernels, kept between runs (TRITON_CACHE_DIR of this "
                             "process and its workers): a later run loads binaries instead of compiling")
    parser.add_argument("--warm-up", dest="warm_up_s", type=_positive_float, default=None, metavar="S",
                        help="before the clock starts, let the worker warm the target up for up to S seconds "
                             "(harness.warmup: on CUDA our LoRA kernels' variants compile in parallel); default none")
    parser.add_argument("--sglang-wheel", default=None, metavar="PATH|DIR",
                        help="for --target sglang==X.Y.Z: the release's wheel, or a directory of wheels (machines "
                             "without a package registry; default: the cache, then pip download)")


def finding_line(f: dict) -> str:
    """The console lines of one finding record: ``FINDING`` (new) or ``KNOWN`` (a known upstream issue,
    with its id and link), its bucket's count, first message line and repro command."""
    count = f.get("count", 1)
    head = "KNOWN" if f.get("known") else "FINDING"
    text = (f"{head} {f['id']} [{f['kind']}] {f['op']} {f.get('dtype', '-')} {f.get('shape_class', '-')}"
            + (f" ({count} failing cases)" if isinstance(count, int) and count > 1 else "")
            + f": {f['message'].splitlines()[0] if f['message'] else ''}")
    if f.get("known"):
        text += f"\n  known upstream issue {f['known']}: {f.get('upstream')}"
    return text + f"\n  repro: {f['repro']}"


def _error(text: str, code: int = 2) -> int:
    print(f"kernel-oracle fuzz: {text}", file=sys.stderr)
    return code


def _cluster_main(args: argparse.Namespace) -> int:
    """``--gpus`` / ``--scheduler``: the shards of ``--target`` (comma-separated) x op x dtype x seed."""
    from kernel_oracle.fuzz.cluster import ClusterError, plan_shards, resolve_gpus, run_cluster
    from kernel_oracle.fuzz.strategies import ALL_DTYPES
    from kernel_oracle.harness.opinfo import FAMILY_OF, FAMILY_OPS

    try:
        if args.gpus is not None and args.scheduler is not None:
            raise ClusterError("pass --gpus or --scheduler, not both")
        gpus = resolve_gpus(args.gpus) if args.gpus is not None else None
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
        bad = [d for d in dtypes or () if d not in ALL_DTYPES]
        if bad:
            raise ClusterError(f"--dtypes {args.dtypes!r}: the only valid values are {list(ALL_DTYPES)}")
    except ClusterError as exc:
        return _error(f"error: {exc}")
    device = args.device or ("cuda" if gpus else "cpu")
    from kernel_oracle.harness.targets import TargetError, parse_target_list

    try:
        targets = parse_target_list(args.target)
    except TargetError as exc:
        return _error(f"error: {exc}")
    family_ops = FAMILY_OPS.get(args.op)
    ops = list(family_ops) if family_ops and all(o in FAMILY_OF for o in family_ops) else [args.op]
    shards = plan_shards(targets, ops, dtypes, range(args.seed, args.seed + args.seeds))
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError

    try:
        settings = CampaignConfig(target=shards[0].target, op=shards[0].op, out_dir=args.out, device=device,
                                  budget=args.budget, time_s=args.time_s,
                                  upstream_contracts_only=args.upstream_contracts_only, limits=args.limits,
                                  isolate=args.isolate, case_timeout_s=args.case_timeout_s,
                                  sglang_wheel=args.sglang_wheel)
        record = run_cluster(shards, settings, gpus=gpus, scheduler=args.scheduler, db_url=args.db,
                             log=None if not args.progress else print)
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
    print(f"summary: {args.out}/summary.json; findings: {args.out}/findings.jsonl; shards: {args.out}/shards/")
    if any(not f.get("known") for f in record["findings"]):
        return 1
    return 0 if cases else _error("tested nothing: no case ran (exit 3)", 3)


def _shared_database(args: argparse.Namespace):
    if not args.db:
        return None
    from kernel_oracle.fuzz.campaign import FAMILY_OF
    from kernel_oracle.fuzz.cluster import open_database

    return open_database(args.db, args.target, FAMILY_OF[args.op])


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.harness.device import configure_process, default_device, use_triton_cache

    if args.triton_cache is not None:
        try:
            use_triton_cache(args.triton_cache)
        except ValueError as exc:
            return _error(f"error: {exc}")
    if args.gpus is not None or args.scheduler is not None:
        return _cluster_main(args)
    try:
        database = _shared_database(args)
    except ValueError as exc:  # ClusterError: no redis package, a bad URL
        return _error(f"error: {exc}")
    device = args.device or default_device()
    if not args.isolate:
        try:
            configure_process(device)  # the target runs here: before any kernel import
        except RuntimeError as exc:
            return _error(f"error: {exc}")
    from kernel_oracle.fuzz.campaign import CampaignConfig, CampaignError, CampaignInterrupted, run_campaign

    try:
        config = CampaignConfig(target=args.target, op=args.op, budget=args.budget, time_s=args.time_s,
                                seed=args.seed, device=device, out_dir=args.out,
                                upstream_contracts_only=args.upstream_contracts_only, progress=args.progress,
                                limits=args.limits, isolate=args.isolate, case_timeout_s=args.case_timeout_s,
                                warm_up_s=args.warm_up_s, sglang_wheel=args.sglang_wheel)
        record = run_campaign(config, database=database)
    except CampaignError as exc:
        return _error(f"error: {exc}")
    except CampaignInterrupted as exc:
        n = len((exc.record or {}).get("findings") or [])
        return _error(f"interrupted by {exc.signame} after {exc.executed} cases ({n} findings); state saved in "
                      f"{args.out}; rerun the same command to resume", 3)
    t = record["targets"][0] if record["targets"] else {}
    camp = record["campaign"]
    if not t.get("available", True) or not camp["ops"]:
        for note in record.get("notes", []):
            _error(note)
        return 2
    print(f"{args.target} {args.op}: {camp['executed']} cases in {camp['elapsed_s']:.1f}s "
          f"(precision {t.get('precision')}; dtypes {', '.join(camp['dtypes'])})")
    for note in record.get("notes", []):
        print(f"  note: {note}")
    for g in record["groups"]:
        bad = {k: v for k, v in g["findings"].items() if v}
        print(f"  {g['op']:>13} {g['dtype']:>9} {g['shape_class']:>13}: {g['passes']}/{g['cases']} passed"
              + (f", findings {bad}" if bad else "")
              + (f", max error ratio {g['error_ratio']['max']:.3g}" if g["error_ratio"]["max"] is not None else ""))
    for f in record["findings"]:
        print(finding_line(f))
    print(f"summary: {args.out}/summary.json; findings: {args.out}/findings.jsonl")
    new = [f for f in record["findings"] if not f.get("known")]
    if new:
        return 1
    if record["findings"]:
        print(f"all {len(record['findings'])} findings are known upstream issues (harness/known_issues.toml)")
    if record["summary"].get("status") == "incomplete":
        return _error(f"incomplete: {record['notes'][-1]} (exit 3)", 3)
    if camp["executed"] == 0:
        return _error("tested nothing: no case ran (exit 3)", 3)
    return 0
