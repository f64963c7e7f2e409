"""``kernel-oracle report RESULT.json|DIR [--out DIR]``: render a result file to Markdown and HTML.

A directory stands for the record in it: a campaign's ``summary.json`` (the pages are then
``report.md`` / ``report.html`` beside it, what ``fuzz`` writes) or the main job's ``latest.json``.

Exit codes (docs/semantics.md#exit-codes): 0 written; 2 usage or I/O error -- an unreadable or invalid record, an
``--out`` that cannot be created or written, a ``--name`` that is not a plain file name -- with
one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import sys

from kernel_oracle.cli import options
from kernel_oracle.harness.outcome import run_outcome
from kernel_oracle.harness.schema import SchemaError

__all__ = ["add_arguments", "main", "report_beside"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.one_line_errors(parser)
    parser.add_argument("result", metavar="RESULT.json|DIR", help="a result record (campaign, pytest, bench or main run), "
                        "or a directory holding one (a campaign's summary.json, the main job's latest.json)")
    options.add(parser, "out", help="directory for <name>.md and <name>.html (default: beside RESULT.json)")
    parser.add_argument("--name", default=None, help="base name of the written files (default: RESULT's stem)")
    parser.add_argument("--no-plots", action="store_true", help="skip the plots (tables only; faster)")


def main(args: argparse.Namespace) -> int:
    from kernel_oracle.jobs.reports import write_reports

    try:
        result, name = _record_of(args.result, args.name)
        md, html = write_reports(result, args.out, name=name, with_plots=not args.no_plots)
    except (SchemaError, ValueError) as exc:
        print(f"kernel-oracle report: error: {_one_line(exc)}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    except OSError as exc:
        where = exc.filename or args.out or args.result
        print(f"kernel-oracle report: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return run_outcome(usage_error=True).exit_code
    print(f"Markdown: {md}")
    print(f"HTML:     {html}")
    return run_outcome().exit_code


def _record_of(result: str, name):
    """``(record path, page name)`` of ``result`` (:func:`kernel_oracle.reports.model.record_path`)."""
    from kernel_oracle.reports.model import record_path

    path, page = record_path(result)
    return str(path), name or page


def report_beside(summary_path) -> str:
    """Write ``report.md`` and ``report.html`` beside a campaign's ``summary.json`` (what
    ``kernel-oracle report SUMMARY --name report`` writes); the one line that names them, or says why
    they could not be written (the campaign's own exit code does not depend on its report)."""
    from pathlib import Path

    from kernel_oracle.jobs.reports import write_reports

    try:
        md, html = write_reports(summary_path, Path(summary_path).parent, name="report")
    except (SchemaError, ValueError, OSError) as exc:
        return f"report: not written ({_one_line(exc)}); kernel-oracle report {summary_path} writes it"
    return f"report: {html} (Markdown: {md})"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
