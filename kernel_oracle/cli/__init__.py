"""``kernel-oracle``: parse and dispatch (pytest-benchmark's cli.py shape).

Each subcommand is one module of this package exposing ``add_arguments(parser)`` and
``main(args) -> int``; it parses and prints, and the work itself lives in :mod:`kernel_oracle.jobs`,
:mod:`kernel_oracle.fuzz` or :mod:`kernel_oracle.reports`.  Shared options are defined once in
:mod:`.options` (Note [Options]).  Exit codes (docs/semantics.md#exit-codes, every subcommand): 0 clean (no new
findings; known upstream issues do not count), 1 new findings or regressions, 2 usage or I/O error
(one line), 3 interrupted or incomplete (a part could not run, nothing was tested); every
subcommand decides it with :func:`kernel_oracle.harness.outcome.run_outcome`.

SIGTERM at any moment exits 3 with one line: :func:`main` installs its handler before it imports a
subcommand (a campaign installs its own while it runs, Note [Stopping a campaign]), so a signal
during the first imports is an interrupt, not a death by signal.  The handler also notes the signal,
because its raise may land inside a library's import that swallows it: a campaign takes the note
over and stops before its first case, and a command that returns, or fails on the half-imported
module, with the note still there exits 3 with the same line.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from typing import Optional, Sequence

from kernel_oracle._version import __version__
from kernel_oracle.cli.options import one_line_errors
from kernel_oracle.fuzz.stopping import note_signal, take_signal
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["SUBCOMMANDS", "Terminated", "build_parser", "main"]

# name -> one-line help; the module is kernel_oracle.cli.<name>, imported when the parser is built, so
# it must import lightly (no Triton at module level)
SUBCOMMANDS = {
    "run": "the main job: differential suite + fuzz campaign + report",
    "selfcheck": "differential run of the references against independent formulations",
    "fuzz": "run a fuzzing campaign against a target",
    "mutants": "check that the suite kills planted kernel bugs",
    "repro": "re-run one saved finding",
    "report": "render a result file to Markdown and HTML",
    "compare": "compare two result files; non-zero exit on a regression",
    "bench": "measure the oracle itself: campaign cases/s, the main job's fuzz cases",
    "matrix": "several releases side by side: each finding bucket per release",
}


def build_parser() -> argparse.ArgumentParser:
    # no abbreviations: a prefix (--target for --targets) would be a second spelling (Note [Options])
    parser = argparse.ArgumentParser(prog="kernel-oracle", description="differential testing of SGLang's kv_b LoRA "
                                     "and vision-attention kernels against float64 oracles", allow_abbrev=False)
    one_line_errors(parser)  # e.g. unrecognized arguments: one line, exit 2
    parser.add_argument("--version", action="version", version=f"kernel-oracle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        module = importlib.import_module(f"{__name__}.{name}")
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command outside a campaign's own handler."""


def _terminate(signum, frame) -> None:
    name = signal.Signals(signum).name
    note_signal(name)  # kept where the raise below is swallowed (Note [Stopping a campaign])
    raise Terminated(name)


def _interrupted(command: str, name: str) -> int:
    print(f"{command}: interrupted by {name} before any result was saved (exit 3)", file=sys.stderr)
    return run_outcome(interrupted=True).exit_code


def main(argv: Optional[Sequence[str]] = None) -> int:
    in_main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _terminate) if in_main else None
    command = "kernel-oracle"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = f"kernel-oracle {args.command}" if getattr(args, "command", None) else command
        if not getattr(args, "_main", None):
            parser.print_help(sys.stderr)
            code = run_outcome(usage_error=True).exit_code
        elif take_signal() is not None:  # a raise swallowed by an import above: nothing runs
            raise Terminated("SIGTERM")
        else:
            code = int(args._main(args) or 0)
    except KeyboardInterrupt as exc:  # a signal no subcommand handled: nothing was saved
        take_signal()
        return _interrupted(command, str(exc) if isinstance(exc, Terminated) else "SIGINT")
    except Exception:  # a failure that follows a swallowed SIGTERM (a half-imported module) is the interrupt
        name = take_signal()
        if name is None:
            raise
        return _interrupted(command, name)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, old)
    name = take_signal()  # noted, its raise swallowed, and no campaign took it over
    return code if name is None else _interrupted(command, name)


if __name__ == "__main__":
    raise SystemExit(main())
