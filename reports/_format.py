"""Number formatting and the jinja2 environment shared by the Markdown and HTML renderers.

Note [Escaping Markdown]
------------------------
Records carry text from targets and users (finding messages, target names, notes), and a report
must show it, never interpret it.  The HTML page relies on jinja2's autoescaping.  Markdown
renderers pass raw HTML through, and a text's own backticks can close the code span or fence
around it, so the Markdown environment escapes by default too: every ``{{ value }}`` that is not
already marked safe goes through :func:`md_text` (``& < >`` as HTML entities; GitHub and
CommonMark render them as the characters).  The filters that build Markdown syntax return it
marked safe, each doing its own escaping:

* ``cell``: text for a table cell (entities, ``|`` escaped, newlines as spaces);
* ``code``: an inline code span whose backtick run is longer than any run in the text (code spans
  show entities literally, so the text is not entity-escaped there; ``|`` is escaped in cells);
* ``fence``: a fenced block whose fence is longer than any backtick run in the text;
* ``link``: ``[text](<url>)`` with the text escaped as a cell (the url is a checked https link).

Before any of that, in both renderers, every text is cut past 64 kB and has its control characters
escaped (:func:`kernel_oracle.harness.text.safe_text`, Note [Target text]): an ANSI sequence, BEL
or a bidirectional override in a message shows as ``\x1b`` / ``\u202e`` instead of acting on the
terminal or the page, whichever tool the record was written by.
"""

from __future__ import annotations

import math
import re
from typing import Optional

import jinja2
from markupsafe import Markup

from kernel_oracle.harness.schema import FINDING_KINDS
from kernel_oracle.harness.tile_coverage import CLASSES
from kernel_oracle.harness.text import safe_text

__all__ = ["environment", "fmt_num", "fmt_pct", "fmt_ratio", "fmt_us", "md_cell", "md_code", "md_fence", "md_link",
           "md_text", "ratio_class"]


def fmt_ratio(v: Optional[float]) -> str:
    if v is None:
        return "–"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "0"
    return f"{v:.3g}" if v >= 1e-3 else f"{v:.1e}"


def ratio_class(v: Optional[float]) -> str:
    """CSS class of an error-ratio cell: bad above the tolerance, warn above half of it."""
    if v is None:
        return "na"
    if math.isnan(v) or v > 1:
        return "bad"
    if v > 0.5:
        return "warn"
    return "ok"


def fmt_num(v: Optional[float], digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return f"{v:.{digits}g}"


def fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "–"
    return f"{v:,.1f}" if v >= 10 else f"{v:.3g}"


# what the tile coverage table shows (Note [Tile coverage] in harness.tile_coverage), above it in both formats
COVERAGE_TEXT = ("Share of the cases per op and tiled dimension, at the block sizes the code under test uses for "
                 "each case: one block; several blocks; several and a ragged last one; a reduction split across "
                 "programs into several non-empty parts (– where the code never splits it).")


def fmt_pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def fmt_speedup(v: Optional[float]) -> str:
    return "–" if v is None else f"{v:.2f}×"


_BACKTICKS = re.compile(r"`+")


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in _BACKTICKS.findall(text)), default=0)


def md_text(v: object) -> str:
    """Text for Markdown prose: raw HTML shown, not interpreted (Note [Escaping Markdown])."""
    if isinstance(v, Markup):
        return v
    return Markup(safe_text(str(v)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def md_cell(v: object) -> str:
    """A value made safe for one Markdown table cell: entities, ``|`` escaped, one line."""
    text = " ".join(safe_text(str(v)).splitlines())
    return Markup(md_text(text).replace("|", "\\|"))


def md_code(v: object, *, in_table: bool = False) -> str:
    """An inline code span holding ``v`` verbatim: delimited by more backticks than any run in it."""
    text = " ".join(safe_text(str(v)).splitlines())
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def md_fence(v: object, info: str = "text") -> str:
    """A fenced code block holding ``v`` verbatim: the fence is longer than any backtick run in it."""
    text = safe_text(str(v))
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return Markup(f"{fence}{info}\n{text}\n{fence}")


def md_link(text: object, url: Optional[str]) -> str:
    """``[text](url)`` with the text escaped as a table cell; just the text when there is no ``url``.
    The url must already be a plain https link (:attr:`reports.model.Finding.upstream` checks it)."""
    label = md_cell(text)
    if not url:
        return label
    return Markup(f"[{label}](<{url}>)")


FOLD_ROWS = 10
"""Tables and lists longer than this are collapsed (``<details>``) in both pages."""


def clip(v: object, n: int = 120) -> str:
    """``v`` cut to ``n`` characters with an ellipsis: long module paths and messages in Markdown
    table cells, whose full text the finding's own section shows."""
    text = " ".join(str(v).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _finalize_markdown(value: object) -> object:
    """Every ``{{ }}`` of the Markdown template: numbers as they are, text escaped unless marked safe."""
    if value is None or isinstance(value, (int, float, Markup)):
        return value
    return md_text(value)


def _finalize_html(value: object) -> object:
    """Every ``{{ }}`` of the HTML template: text bounded and its control characters escaped before
    autoescaping (Note [Escaping Markdown]); markup the template built, numbers and None as they are."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return safe_text(value)
    return value


def environment(*, markdown: bool) -> jinja2.Environment:
    env = jinja2.Environment(autoescape=not markdown, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             finalize=_finalize_markdown if markdown else _finalize_html)
    env.filters.update(ratio=fmt_ratio, ratio_class=ratio_class, num=fmt_num, us=fmt_us, pct=fmt_pct,
                       speedup=fmt_speedup, cell=md_cell, code=md_code, fence=md_fence, md=md_text,
                       link=md_link)
    env.filters["clip"] = clip
    env.globals.update(FINDING_KINDS=FINDING_KINDS, FOLD_ROWS=FOLD_ROWS, COVERAGE_CLASSES=CLASSES,
                       COVERAGE_TEXT=COVERAGE_TEXT)
    return env
