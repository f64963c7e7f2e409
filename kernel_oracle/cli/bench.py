"""``kernel-oracle bench``: how fast the oracle itself is (:mod:`kernel_oracle.jobs.bench`, Note
[Benchmarking the oracle]).

Exit 0 when everything ran, 1 when a campaign or the main job failed, 2 on usage errors (one line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernel_oracle.cli import options
from kernel_oracle.harness.family import default_family_names
from kernel_oracle.fuzz.time_budget import DEFAULT_TIME_S
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "main"]

DEFAULT_TARGETS = "triton,reference"
RECORD_NAME = "oracle-bench.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)  # a usage error: one line, exit 2 (docs/semantics.md#exit-codes)
    options.add(parser, "device")
    options.add(parser, "targets", help=f"target specs to measure (default {DEFAULT_TARGETS}); "
                                        + options.OPTIONS["targets"][1]["help"])
    options.add(parser, "op", default=",".join(default_family_names()),
                help=f"comma-separated op families: {options.op_families_text()} (default "
                     f"{','.join(default_family_names())})")
    options.add(parser, "time", help=f"timed seconds of each target x family campaign (default "
                                     f"{DEFAULT_TIME_S['bench']:g})")
    options.add(parser, "limits", default="tiny",
                help="size preset of the timed campaigns (fuzz.strategies.LIMITS; default tiny: small shapes)")
    options.add(parser, "cases", type=options.non_negative_int, default=10,
                help="cases of the untimed warm-up campaign per target x family before its timed one (default 10; "
                     "0: none)")
    options.add(parser, "warm_up",
                help="seconds the worker may spend on its untimed warm-up per target before the first campaign "
                     "(harness.warmup: our LoRA kernels' variants compiled in parallel on CUDA); default 300 on "
                     "CUDA, none on the CPU; 0: none")
    parser.add_argument("--main-time", dest="main_time_s", type=options.non_negative_seconds,
                        default=DEFAULT_TIME_S["bench_main_job"], metavar="S",
                        help=f"--time of the measured main job (default {DEFAULT_TIME_S['bench_main_job']:g}; 0: do "
                             "not run it)")
    options.add(parser, "seed")
    options.add(parser, "out", default="reports/out",
                help=f"the directory the record goes to, as {RECORD_NAME} (default reports/out)")
    options.add(parser, "quiet", help="no progress lines")


def _usage(text: str) -> int:
    print(f"kernel-oracle bench: error: {text}", file=sys.stderr)
    return run_outcome(usage_error=True).exit_code


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.harness.device import resolve_device
    from kernel_oracle.harness.schema import save
    from kernel_oracle.harness.targets import parse_target_list
    from kernel_oracle.jobs.bench import DEFAULT_WARM_UP_S, run_bench

    try:
        targets = args.targets or parse_target_list(DEFAULT_TARGETS)
        families = options.families(args.op)
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ValueError(f"--out {args.out}: is a file; pass a directory")
        device = resolve_device(args.device)  # the arguments first: looking for a GPU imports torch
        warm_up_s = args.warm_up_s if args.warm_up_s is not None else DEFAULT_WARM_UP_S if device == "cuda" else 0.0
        out = Path(args.out) / RECORD_NAME
    except ValueError as exc:
        return _usage(str(exc))
    record = run_bench(device=device, targets=targets, families=families, time_s=args.time_s, limits=args.limits,
                       warmup_cases=args.cases, main_time_s=args.main_time_s, seed=args.seed, quiet=args.quiet,
                       warm_up_s=warm_up_s)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save(record, out, overwrite=True)
    except OSError as exc:
        return _usage(f"--out {out}: cannot write there ({exc.strerror or exc})")
    bench = record["summary"]["oracle_bench"]
    for row in bench["campaigns"]:
        print(f"{row['target']} x {row['family']}: {row['cases_per_s']} cases/s ({row['cases']} cases, "
              f"{row['seconds']}s, limits {row['limits']})")
    if bench["main_job"]:
        mj = bench["main_job"]
        print(f"main job ({mj['command']}): {mj.get('fuzz_cases')} fuzz cases, {mj.get('cases')} cases, "
              f"exit {mj['exit_code']}")
    print(f"record: {out}")
    # a campaign or the main job that failed under measurement is a finding of the bench
    return run_outcome(new_findings=len(bench["failed"])).exit_code
