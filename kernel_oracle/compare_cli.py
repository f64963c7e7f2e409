"""``kernel-oracle compare BASELINE CURRENT``: exit 1 on a regression, 0 otherwise, 2 on usage errors.

See Note [Regressions] in :mod:`reports.compare` for what counts.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernel_oracle.reports.compare import DEFAULT_MAX_RATIO_GROWTH, DEFAULT_MAX_SLOWDOWN, DEFAULT_RATIO_FLOOR, Thresholds, compare_results
from kernel_oracle.harness.schema import SchemaError

__all__ = ["add_arguments", "main", "parse_fraction"]


def parse_fraction(text: str) -> float:
    """``0.1``, ``10%`` -> 0.1 (argparse type of --max-slowdown)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction like 0.1 or a percentage like 10%, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative slowdown, got {text!r}")
    return value


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor like 2.0, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a factor >= 1 (2.0 allows the ratio to double), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE", help="result record of the reference run (e.g. main's)")
    parser.add_argument("current", metavar="CURRENT", help="result record of the run under test")
    parser.add_argument("--max-ratio-growth", type=_factor, default=DEFAULT_MAX_RATIO_GROWTH, metavar="FACTOR",
                        help=f"a group's max error ratio may grow this many times (default {DEFAULT_MAX_RATIO_GROWTH:g})")
    parser.add_argument("--ratio-floor", type=float, default=DEFAULT_RATIO_FLOOR, metavar="RATIO",
                        help=f"ignore ratio growth that stays below this ratio (default {DEFAULT_RATIO_FLOOR:g})")
    parser.add_argument("--max-slowdown", type=parse_fraction, default=DEFAULT_MAX_SLOWDOWN, metavar="FRACTION",
                        help=f"allowed growth of a benchmark's median time, 0.1 or 10%% "
                             f"(default {DEFAULT_MAX_SLOWDOWN:g})")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the comparison as JSON ('-': stdout)")


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.reports.model import load_result

    try:
        baseline = load_result(args.baseline)
        current = load_result(args.current)
        thresholds = Thresholds(args.max_ratio_growth, args.ratio_floor, args.max_slowdown)
    except (SchemaError, ValueError) as exc:
        print(f"kernel-oracle compare: {exc}", file=sys.stderr)
        return 2
    result = compare_results(baseline, current, thresholds)
    if args.json == "-":
        print(json.dumps(result.to_dict(), indent=1, default=str))
    else:
        sys.stdout.write(result.format_text(thresholds))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result.to_dict(), fh, indent=1, default=str)
    return 1 if result.regressed else 0
