"""``kernel-oracle compare BASELINE CURRENT`` (each a result record, or a directory holding one, as
``report`` takes it): exit 1 on a regression, 0 otherwise, 2 on usage or I/O
errors (one line on stderr, nothing on stdout; NaN and infinite thresholds are usage errors).

See Note [Regressions] in :mod:`reports.compare` for what counts.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernel_oracle.cli import options
from kernel_oracle.harness.outcome import run_outcome
from kernel_oracle.cli.options import finite_float
from kernel_oracle.harness.schema import SchemaError
from kernel_oracle.reports.compare import (DEFAULT_MAX_RATIO_GROWTH, DEFAULT_MAX_SLOWDOWN, DEFAULT_RATIO_FLOOR,
                                           Thresholds, compare_results)

__all__ = ["add_arguments", "main", "parse_fraction"]


def parse_fraction(text: str) -> float:
    """``0.1``, ``10%`` -> 0.1 (argparse type of --max-slowdown); finite and non-negative."""
    t = text.strip()
    what = "a fraction like 0.1 or a percentage like 10%"
    value = finite_float(t[:-1], what) / 100 if t.endswith("%") else finite_float(t, what)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative slowdown, got {text!r}")
    return value


def _factor(text: str) -> float:
    value = finite_float(text, "a factor like 2.0")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a factor >= 1 (2.0 allows the ratio to double), got {text!r}")
    return value


def _ratio(text: str) -> float:
    value = finite_float(text, "an error ratio like 0.5")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative error ratio, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)
    parser.add_argument("baseline", metavar="BASELINE", help="result record of the reference run (e.g. main's), or "
                        "a directory holding one (a campaign's summary.json, the main job's latest.json)")
    parser.add_argument("current", metavar="CURRENT", help="result record of the run under test, or its directory")
    parser.add_argument("--max-ratio-growth", type=_factor, default=DEFAULT_MAX_RATIO_GROWTH, metavar="FACTOR",
                        help=f"a group's max error ratio may grow this many times (default {DEFAULT_MAX_RATIO_GROWTH:g})")
    parser.add_argument("--ratio-floor", type=_ratio, default=DEFAULT_RATIO_FLOOR, metavar="RATIO",
                        help=f"ignore ratio growth that stays below this ratio (default {DEFAULT_RATIO_FLOOR:g})")
    parser.add_argument("--max-slowdown", type=parse_fraction, default=DEFAULT_MAX_SLOWDOWN, metavar="FRACTION",
                        help=f"allowed growth of a benchmark's median time, 0.1 or 10%% "
                             f"(default {DEFAULT_MAX_SLOWDOWN:g})")
    options.add(parser, "json", help="also write the comparison as JSON ('-': stdout)")


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.reports.model import load_result

    try:
        baseline = load_result(args.baseline)
        current = load_result(args.current)
        thresholds = Thresholds(args.max_ratio_growth, args.ratio_floor, args.max_slowdown)
    except (SchemaError, ValueError, OSError) as exc:
        print(f"kernel-oracle compare: error: {_one_line(exc)}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    result = compare_results(baseline, current, thresholds)
    as_json = json.dumps(result.to_dict(), indent=1, default=str)
    if args.json_out and args.json_out != "-":
        # written before anything is printed: an unwritable path is a usage error (exit 2), never an
        # "OK" on stdout followed by a failure
        try:
            with open(args.json_out, "w", encoding="utf-8") as fh:
                fh.write(as_json)
        except OSError as exc:
            print(f"kernel-oracle compare: error: cannot write --json {args.json_out}: {exc.strerror or exc}",
                  file=sys.stderr)
            return run_outcome(usage_error=True).exit_code
    if args.json_out == "-":
        print(as_json)
    else:
        sys.stdout.write(result.format_text(thresholds))
    return run_outcome(new_findings=len(result.new_findings), known_findings=len(result.new_known),
                       regressions=len(result.ratio_growth) + len(result.slowdowns)).exit_code


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
