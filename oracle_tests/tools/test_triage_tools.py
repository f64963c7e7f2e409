"""The finding triage tool's false-alarm screen (``tools/triage_lora_finding.py --faithful-seeds``) on the CPU."""

from __future__ import annotations

import json

from kernel_oracle.harness import check
from kernel_oracle.harness.check import Case, Verdict
from kernel_oracle.harness.problem_lora import LoRAProblem
from .._scripts import load_script




triage_lora_finding = load_script("tools/triage_lora_finding.py")


def _finding(tmp_path):
    p = LoRAProblem(op="step_b_q", seg_lens=(3, 0, 2), weight_indices=(0, 1, 0), lora_ranks=(4, 2), scalings=(1e3, 0.5),
                    H=2, qk=16, vd=16, C=32, R=4, dtype="float16", base_dtype="float32", seed=11)
    path = tmp_path / "findings.jsonl"
    path.write_text(json.dumps({"id": "F0001", "problem": Case(p).to_dict()}) + "\n")
    return str(path)


def test_the_faithful_output_passes_the_rule(tmp_path, capsys):
    assert triage_lora_finding.main([_finding(tmp_path), "--device", "cpu", "--faithful-seeds", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["seed 11", "seed 12"] and all("passes" in line for line in out)


def test_a_rule_that_rejects_it_is_reported(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(check, "judge", lambda *a, **k: Verdict(False, "mismatch", "Tensor-likes are not close!"))
    assert triage_lora_finding.main([_finding(tmp_path), "--device", "cpu", "--faithful-seeds", "1"]) == 1
    assert "REJECTED" in capsys.readouterr().out
