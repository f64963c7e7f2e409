"""``kernel-oracle mutants``: does the suite kill every planted kernel bug?

Prints the kill table (mutant, family, killed, examples until the kill, seconds, finding kind) and
optionally writes it as JSON.  Exit codes (docs/semantics.md#exit-codes): 0 every mutant killed, 1 a mutant survived (or
could not be built: its anchor no longer occurs in the kernels -- update it), 2 usage or I/O error
(an unknown mutant, ``--cases`` below 1, ``--device cuda`` without a GPU, a ``--json`` path
that cannot be written; one line, no traceback), 3 interrupted (Ctrl-C: the table so far is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kernel_oracle.cli import options
from kernel_oracle.harness.family import default_family_names
from kernel_oracle.harness.outcome import run_outcome

__all__ = ["add_arguments", "kill_table", "main"]

def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)
    parser.add_argument("names", nargs="*", metavar="MUTANT", help="mutants to check (default: all)")
    options.add(parser, "op", default=",".join(default_family_names()),
                help=f"comma-separated op families of the mutants to check: {options.op_families_text()} "
                     f"(default {','.join(default_family_names())})")
    options.add(parser, "cases", default=100, help="cases per mutant before it counts as surviving (default 100)")
    options.add(parser, "device")
    options.add(parser, "json", help="write the table as JSON")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")


def kill_table(results) -> str:
    rows = [("mutant", "family", "killed", "examples", "seconds", "kind")]
    for r in results:
        rows.append((r.name, r.family, "yes" if r.killed else ("ERROR" if r.error else "NO"), str(r.examples),
                     f"{r.seconds:.1f}", r.kind or (r.error or "-")[:60]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _json_path_error(path: str) -> str | None:
    """Why ``path`` cannot take the JSON table (checked before the slow run), or None."""
    p = Path(path)
    if p.is_dir():
        return f"--json {path} is a directory; pass a file path"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"--json {path}: directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"--json {path}: not writable"
    return None


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.fuzz.targets.mutants import MUTANTS, MutantError, get_mutant  # the table: no torch

    def usage(msg: str) -> int:
        print(f"kernel-oracle mutants: error: {msg}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code

    if args.list:
        for m in MUTANTS:
            print(f"{m.name:34} {m.family:7} {m.description}")
        return run_outcome().exit_code
    try:  # every argument is checked before the device (torch) is looked at
        families = options.families(args.op)
        names = [get_mutant(n).name for n in args.names] or [m.name for m in MUTANTS if m.family in families]
    except (ValueError, MutantError) as exc:
        return usage(str(exc))
    if not names:
        return usage("no mutant selected; `kernel-oracle mutants --list` shows them")
    why = _json_path_error(args.json_out) if args.json_out else None
    if why:
        return usage(why)
    from kernel_oracle.harness.device import configure_process, resolve_device

    try:
        device = resolve_device(args.device)
        configure_process(device)  # before any kernel import
    except (ValueError, RuntimeError) as exc:
        return usage(str(exc))
    from kernel_oracle.fuzz.mutant_check import check_mutant

    results = []
    interrupted = False
    try:
        for name in names:
            r = check_mutant(name, max_examples=args.cases, device=device)
            results.append(r)
            print(f"{name}: {'killed after ' + str(r.examples) + ' examples (' + str(r.kind) + ')' if r.killed else 'SURVIVED' if not r.error else 'ERROR ' + r.error}",
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
    if results:
        print(kill_table(results))
    if args.json_out:
        try:
            with open(args.json_out, "w", encoding="utf-8") as fh:
                json.dump([r.to_dict() for r in results], fh, indent=1)
        except OSError as exc:
            return usage(f"cannot write --json {args.json_out}: {exc.strerror or exc}")
    if interrupted:
        print(f"kernel-oracle mutants: interrupted after {len(results)} of {len(names)} mutants", file=sys.stderr)
    # a surviving mutant (or one that could not run) is a finding of the suite
    return run_outcome(new_findings=sum(not r.killed for r in results), interrupted=interrupted,
                       tested=bool(results)).exit_code
