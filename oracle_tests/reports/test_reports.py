"""The result schema (round trip, version check, clear errors), merging, bench ingest and the
pytest plugin's ``--oracle-record``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from oracle_tests._sample_record import sample_record
from kernel_oracle.reports.bench_ingest import record_from_bench_rows, write_bench_record
from kernel_oracle.reports.model import load_result, shape_key
from kernel_oracle.harness import schema
from kernel_oracle.harness.schema import (SCHEMA_VERSION, SchemaError, add_finding, add_group, load, merge, new_record, save,
                            validate)

ENV_KEYS = ("torch", "triton", "cuda", "cudnn", "gpu", "cpu", "git_commit", "suite_version", "device")


def test_round_trip(tmp_path):
    rec = sample_record()
    path = save(rec, tmp_path / "r.json")
    assert load(path) == json.loads(json.dumps(rec))
    result = load_result(path)
    assert result.version == SCHEMA_VERSION and result.kind == "main"
    assert {f.id for f in result.findings} == {f["id"] for f in rec["findings"]}
    assert result.cases == sum(g["cases"] for g in rec["groups"])
    for key in ENV_KEYS:
        assert key in rec["environment"], key


def test_group_summary_and_merge_of_same_key():
    rec = new_record("campaign")
    add_group(rec, target="t", op="o", dtype="float32", shape_class="s", cases=2, passes=2, ratios=[0.1, 0.3])
    add_group(rec, target="t", op="o", dtype="float32", shape_class="s", cases=3, passes=2,
              findings={"mismatch": 1}, ratios=[0.2, 4.0, 0.05])
    (g,) = rec["groups"]
    assert (g["cases"], g["passes"], g["findings"]["mismatch"]) == (5, 4, 1)
    assert g["error_ratio"]["max"] == 4.0 and g["error_ratio"]["median"] == 0.2


def test_newer_version_is_refused_with_the_fix(tmp_path):
    rec = sample_record()
    rec["version"] = SCHEMA_VERSION + 1
    path = tmp_path / "new.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(SchemaError, match="newer than this suite reads.*upgrade kernel-oracle"):
        load(path)


@pytest.mark.parametrize("breakage, match", [
    (lambda r: r.update(schema="something-else"), "schema="),
    (lambda r: r.pop("groups"), "field 'groups' must be a list"),
    (lambda r: r.update(version="1"), "is not an int"),
    (lambda r: r["groups"][0].pop("cases"), r"groups\[0\] lacks fields \['cases'\]"),
    (lambda r: r["findings"][0].update(kind="wrong"), r"findings\[0\] has kind 'wrong'; the only valid values"),
    (lambda r: r["benchmarks"][0].pop("median_us"), r"benchmarks\[0\] lacks fields"),
], ids=["schema", "no-groups", "version-str", "group-field", "finding-kind", "bench-field"])
def test_malformed_record_is_refused(breakage, match):
    rec = sample_record()
    breakage(rec)
    with pytest.raises(SchemaError, match=match):
        validate(rec)


def test_not_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load(bad)
    with pytest.raises(SchemaError, match="no such result file"):
        load(tmp_path / "absent.json")


def test_save_never_overwrites(tmp_path):
    path = save(sample_record(), tmp_path / "r.json")
    with pytest.raises(FileExistsError, match="never overwritten"):
        save(sample_record(), path)
    save(sample_record(), path, overwrite=True)


def test_merge_keeps_ids_unique_and_adds_groups():
    into, other = sample_record(), sample_record()
    n_groups, n_findings = len(into["groups"]), len(into["findings"])
    cases = sum(g["cases"] for g in into["groups"])
    merge(into, other, seeds_key="campaign:x")
    assert len(into["groups"]) == n_groups
    assert sum(g["cases"] for g in into["groups"]) == 2 * cases
    ids = [f["id"] for f in into["findings"]]
    assert len(ids) == 2 * n_findings and len(set(ids)) == len(ids)
    assert into["seeds"]["campaign:x"] == other["seeds"]
    assert len({t["name"] for t in into["targets"]}) == len(into["targets"])


def test_add_finding_checks_fields():
    with pytest.raises(SchemaError, match="lacks fields"):
        add_finding(new_record("main"), {"id": "x", "kind": "mismatch"})


def test_bench_ingest_derives_throughput_and_peers(tmp_path):
    rows = [{"target": "triton", "op": "step_a_q", "shape": {"S": 8, "H": 2}, "dtype": "bfloat16", "median_us": 10.0,
             "bytes": 1e6, "flops": 1e9, "ceiling_tbps": 1.0, "peers": {"sglang": 20.0, "torch": {"median_us": 5.0}}}]
    rec = record_from_bench_rows(rows)
    assert rec["kind"] == "bench"
    (b,) = rec["benchmarks"]
    assert b["tbps"] == pytest.approx(0.1) and b["tflops"] == pytest.approx(100.0)
    assert b["peers"] == {"sglang": {"median_us": 20.0}, "torch": {"median_us": 5.0}}
    path = write_bench_record(rows, tmp_path)
    (bench,) = load_result(path).benchmarks
    assert bench.shape == shape_key({"H": 2, "S": 8}) and bench.roofline_fraction == pytest.approx(0.1)
    assert bench.speedup_over("sglang") == pytest.approx(2.0) and bench.speedup_over("torch") == pytest.approx(0.5)


@pytest.mark.parametrize("row, match", [
    ({"target": "t", "op": "o", "shape": "s", "dtype": "float32"}, r"missing \['median_us'\]"),
    ({"target": "t", "op": "o", "shape": "s", "dtype": "float32", "median_us": "fast"}, "Expected a number for median_us"),
    ({"target": "t", "op": "o", "shape": "s", "dtype": "float32", "median_us": 0}, "median_us=0"),
])
def test_bench_ingest_names_the_bad_row(row, match):
    with pytest.raises(SchemaError, match=match):
        record_from_bench_rows([row])


PYTEST_DEMO = '''
import pytest, torch

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["step_a_q", "vision"])
def test_diff(op, dtype, record_property):
    record_property("target", "triton")
    record_property("error_ratio", 0.5 if dtype == torch.float32 else 2.0)
    assert dtype == torch.float32 or op == "vision", "Tensor-likes are not close!"

def test_plain():
    pass

def test_crashes():
    raise RuntimeError("CUDA error: an illegal memory access")

def test_contract_missing_max_len():
    assert False, "expected ValueError"

@pytest.mark.skip(reason="needs a GPU")
def test_skipped():
    pass
'''


def test_pytest_plugin_writes_a_record(tmp_path):
    (tmp_path / "test_demo.py").write_text(textwrap.dedent(PYTEST_DEMO))
    out = tmp_path / "rec.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "kernel_oracle.pytest.record", "-p", "no:cacheprovider",
           "--oracle-record", str(out), "test_demo.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"kernel-oracle result record: {out}" in proc.stdout
    rec = load(out)
    assert rec["kind"] == "pytest"
    assert rec["summary"]["passed"] == 4 and rec["summary"]["failed"] == 3 and rec["summary"]["skipped"] == 1
    groups = {(g["target"], g["op"], g["dtype"]): g for g in rec["groups"]}
    g = groups[("triton", "step_a_q", "bfloat16")]
    assert (g["cases"], g["passes"], g["findings"]["mismatch"], g["error_ratio"]["max"]) == (1, 0, 1, 2.0)
    assert groups[("triton", "vision", "float32")]["passes"] == 1
    suite = groups[("suite", "suite", "-")]  # tests that say nothing
    assert (suite["cases"], suite["passes"]) == (3, 1)
    kinds = {f["nodeid"].split("::")[1]: f["kind"] for f in rec["findings"]}
    assert kinds == {"test_diff[step_a_q-dtype1]": "mismatch", "test_crashes": "crash",
                     "test_contract_missing_max_len": "contract"}
    for f in rec["findings"]:
        assert f["repro"].startswith("python -m pytest ") and f["nodeid"].split("::")[1].split("[")[0] in f["repro"]
    # results are never overwritten: a second run to the same path is a usage error
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 4 and "never overwritten" in again.stderr


# ---- Markdown escaping (Note [Escaping Markdown] in reports/_format.py) ---------------------------------

@pytest.mark.parametrize("text", ["plain", "one ` tick", "a ``` fence", "````` five", "`lead", "trail`", "", "|pipe|"])
def test_markdown_code_and_fences_hold_any_backtick_run(text):
    import re

    from kernel_oracle.reports._format import md_code, md_fence

    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    block = str(md_fence(text, "text"))
    fence = "`" * max(3, longest + 1)
    assert block == f"{fence}text\n{text}\n{fence}"
    span = str(md_code(text))
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    assert span == f"{ticks}{pad}{text}{pad}{ticks}"


def test_markdown_text_and_cells_escape_html_pipes_and_newlines():
    from kernel_oracle.reports._format import md_cell, md_code, md_text

    assert str(md_text("a <b> & c")) == "a &lt;b&gt; &amp; c"
    assert str(md_cell("x | <y>\nz")) == "x \\| &lt;y&gt; z"
    assert str(md_code("a|b", in_table=True)) == "`a\\|b`"


# ---- buckets: one row per root cause with its count and examples --------------------------------------

def _bucketed_record():
    rec = sample_record()
    f = rec["findings"][0]
    f.update(count=7, examples=[{"op": "step_b_v", "dtype": "bfloat16", "shape_class": "prefill", "problem": {}},
                                {"op": "step_b_v", "dtype": "float16", "shape_class": "<b>edge|case</b>"},
                                {"op": "step_a_q", "dtype": "float16", "shape_class": "decode"},
                                {"op": "never", "dtype": "shown", "shape_class": "fourth"}])
    return rec


def test_markdown_has_one_row_per_bucket_with_count_repro_and_three_examples():
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_md import render_markdown

    rec = _bucketed_record()
    result = Result.from_dict(rec)
    f, g = result.findings
    md = render_markdown(result)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "(#finding-" in line and "`" in line]
    assert len(rows) == 2  # one per bucket
    label = f.bucket.label.replace("|", "\\|")
    assert rows[0] == (f"| {label} | [{f.id}](#{f.anchor}) | 7 | `{f.repro}` | `step_b_v bfloat16 prefill`<br>"
                       "`step_b_v float16 <b>edge\\|case</b>`<br>`step_a_q float16 decode` |")
    assert rows[1].startswith(f"| {g.bucket.label.replace('|', chr(92) + '|')} | [{g.id}](#{g.anchor}) | 1 | ")
    assert rows[1].endswith(" | – |") and "never shown" not in md
    assert "- `step_b_v float16 <b>edge|case</b>`" in md  # in a code span: shown verbatim, not as HTML


def test_html_has_one_row_per_bucket_escaped():
    from kernel_oracle.reports.model import Result
    from kernel_oracle.reports.render_html import render_html

    from oracle_tests._html import HtmlPage

    rec = _bucketed_record()
    rec["findings"][1].update(known="some-issue", upstream="https://example.org/i/1")
    result = Result.from_dict(rec)
    html = render_html(result, with_plots=False)
    page = HtmlPage()
    page.feed(html)
    page.close()
    assert not page.open, f"unclosed tags: {page.open}"
    assert '<a href="https://example.org/i/1">some-issue</a>' in html
    assert '<h3 id="buckets">Buckets</h3>' in html
    f = result.findings[0]
    assert f'<td class="id"><a href="#{f.anchor}">{f.id}</a></td><td class="n">7</td>' in html
    assert "<code>step_b_v float16 &lt;b&gt;edge|case&lt;/b&gt;</code>" in html and "<b>edge" not in html
    assert "never shown" not in html


def test_a_commit_file_names_a_copy_whose_git_is_not_its_own(monkeypatch, tmp_path):
    """GPU snapshots (scripts/gpu_snapshot.sh) are copies beside a stale .git: the COMMIT file they carry
    wins; a file that holds no sha is ignored; without one, a checkout's own HEAD (a 40-hex sha) or nothing."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "COMMIT").write_text(sha + "\n")
    assert schema.git_commit(tmp_path) == sha
    (tmp_path / "COMMIT").write_text("not a commit")
    monkeypatch.delenv("GITHUB_SHA", raising=False)
    assert schema.git_commit(tmp_path) is None  # no sha, no checkout, no GITHUB_SHA
    monkeypatch.setenv("GITHUB_SHA", "abc")
    assert schema.git_commit(tmp_path) == "abc"
    monkeypatch.delenv("GITHUB_SHA")
    head = schema.git_commit()
    assert head is None or (len(head) == 40 and all(c in "0123456789abcdef" for c in head))
