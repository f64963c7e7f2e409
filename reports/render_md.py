"""Render a :class:`reports.model.Result` as Markdown (tables; the plots live in the HTML page)."""

from __future__ import annotations

from kernel_oracle.reports._format import environment
from kernel_oracle.reports.model import Result
from kernel_oracle.reports.templates import MARKDOWN

__all__ = ["render_markdown", "template_context"]


def template_context(result: Result) -> dict:
    """What the Markdown and HTML templates render: the result and its tables, sorted for reading."""
    benches = sorted(result.benchmarks, key=lambda b: (b.op, b.shape, b.dtype, b.target))
    return {
        "r": result,
        "env": result.environment,
        "by_op": result.by_target_op(),
        "groups": sorted(result.groups, key=lambda g: (g.op, g.target, g.dtype, g.shape_class)),
        "benches": benches,
        "peers": sorted({p for b in benches for p in b.peers}),
    }


def render_markdown(result: Result) -> str:
    return environment(markdown=True).from_string(MARKDOWN).render(**template_context(result))
