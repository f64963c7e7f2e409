"""A release's bug reads like a planted one: SGLang 0.5.12's stale host ints (PR #28371) are one finding that
lists the ops it shows in, says what it depends on, names the pull request in every output, and whose
smallest example is one short segment (Note [One root cause across ops], Note [Minimal examples])."""

from __future__ import annotations

import json

from kernel_oracle.cli import main
from oracle_tests._sglang_releases import wheel_or_skip


def test_pr_28371_is_one_named_finding_of_its_ops_with_a_one_segment_example(tmp_path, capsys):
    wheel_or_skip("0.5.12")
    out = tmp_path / "run"
    code = main(["fuzz", "--targets", "sglang==0.5.12", "--op", "lora", "--cases", "500", "--device", "cpu",
                 "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    rec = json.loads((out / "summary.json").read_text())
    assert code == 1, printed
    named = [f for f in rec["findings"] if any(e["id"] == "sglang-pr-28371" for e in f.get("corpus") or ())]
    assert len(named) == 1, [f["headline"] for f in rec["findings"]]
    (f,) = named
    failing = {g["op"] for g in rec["groups"] if g["findings"]["mismatch"]}
    assert len(failing) >= 2 and set(f["ops"]) == failing, (f["ops"], failing)
    assert [g["id"] for g in rec["findings"] if g["kind"] == "mismatch"] == [f["id"]], "one mismatch root cause"
    assert "it depends on stale host ints" in f["headline"], f["headline"]
    assert f["headline"].endswith("known upstream: sglang PR #28371"), f["headline"]
    problem = f["problem"]["problem"]
    assert len(problem["seg_lens"]) == 1 and problem["seg_lens"][0] <= 2 and problem["H"] == 1, problem
    assert problem["stale_host_ints"] is not None, problem
    assert f"FINDING {f['id']}: {f['headline']}" in printed  # the console's closing list
    for page in ("report.md", "report.html"):  # written beside summary.json by fuzz
        assert "sglang PR #28371" in (out / page).read_text(), page
