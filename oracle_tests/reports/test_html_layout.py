"""The HTML page as Chromium lays it out: the answer comes first (the headline list above the
by-target table above the error-ratio plot above the finding cards), nothing is wider than its
column, even with a 300-character module path in a bucket and a 2 kB message, and no column is
squeezed to a few letters a line by an unbroken JSON repro.

The test appends a script to a copy of the page; headless Chromium (``--dump-dom``) runs it after
layout and the script writes what it measured into the DOM as JSON, which the test reads back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

import pytest

from kernel_oracle.harness.schema import add_finding, add_group
from kernel_oracle.reports.model import Result
from kernel_oracle.reports.render_html import render_html
from oracle_tests._sample_record import sample_record
from oracle_tests.conftest import REQUIRED
from oracle_tests.reports.test_html_page import CHROMIUM

LONG_FRAME = "/opt/venv/lib/python3.11/site-packages/" + "deeply_nested_package_name/" * 10 + "module.py:123 in f"
LONG_MESSAGE = "RuntimeError: " + "x" * 900 + " " + "shape_mismatch_without_spaces_" * 40

MEASURE = """<script>
(function () {
  function top(sel) { var e = document.querySelector(sel); return e ? e.getBoundingClientRect().top + window.scrollY : null; }
  var wide = [];
  var main = document.querySelector('main').getBoundingClientRect();
  document.querySelectorAll('td, th, pre, table, article, li, p, div.meta').forEach(function (e) {
    var b = e.getBoundingClientRect();
    if (e.offsetParent === null && e.tagName !== 'TABLE') return;  /* folded away: not laid out */
    if (b.width === 0) return;
    if (e.scrollWidth > e.clientWidth + 1 || b.right > main.right + 1)
      wide.push(e.tagName + '#' + (e.closest('section') || {}).id + ': ' + e.scrollWidth + ' > ' + e.clientWidth
                + ' (right ' + Math.round(b.right) + ' of ' + Math.round(main.right) + ')');
  });
  var out = document.createElement('pre');
  out.id = 'layout-result';
  out.textContent = JSON.stringify({
    headlines: top('#headlines ol'), by_op: top('#by-op table'), plot: top('#ratios svg'),
    cards: top('article.finding'), page_width: document.documentElement.scrollWidth,
    window_width: window.innerWidth, wide: wide});
  document.body.appendChild(out);
})();
</script>"""


# every table cell a few letters wide, with every fold and every cell's details opened (the repro JSON of a
# validation gap once set the column widths and left the first columns 1-3 letters a line)
MEASURE_NARROW = """<script>
(function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var narrow = [];
  document.querySelectorAll('td, th').forEach(function (e) {
    var b = e.getBoundingClientRect();
    if (e.offsetParent === null || b.width === 0) return;
    if (e.textContent.trim().length > 3 && b.width < 44)
      narrow.push(e.tagName + '#' + (e.closest('section') || {}).id + ': ' + Math.round(b.width) + 'px: '
                  + e.textContent.trim().slice(0, 40));
  });
  var out = document.createElement('pre');
  out.id = 'layout-result';
  out.textContent = JSON.stringify({narrow: narrow});
  document.body.appendChild(out);
})();
</script>"""

GAP_EXAMPLE = "kernel-oracle repro --case-json '" + json.dumps(
    {"problem": {"family": "lora", "op": "step_a_q", "seg_lens": list(range(1, 60)), "weight_indices": [0] * 59},
     "mutation": {"family": "lora", "kind": "permutation_duplicate", "index": 3, "amount": 1}},
    separators=(",", ":")) + "' --targets sglang==0.5.12"


def _planted_record() -> dict:
    rec = sample_record()
    rec["validation_gaps"] = [{"op": "step_a_q", "malformation": "permutation_duplicate", "consequence": "harmless",
                               "dtypes": ["float16", "float32"], "count": 3, "example": GAP_EXAMPLE}]
    add_group(rec, target="triton", op="step_b_q", dtype="bfloat16", shape_class="ragged", cases=4, passes=3,
              findings={"crash": 1}, ratios=[0.2, 0.3, 0.1])
    add_finding(rec, {"id": "triton-step_b_q-0003", "target": "triton", "op": "step_b_q", "dtype": "bfloat16",
                      "shape_class": "ragged", "kind": "crash", "message": LONG_MESSAGE, "figures": {},
                      "repro": "kernel-oracle repro --finding triton-step_b_q-0003",
                      "bucket": {"kind": "crash", "family": "step_b_q", "cause": "RuntimeError: x",
                                 "frame": LONG_FRAME, "config": []}})
    assert len(LONG_FRAME) >= 300 and len(LONG_MESSAGE) >= 2000
    return rec


def _layout(html: str, tmp_path, measure: str = MEASURE) -> dict:
    if CHROMIUM is None:
        if "chromium" in REQUIRED:  # .ci/run installs it: absent is a failure
            pytest.fail("KERNEL_ORACLE_REQUIRE names chromium but no chromium on PATH (apt-get install -y chromium)")
        pytest.skip("Chromium is not installed (apt-get install -y chromium) to lay out the page")
    page = tmp_path / "measured.html"
    page.write_text(html.replace("</body>", measure + "\n</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--window-size=1280,2000", "--dump-dom", page.as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env={**os.environ, "HOME": profile})
    m = re.search(r'<pre id="layout-result">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"the measuring script wrote nothing: {proc.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&gt;", ">").replace("&lt;", "<")
                      .replace("&amp;", "&"))


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict:
    return _layout(render_html(Result.from_dict(_planted_record())), tmp_path_factory.mktemp("layout"))


def test_the_answer_comes_first(layout):
    order = [layout[k] for k in ("headlines", "by_op", "plot", "cards")]
    assert None not in order, f"a section is missing: {layout}"
    assert order == sorted(order), f"headlines, by-target table, plot, cards are out of order: {order}"


def test_a_built_headline_quotes_a_bounded_message():
    (f,) = [f for f in Result.from_dict(_planted_record()).findings if f.op == "step_b_q"]
    assert f.headline.startswith("step_b_q (triton, bfloat16): crash, 1 failing case: RuntimeError: xxx")
    assert f.headline.endswith("…") and len(f.headline) < 250


def test_nothing_overflows_its_column(layout):
    assert not layout["wide"], "wider than their column:\n" + "\n".join(layout["wide"][:20])
    assert layout["page_width"] <= layout["window_width"], "the page scrolls sideways"


def test_no_column_is_squeezed_at_1280_px(tmp_path):
    """Every fold and every cell's details open, a validation gap's unbroken repro JSON included."""
    measured = _layout(render_html(Result.from_dict(_planted_record())), tmp_path, MEASURE_NARROW)
    assert not measured["narrow"], "squeezed cells:\n" + "\n".join(measured["narrow"][:20])


def test_fuzz_writes_the_report_beside_its_summary(tmp_path, capsys):
    from kernel_oracle.cli import main as cli_main

    out = tmp_path / "camp"
    cli_main(["fuzz", "--targets", "reference", "--op", "step_a_q", "--cases", "2", "--seed", "1",
              "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert (out / "report.html").is_file() and (out / "report.md").is_file(), printed
    assert f"report: {out / 'report.html'} (Markdown: {out / 'report.md'})" in printed.splitlines()
    assert 'id="headlines"' in (out / "report.html").read_text()


def test_an_unwritable_report_is_one_line_not_a_failure(tmp_path):
    from kernel_oracle.cli.report import report_beside

    line = report_beside(tmp_path / "absent" / "summary.json")
    assert line.startswith("report: not written (") and "\n" not in line
    assert f"kernel-oracle report {tmp_path / 'absent' / 'summary.json'} writes it" in line
