"""A report reads well wherever it is opened (Note [Portable pages] in reports/portable.py): it names no
folder of the machine that made it, and its examples are distinct lines in words."""

from __future__ import annotations

import json
import os

from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.device import cache_root
from kernel_oracle.harness.known_issues import known_issues_path
from kernel_oracle.harness.schema import add_finding, new_record, save


def _problem(seg_lens, op="step_b_q") -> dict:
    return {"problem": {"family": "lora", "op": op, "seg_lens": list(seg_lens), "weight_indices": [0] * len(seg_lens),
                        "lora_ranks": [16], "scalings": [1.0], "R": 16, "H": 1, "dtype": "float32"}, "mutation": None}


def _record(folder) -> dict:
    rec = new_record("campaign", seeds={"seed": 0}, device="cpu")
    rec["summary"]["known_issues_file"] = str(known_issues_path())
    case = folder / "cases" / "F0001-mismatch-step_b_q.pt"
    wheel = os.path.join(cache_root(), "wheels", "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl")
    add_finding(rec, {"id": "F0001-mismatch-step_b_q", "target": "sglang==0.5.12", "op": "step_b_q",
                      "dtype": "float32", "shape_class": "decode", "kind": "mismatch", "count": 4,
                      "message": f"Tensor-likes are not close!\nloaded from {wheel}", "figures": {},
                      "repro": f"kernel-oracle repro {case} --targets sglang==0.5.12", "problem": _problem([1]),
                      "examples": [{"op": "step_b_q", "dtype": "float32", "shape_class": "prefill",
                                    "problem": _problem([3, 2])}] * 3
                      + [{"op": "step_a_q", "dtype": "float32", "shape_class": "prefill",
                          "problem": _problem([5], "step_a_q")}],
                      "bucket": {"kind": "mismatch", "family": "lora", "cause": "values", "op": "step_b_q"}})
    rec["validation_gaps"] = [{"op": "step_a_q", "malformation": "permutation_duplicate", "consequence": "harmless",
                               "dtypes": ["float16"], "count": 3,
                               "example": "kernel-oracle repro --case-json '" + json.dumps(_problem([7] * 9)) + "'"}]
    return rec


def test_a_page_names_no_folder_of_the_machine_that_made_it(tmp_path):
    out = tmp_path / "runs" / "mine"
    save(_record(out), out / "summary.json")
    assert cli_main(["report", str(out)]) == 0
    for page in ("report.html", "report.md"):
        text = (out / page).read_text()
        for folder in (str(tmp_path), str(known_issues_path().parent.parent), cache_root(), os.path.expanduser("~")):
            assert folder not in text, (page, folder)
        assert "kernel-oracle repro cases/F0001-mismatch-step_b_q.pt --targets sglang==0.5.12" in text, page
        assert "$KERNEL_ORACLE_CACHE/wheels/sglang-0.5.12" in text, page
    assert "<code>harness/known_issues.toml</code>" in (out / "report.html").read_text()


def test_more_examples_are_distinct_lines_in_words(tmp_path):
    save(_record(tmp_path), tmp_path / "summary.json")
    assert cli_main(["report", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    more = md[md.index("More examples of this bucket:"):].split("\n\n")[1].splitlines()
    assert more == ["- `step_b_q float32: 2 segments of [3, 2] rows, slots [0, 0], ranks [16] (R=16), scalings [1.0], "
                    "H=1`", "- `step_a_q float32: 1 segment of [5] rows, slots [0], ranks [16] (R=16), scalings [1.0], "
                    "H=1`"], more


def test_the_gap_tables_repro_column_cannot_squeeze_the_others(tmp_path):
    """The JSON of a validation gap's repro is folded in its cell of a table of fixed column widths (at 1280
    px its unbroken JSON set the widths and left the first columns 1-3 letters a line)."""
    save(_record(tmp_path), tmp_path / "summary.json")
    assert cli_main(["report", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    gaps = html[html.index('<section id="validation-gaps">'):]
    table = gaps[gaps.index("<table"):gaps.index("</table>")]
    assert table.startswith('<table class="fixed">') and "<colgroup>" in table
    assert "<details><summary>repro command</summary><code>kernel-oracle repro --case-json" in table
