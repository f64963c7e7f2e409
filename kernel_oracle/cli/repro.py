"""``kernel-oracle repro``: re-run one saved finding (or a case given as JSON) against a target
(:mod:`kernel_oracle.jobs.repro`, Note [Case files hold no code]); ``--emit-script DIR`` also writes
a standalone reproduction (:mod:`kernel_oracle.jobs.repro_script`).

Exit codes (docs/semantics.md#exit-codes): 1 the finding reproduces, 0 the target now passes, 2 usage or I/O error
(one line, no traceback), 3 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernel_oracle.cli import options
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)
    parser.add_argument("path", nargs="?", help="a saved case, DIR/cases/<id>.pt (or its .json)")
    parser.add_argument("--case-json", default=None, help="the case as JSON ({'problem': ..., 'mutation': ...})")
    options.add(parser, "targets", required=True, metavar="SPEC",
                help="the target to run it on (one spec); " + options.OPTIONS["targets"][1]["help"])
    options.add(parser, "device")
    options.add(parser, "sglang_wheel")
    parser.add_argument("--emit-script", metavar="DIR", default=None,
                        help="also write a standalone Python script, its JSON data and a weights-only tensor file "
                             "to DIR that reproduce the finding with torch and the target alone (existing files "
                             "and symlinks there are refused)")
    parser.add_argument("--force", action="store_true",
                        help="with --emit-script: replace files (or symlinks) of the same names in DIR")


def _usage(text: str) -> int:
    print(f"kernel-oracle repro: error: {text}", file=sys.stderr)
    return run_outcome(usage_error=True).exit_code


def _run(args: argparse.Namespace):
    """``(reproduction, written script paths or None)``; :class:`ReproError` for bad input."""
    from kernel_oracle.jobs.repro import ReproError, reproduce

    if len(args.targets) != 1:
        raise ReproError(f"--targets names {len(args.targets)} targets; a case is re-run on one")
    target = args.targets[0]
    rep = reproduce(target=target, path=args.path, case_json=args.case_json, device=args.device,
                    sglang_wheel=args.sglang_wheel, script=args.emit_script is not None)
    if args.emit_script is None:
        return rep, None
    from kernel_oracle.jobs.repro_script import ScriptError, emit_script

    name = Path(args.path).stem if args.path else "case"
    try:
        return rep, emit_script(args.emit_script, name=name, case=rep.case, call=rep.call, expected=rep.expected,
                                target=rep.target, target_spec=str(target), verdict=rep.verdict, force=args.force,
                                sglang_wheel=args.sglang_wheel)
    except ScriptError as exc:
        raise ReproError(str(exc)) from None


def main(args: argparse.Namespace) -> int:
    if args.path is None and args.case_json is None:
        return _usage("pass DIR/cases/<id>.pt or --case-json JSON")
    if args.path is not None and args.case_json is not None:
        return _usage("pass a case file or --case-json JSON, not both")
    if args.force and args.emit_script is None:
        return _usage("--force only applies with --emit-script DIR")
    from kernel_oracle.jobs.repro import ReproError

    try:
        rep, written = _run(args)
    except ReproError as exc:
        return _usage(str(exc))
    except KeyboardInterrupt:
        print("kernel-oracle repro: interrupted; no verdict", file=sys.stderr)
        return run_outcome(interrupted=True).exit_code
    verdict, target = rep.verdict, str(args.targets[0])
    print(f"case: {rep.case!r}")
    print(f"expected: {verdict.expected}")
    if written is not None:
        script = Path(written[0]).resolve()  # run as printed, from any folder
        print(f"standalone script: {written[0]} (tensors: {written[1]}); run: python {script}")
    if verdict.ok:
        print(f"PASS on {target}" + (f" (error ratio {verdict.ratio:.3g})" if verdict.ratio is not None else ""))
    else:
        print(f"REPRODUCED [{verdict.kind}] on {target}:\n{verdict.message}")
    return run_outcome(new_findings=0 if verdict.ok else 1).exit_code
