"""Render a :class:`reports.model.Result` as one self-contained HTML page.

The page loads nothing: the CSS is inline, the plots are inline SVG (:mod:`reports.plots`), and
every finding is an ``<article>`` with an anchor (:attr:`reports.model.Finding.anchor`) holding its
message and its repro command in a ``<pre><code>`` block, linked from the findings table.
"""

from __future__ import annotations

from kernel_oracle.reports import plots
from kernel_oracle.reports._format import environment
from kernel_oracle.reports.model import Result
from kernel_oracle.reports.render_md import template_context
from kernel_oracle.reports.templates import CSS, HTML

__all__ = ["render_html"]


def render_html(result: Result, *, with_plots: bool = True) -> str:
    ctx = template_context(result)
    figures = {"ratios": None, "bench": None, "roofline": None}
    if with_plots:
        figures = {"ratios": plots.ratio_distribution_svg(result), "bench": plots.bench_speed_svg(result),
                   "roofline": plots.roofline_svg(result)}
    ctx.update(css=CSS, plots=figures, plots_unavailable=plots.UNAVAILABLE if with_plots else None)
    return environment(markdown=False).from_string(HTML).render(**ctx)
