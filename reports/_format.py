"""Number formatting and the jinja2 environment shared by the Markdown and HTML renderers."""

from __future__ import annotations

import math
from typing import Optional

import jinja2

from kernel_oracle.harness.schema import FINDING_KINDS

__all__ = ["environment", "fmt_num", "fmt_pct", "fmt_ratio", "fmt_us", "ratio_class"]


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


def fmt_pct(v: Optional[float]) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def fmt_speedup(v: Optional[float]) -> str:
    return "–" if v is None else f"{v:.2f}×"


def md_cell(v: object) -> str:
    """A value made safe for one Markdown table cell."""
    return str(v).replace("|", "\\|").replace("\n", " ")


def environment(*, markdown: bool) -> jinja2.Environment:
    env = jinja2.Environment(autoescape=not markdown, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(ratio=fmt_ratio, ratio_class=ratio_class, num=fmt_num, us=fmt_us, pct=fmt_pct,
                       speedup=fmt_speedup, cell=md_cell)
    env.globals["FINDING_KINDS"] = FINDING_KINDS
    return env
