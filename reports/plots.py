"""Plots of a result record as inline SVG strings (matplotlib, Agg/SVG backends, no pyplot state).

Note [Inline plots]
-------------------
The HTML page must be readable offline, so every plot is an ``<svg>`` element written into the page
(text kept as text: ``svg.fonttype = none``, which keeps the page small and searchable).  Each
function returns ``None`` when the record has nothing to plot, and the page then says so rather than
showing an empty frame.  When matplotlib is missing, :data:`UNAVAILABLE` says why and the page keeps
its tables.
"""

from __future__ import annotations

import io
import math
import re
from typing import Optional

from kernel_oracle.reports.model import Result

__all__ = ["UNAVAILABLE", "bench_speed_svg", "ratio_distribution_svg", "roofline_svg"]

try:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    UNAVAILABLE: Optional[str] = None
except Exception as exc:  # the page keeps its tables; it says why the plots are missing
    Figure = None  # type: ignore[assignment]
    UNAVAILABLE = f"plots unavailable: matplotlib could not be imported ({type(exc).__name__}: {exc}); pip install matplotlib"

# boxplot's orientation keyword replaced vert= in matplotlib 3.10
_HORIZONTAL = ({"orientation": "horizontal"} if Figure is not None and
               tuple(int(x) for x in matplotlib.__version__.split(".")[:2]) >= (3, 10) else {"vert": False})
_RC = {"svg.fonttype": "none", "svg.hashsalt": "kernel-oracle", "font.size": 9,
       "axes.spines.top": False, "axes.spines.right": False}
RATIO_FLOOR = 1e-12  # positive ratios below this are drawn at it; exact zeros are counted, not drawn
_COLORS = ["#2563eb", "#f59e0b", "#10b981", "#8b5cf6", "#ef4444", "#64748b", "#0ea5e9", "#d946ef"]


def _to_svg(fig, plot_id: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # responsive: drop the fixed size, keep the viewBox; ids made unique per plot
    svg = re.sub(r'(<svg[^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r"\1", svg, count=1)
    svg = svg.replace("<svg", f'<svg class="plot" role="img" aria-label="{plot_id}"', 1)
    ids = set(re.findall(r'id="([^"]+)"', svg))
    for old in sorted(ids, key=len, reverse=True):
        new = f"{plot_id}-{old}"
        svg = svg.replace(f'id="{old}"', f'id="{new}"').replace(f"#{old})", f"#{new})").replace(
            f'href="#{old}"', f'href="#{new}"')
    return svg


def ratio_distribution_svg(result: Result) -> Optional[str]:
    """Error ratio (err / allowed, log axis) per op x target: a box over the cases plus the points;
    the red line at 1 is the tolerance."""
    if Figure is None:
        return None
    rows: dict = {}
    for g in result.groups:
        vals = g.ratios or [v for v in (g.ratio_max, g.ratio_median) if v is not None]
        if vals:
            rows.setdefault((g.op, g.target), []).extend(vals)
    if not rows:
        return None
    keys = sorted(rows)
    import matplotlib as mpl

    with mpl.rc_context(_RC):
        fig = Figure(figsize=(8.5, 0.9 + 0.45 * len(keys)))
        ax = fig.add_subplot()
        # exact zeros (float64 rows, bit-exact kernels) have no place on a log axis: counted in the label
        data, labels = [], []
        positive = [v for vals in rows.values() for v in vals if v > 0 and math.isfinite(v)]
        floor = max(RATIO_FLOOR, min(positive, default=1.0))
        for op, target in keys:
            vals = [v if math.isfinite(v) else 1e3 for v in rows[(op, target)]]
            nonzero = [max(v, floor) for v in vals if v > 0]
            zeros = len(vals) - len(nonzero)
            data.append(nonzero or [float("nan")])
            labels.append(f"{op} · {target}\n" + f"{len(vals)} ratios" + (f", {zeros} exact" if zeros else ""))
        ax.boxplot([d if d[0] == d[0] else [] for d in data], **_HORIZONTAL, widths=0.55, showfliers=False,
                   patch_artist=True, boxprops={"facecolor": "#dbeafe", "edgecolor": "#1e40af"},
                   medianprops={"color": "#1e40af"}, whiskerprops={"color": "#1e40af"},
                   capprops={"color": "#1e40af"})
        for i, vals in enumerate(data, start=1):
            vals = [v for v in vals if v == v]
            ys = [i + 0.28 * ((j * 0.6180339887) % 1.0 - 0.5) for j in range(len(vals))]
            colors = ["#dc2626" if v > 1 else "#334155" for v in vals]
            ax.scatter(vals, ys, s=7, c=colors, alpha=0.55, linewidths=0, zorder=3)
        ax.axvline(1.0, color="#dc2626", lw=1.2, ls="--", zorder=4)
        ax.text(1.0, 0.45, " tolerance", color="#dc2626", va="center", ha="left", fontsize=8)
        ax.set_xscale("log")
        ax.set_yticks(range(1, len(keys) + 1), labels)
        ax.set_ylim(0.2, len(keys) + 0.6)
        ax.invert_yaxis()
        ax.set_xlabel("error ratio = err / allowed  (log; > 1 fails)")
        ax.grid(axis="x", color="#e2e8f0", lw=0.6)
        ax.set_axisbelow(True)
        return _to_svg(fig, "plot-ratios")


def bench_speed_svg(result: Result) -> Optional[str]:
    """Each peer's median time relative to the target's (target = 1; a longer bar is a slower
    peer), on a linear axis, with the absolute times written beside the bars."""
    if Figure is None or not result.benchmarks:
        return None
    benches = sorted(result.benchmarks, key=lambda b: (b.op, b.shape, b.dtype, b.target))
    peers = sorted({p for b in benches for p in b.peers if (b.peers[p] or {}).get("median_us")})
    series = ["(target)"] + peers
    import matplotlib as mpl

    with mpl.rc_context(_RC):
        height = 1.1 + len(benches) * (0.2 * len(series) + 0.3)
        fig = Figure(figsize=(8.5, height))
        ax = fig.add_subplot()
        bar_h = 0.8 / len(series)
        top = 1.0
        for s_i, name in enumerate(series):
            xs, ys, labels = [], [], []
            for b_i, b in enumerate(benches):
                t = b.median_us if name == "(target)" else (b.peers.get(name) or {}).get("median_us")
                if t:
                    xs.append(float(t) / b.median_us)
                    ys.append(b_i - 0.4 + bar_h * (s_i + 0.5))
                    labels.append(f"{float(t):.3g} µs")
            label = "target (ours)" if name == "(target)" else name
            ax.barh(ys, xs, height=bar_h * 0.92, color=_COLORS[s_i % len(_COLORS)], label=label)
            for x, y, text in zip(xs, ys, labels):
                ax.text(x, y, f" {x:.2f}× ({text})", va="center", fontsize=7.5)
            top = max([top, *xs])
        ax.axvline(1.0, color="#0f172a", lw=0.8, ls=":")
        ax.set_xlim(0, top * 1.35)
        ax.set_yticks(range(len(benches)), [f"{b.target} · {b.op}\n{b.shape} {b.dtype}" for b in benches])
        ax.invert_yaxis()
        ax.set_xlabel("median time relative to the target (1 = target; above 1 the peer is slower)")
        ax.grid(axis="x", color="#e2e8f0", lw=0.6)
        ax.set_axisbelow(True)
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=min(4, len(series)), fontsize=8, frameon=False)
        return _to_svg(fig, "plot-bench")


def roofline_svg(result: Result) -> Optional[str]:
    """Achieved fraction of the roofline per benchmark (bars), and the classic roofline (achieved
    TFLOP/s against arithmetic intensity) when flops and bytes are known."""
    if Figure is None:
        return None
    frac = [b for b in result.benchmarks if b.roofline_fraction is not None]
    roof = [b for b in result.benchmarks if b.flops and b.bytes and b.tflops]
    if not frac and not roof:
        return None
    import matplotlib as mpl

    with mpl.rc_context(_RC):
        ncols = (1 if frac else 0) + (1 if roof else 0)
        n = max(len(frac), 3)
        fig = Figure(figsize=(8.5 if ncols == 1 else 11, 1.2 + 0.35 * n))
        axes = fig.subplots(1, ncols, squeeze=False)[0]
        col = 0
        if frac:
            ax = axes[col]
            col += 1
            vals = [100 * b.roofline_fraction for b in frac]
            colors = ["#10b981" if v >= 50 else "#f59e0b" if v >= 20 else "#ef4444" for v in vals]
            ax.barh(range(len(frac)), vals, color=colors)
            for i, v in enumerate(vals):
                ax.text(v + 1, i, f"{v:.0f}%", va="center", fontsize=8)
            ax.set_yticks(range(len(frac)), [f"{b.target} · {b.op}\n{b.shape} {b.dtype}" for b in frac])
            ax.invert_yaxis()
            ax.set_xlim(0, max(110, max(vals) + 15))
            ax.axvline(100, color="#64748b", ls="--", lw=1)
            ax.set_xlabel("% of roofline (binding roof: bandwidth or compute)")
        if roof:
            ax = axes[col]
            ai = [b.flops / b.bytes for b in roof]
            for i, b in enumerate(roof):
                ax.scatter([ai[i]], [b.tflops], color=_COLORS[i % len(_COLORS)], zorder=3,
                           label=f"{b.target} · {b.op} {b.shape}")
            bw = next((b.ceiling_tbps for b in roof if b.ceiling_tbps), None)
            peak = next((b.ceiling_tflops for b in roof if b.ceiling_tflops), None)
            lo, hi = min(ai) / 4, max(ai) * 4
            if bw or peak:
                xs = [lo * (hi / lo) ** (k / 60) for k in range(61)]
                ys = [min(v for v in ((bw or math.inf) * x, peak or math.inf)) for x in xs]
                ax.plot(xs, ys, color="#64748b", lw=1.2, label="roofline")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("arithmetic intensity, FLOP/byte")
            ax.set_ylabel("TFLOP/s")
            ax.grid(color="#e2e8f0", lw=0.6)
            ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
        return _to_svg(fig, "plot-roofline")
