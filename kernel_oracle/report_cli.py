"""``kernel-oracle report RESULT.json [--out DIR]``: render a result file to Markdown and HTML.

Exit codes (SPEC.md): 0 written; 2 usage or I/O error -- an unreadable or invalid record, an
``--out`` that cannot be created or written, a ``--name`` that is not a plain file name -- with
one line on stderr and no traceback.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from kernel_oracle.harness.schema import SchemaError
from kernel_oracle.cli_errors import one_line_errors

__all__ = ["add_arguments", "main", "write_reports"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("result", metavar="RESULT.json", help="a result record (campaign, pytest, bench or main run)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="directory for <name>.md and <name>.html (default: beside RESULT.json)")
    parser.add_argument("--name", default=None, help="base name of the written files (default: RESULT's stem)")
    parser.add_argument("--no-plots", action="store_true", help="skip the plots (tables only; faster)")


def write_reports(result_path: str | Path, out_dir: str | Path | None = None, *, name: str | None = None,
                  with_plots: bool = True) -> tuple[Path, Path]:
    """Render ``result_path`` to ``<out_dir>/<name>.md`` and ``.html``; returns both paths.

    Raises :class:`SchemaError` for a bad record, ``ValueError`` for a ``name`` with a path in it,
    ``OSError`` when the files cannot be written.
    """
    from kernel_oracle.reports.model import load_result
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    if name is not None and (not name or Path(name).name != name or name in (".", "..")):
        raise ValueError(f"--name={name!r} is not a plain file name; pass a name without '/' and use --out "
                         "for the directory")
    result_path = Path(result_path)
    try:
        result = load_result(result_path)
    except UnicodeDecodeError:
        raise SchemaError(f"{result_path}: not a text file; pass a JSON result record") from None
    out = Path(out_dir) if out_dir is not None else result_path.parent
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a directory (pass --out DIR)", str(out))
    out.mkdir(parents=True, exist_ok=True)
    stem = name or result_path.stem
    md, html = out / f"{stem}.md", out / f"{stem}.html"
    md.write_text(render_markdown(result), encoding="utf-8")
    html.write_text(render_html(result, with_plots=with_plots), encoding="utf-8")
    return md, html


def main(args: argparse.Namespace) -> int:
    try:
        md, html = write_reports(args.result, args.out, name=args.name, with_plots=not args.no_plots)
    except (SchemaError, ValueError) as exc:
        print(f"kernel-oracle report: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = exc.filename or args.out or args.result
        print(f"kernel-oracle report: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"Markdown: {md}")
    print(f"HTML:     {html}")
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
