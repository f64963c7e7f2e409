"""``kernel-oracle selfcheck``: the references against independent formulations, and every contract
(:mod:`kernel_oracle.jobs.selfcheck`, Note [Selfcheck]).

Exit codes (docs/semantics.md#exit-codes): 0 every check passed, 1 a check failed, 2 usage error (one line), 3
interrupted or nothing checked.
"""

from __future__ import annotations

import argparse
import sys

from kernel_oracle.cli import options
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)
    options.add(parser, "device", help="where the references run (auto: cuda when available)")
    options.add(parser, "cases", type=options.non_negative_int, default=2,
                help="random variations per (op, dtype) on top of the sample inputs (default 2; 0: the samples only)")
    options.add(parser, "seed", help="seed of the random variations")


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.jobs.selfcheck import run_selfcheck, summarize

    try:
        rows = run_selfcheck(args.device, args.cases, args.seed)
    except ValueError as exc:
        print(f"kernel-oracle selfcheck: error: {exc}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    except KeyboardInterrupt:
        print("kernel-oracle selfcheck: interrupted; no verdict", file=sys.stderr)
        return run_outcome(interrupted=True).exit_code
    outcome = run_outcome(new_findings=sum(not r["passed"] for r in rows), tested=bool(rows))
    if outcome.verdict == "empty":
        print("kernel-oracle selfcheck: nothing was checked", file=sys.stderr)
    else:
        print(summarize(rows))
    return outcome.exit_code
