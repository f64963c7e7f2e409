"""``kernel-oracle``: parse and dispatch (pytest-benchmark's cli.py shape).

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``main(args) -> int``;
this file only builds the parser and dispatches.  Exit codes (SPEC.md, every subcommand): 0 clean (no
new findings; known upstream issues do not count), 1 new findings or regressions, 2 usage or I/O
error (one line), 3 interrupted or incomplete (a part could not run, nothing was tested).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from kernel_oracle._version import __version__
from kernel_oracle.cli_errors import one_line_errors

# name -> (module, one-line help); modules are imported when the parser is built, so they must
# import lightly (no Triton at module level)
SUBCOMMANDS = {
    "run": ("kernel_oracle.main_job", "the main job: differential suite + fuzz campaign + report"),
    "selfcheck": ("kernel_oracle.selfcheck", "differential run of the references against independent formulations"),
    "fuzz": ("kernel_oracle.fuzz_cli", "run a fuzzing campaign against a target"),
    "mutants": ("kernel_oracle.mutants_cli", "check that the suite kills planted kernel bugs"),
    "repro": ("kernel_oracle.repro_cli", "re-run one saved finding"),
    "report": ("kernel_oracle.report_cli", "render a result file to Markdown and HTML"),
    "compare": ("kernel_oracle.compare_cli", "compare two result files; non-zero exit on a regression"),
    "bench": ("kernel_oracle.bench_cli", "measure the oracle itself: campaign cases/s, the main job's fuzz cases"),
    "matrix": ("kernel_oracle.matrix_cli", "several releases side by side: each finding bucket per release"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernel-oracle", description=__doc__.splitlines()[0])
    one_line_errors(parser)  # e.g. unrecognized arguments: one line, exit 2
    parser.add_argument("--version", action="version", version=f"kernel-oracle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # not built yet in this checkout
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args._main(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
