"""A result record rendered to Markdown and self-contained HTML beside it (``kernel-oracle report``,
and the main job's ``latest.{md,html}``)."""

from __future__ import annotations

import errno
from pathlib import Path

from kernel_oracle.harness.data_files import write_text
from kernel_oracle.harness.schema import SchemaError

__all__ = ["write_reports"]


def write_reports(result_path: str | Path, out_dir: str | Path | None = None, *, name: str | None = None,
                  with_plots: bool = True) -> tuple[Path, Path]:
    """Render ``result_path`` to ``<out_dir>/<name>.md`` and ``.html``; returns both paths.

    Raises :class:`SchemaError` for a bad record, ``ValueError`` for a ``name`` with a path in it,
    ``OSError`` when the files cannot be written.
    """
    from kernel_oracle.reports.model import load_result
    from kernel_oracle.reports.portable import portable_result

    if name is not None and (not name or Path(name).name != name or name in (".", "..")):
        raise ValueError(f"--name={name!r} is not a plain file name; pass a name without '/' and use --out "
                         "for the directory")
    result_path = Path(result_path)
    try:
        result = portable_result(load_result(result_path))  # Note [Portable pages]
    except UnicodeDecodeError:
        raise SchemaError(f"{result_path}: not a text file; pass a JSON result record") from None
    out = Path(out_dir) if out_dir is not None else result_path.parent
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a directory (pass --out DIR)", str(out))
    out.mkdir(parents=True, exist_ok=True)
    # the renderers (matplotlib) load once the record and the names are known good: a bad one is refused at once
    from kernel_oracle.reports.render_html import render_html
    from kernel_oracle.reports.render_md import render_markdown

    stem = name or result_path.stem
    md, html = out / f"{stem}.md", out / f"{stem}.html"
    write_text(md, render_markdown(result))  # never through a symlink: Note [Files as data]
    write_text(html, render_html(result, with_plots=with_plots))
    return md, html
