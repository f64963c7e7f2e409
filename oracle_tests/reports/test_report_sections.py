"""What the pages say in each section: headlines (given or built), folded long tables, the targets
table's strict mode and missing entry points, and validation gaps as information, not findings."""

from __future__ import annotations

import re

from kernel_oracle.harness.schema import add_finding, add_group
from kernel_oracle.reports.model import Result
from kernel_oracle.reports.render_html import render_html
from kernel_oracle.reports.render_md import render_markdown
from oracle_tests._html import HtmlPage
from oracle_tests._sample_record import sample_record

GAP = {"op": "step_a_q", "malformation": "seg_indptr not increasing", "consequence": "reads past the segment",
       "dtypes": ["bfloat16", "float16"], "count": 4, "example": "seg_indptr=[0, 3, 2]", "rows": []}


def _record(groups: int = 0) -> dict:
    rec = sample_record()
    for i in range(groups):
        add_group(rec, target="triton", op="step_b_q", dtype="bfloat16", shape_class=f"class{i:02d}", cases=2,
                  passes=2, ratios=[0.1])
    add_finding(rec, {"id": "triton-step_b_q-0009", "target": "triton", "op": "step_b_q", "dtypes": ["bfloat16", "float16"],
                      "shape_class": "ragged", "kind": "mismatch", "count": 7, "figures": {}, "repro": "r",
                      "message": "\n  Tensor-likes are not close!\nmore", "headline": None})
    rec["findings"][0]["headline"] = "step_b_v float16 decode: wrong values in the last tile  (3 cases)"
    rec["targets"][1].update({"strict": False, "missing": {"step_b_q_fwd": "not exported by this release"}})
    return rec


def test_headlines_lead_given_or_built():
    result = Result.from_dict(_record())
    html, md = render_html(result), render_markdown(result)
    given = "step_b_v float16 decode: wrong values in the last tile (3 cases)"
    built = "step_b_q (triton, bfloat16, float16): mismatch, 7 failing cases: Tensor-likes are not close!"
    for text, by_op, cards in ((html, "<h2>By target and op</h2>", '<article class="finding"'),
                               (md, "## By target and op", '<a id="finding-')):
        assert given in text and built in text
        assert text.index(given) < text.index(built) < text.index(by_op) < text.index(cards)


def test_long_tables_fold_and_short_ones_stay_open():
    short = render_html(Result.from_dict(_record()))
    assert '<details class="fold" open><summary>9 groups</summary>' in short
    long_ = Result.from_dict(_record(groups=6))
    html, md = render_html(long_), render_markdown(long_)
    assert '<details class="fold"><summary>15 groups: show them</summary>' in html
    assert re.search(r"<details><summary>15 groups</summary>\n\n+\| target \| op \| dtype \|", md)
    table = re.search(r"15 groups</summary>\n+((?:\|[^\n]*\n)+)\n+</details>", md)
    assert table and table.group(1).count("\n") == 2 + 15  # header, rule, every group inside the fold
    p = HtmlPage()
    p.feed(html)
    p.close()
    assert not p.open


def test_targets_show_strict_mode_and_missing_entry_points():
    result = Result.from_dict(_record())
    html, md = render_html(result), render_markdown(result)
    assert "<th>strict</th><th>precision</th><th>entry points</th><th>missing entry points</th>" in html
    assert '<td>no (lenient)</td>' in html and '<td class="warn">step_b_q_fwd: not exported by this release</td>' in html
    assert "| triton | yes | no (lenient) | fp32 (interpreter: exact) | - | step_b_q_fwd: not exported by this release |" in md


def test_validation_gaps_are_information_after_the_findings():
    rec = _record()
    assert "Validation gaps" not in render_html(Result.from_dict(rec))
    rec["validation_gaps"] = [GAP]
    result = Result.from_dict(rec)
    html, md = render_html(result), render_markdown(result)
    for text, findings, gaps in ((html, '<section id="findings">', "<h2>Validation gaps (1)</h2>"),
                                 (md, "## Findings", "## Validation gaps (1)")):
        assert text.index(findings) < text.index(gaps) < text.index("Groups: target")
        assert "not findings" in text and "seg_indptr not increasing" in text and "bfloat16, float16" in text
    assert len(result.findings) == 3  # a gap is not a finding
