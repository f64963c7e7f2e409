"""A short CPU campaign against ``reference`` and ``triton`` (zero findings, valid outputs), and
campaigns against deliberately broken targets: each finding has the right class and a one-line
repro command that reproduces it from the saved tensors."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from kernel_oracle.fuzz.campaign import CampaignError, run_campaign
from kernel_oracle.cli import main as cli_main
from kernel_oracle.harness.schema import load

BUDGET = {"reference": 12, "triton": 10}


def _findings(out):
    path = out / "findings.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("op", ["lora", "vision"])
@pytest.mark.parametrize("target", ["reference", "triton"])
def test_short_campaign_finds_nothing(target, op, tmp_path):
    rec = run_campaign(target=target, op=op, budget=BUDGET[target], seed=7, device="cpu", out_dir=tmp_path,
                       progress=False)
    assert rec["kind"] == "campaign" and rec["findings"] == [], rec["findings"]
    saved = load(tmp_path / "summary.json")
    assert saved["campaign"]["executed"] >= BUDGET[target] - 2
    assert sum(g["cases"] for g in saved["groups"]) == saved["campaign"]["executed"]
    assert all(g["precision"] == "ieee" for g in saved["groups"])
    assert saved["targets"][0]["name"] == target and saved["targets"][0]["available"]
    assert _findings(tmp_path) == []


def _reproduce(finding) -> int:
    argv = shlex.split(finding["repro"])
    assert argv[0] == "kernel-oracle"
    return cli_main(argv[1:])


def test_broken_kernel_gives_a_mismatch_that_reproduces(tmp_path, capsys):
    rec = run_campaign(target="mutant:lora_scaling_missing", op="step_b_q", budget=10, seed=1, device="cpu",
                       out_dir=tmp_path, progress=False, shrink_allowance=30)
    kinds = {f["kind"] for f in rec["findings"]}
    assert "mismatch" in kinds, rec["findings"]
    f = next(f for f in _findings(tmp_path) if f["kind"] == "mismatch")
    assert f["figures"]["ratio"] > 1 and f["figures"]["where"]["token"] is not None
    assert f["problem"]["problem"]["op"] == "step_b_q"
    assert _reproduce(f) == 1
    assert "REPRODUCED [mismatch]" in capsys.readouterr().out
    # the real kernel passes the same saved case
    argv = shlex.split(f["repro"])[1:]
    argv[argv.index("--target") + 1] = "triton"
    assert cli_main(argv) == 0


def test_accepting_malformed_metadata_is_a_validation_gap(tmp_path):
    rec = run_campaign(target="mutant:vision_skips_strict_validation", op="vision", budget=15, seed=2,
                       device="cpu", out_dir=tmp_path, progress=False, shrink_allowance=10)
    assert "validation-gap" in {f["kind"] for f in rec["findings"]}
    gap = next(f for f in rec["findings"] if f["kind"] == "validation-gap")
    assert _reproduce(gap) == 1
    # --upstream-contracts-only generates no malformed metadata: nothing to find
    rec2 = run_campaign(target="mutant:vision_skips_strict_validation", op="vision", budget=10, seed=2,
                        device="cpu", out_dir=tmp_path / "upstream_only", progress=False,
                        upstream_contracts_only=True)
    assert rec2["findings"] == []
    assert all(g["shape_class"] != "malformed" for g in rec2["groups"])


def test_drifted_message_is_a_contract_finding_and_campaigns_resume(tmp_path):
    kw = dict(target="mutant:lora_drifted_error_message", op="step_a_q", seed=3, device="cpu", out_dir=tmp_path,
              progress=False, isolate=False, shrink_allowance=10)
    first = run_campaign(budget=25, **kw)
    assert "contract" in {f["kind"] for f in first["findings"]}
    n = len(_findings(tmp_path))
    again = run_campaign(budget=35, **kw)  # same --out: continues, keeps what it found
    assert again["campaign"]["executed"] > first["campaign"]["executed"]
    assert len(_findings(tmp_path)) >= n
    ids = [f["id"] for f in _findings(tmp_path)]
    assert len(ids) == len(set(ids))


def test_a_target_that_kills_its_process_is_a_crash(tmp_path, monkeypatch):
    pkg = tmp_path / "crashy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "crashy.py").write_text("import os\n\ndef step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):\n"
                                   "    os._exit(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned worker inherits sys.path
    rec = run_campaign(target="crashy_pkg.crashy", op="lora", budget=2, seed=0, device="cpu",
                       out_dir=tmp_path / "out", progress=False, shrink_allowance=1)
    assert rec["findings"] and all(f["kind"] == "crash" for f in rec["findings"])
    assert rec["targets"][0]["entry_points"] == ["step_a_q"]  # tested on the entry point it has


def test_usage_errors(tmp_path):
    with pytest.raises(CampaignError, match="the only valid values are"):
        run_campaign(target="reference", op="conv", budget=1, out_dir=tmp_path)
    with pytest.raises(CampaignError, match="the only built-in targets are"):
        run_campaign(target="refrence", op="lora", budget=1, out_dir=tmp_path)
    assert cli_main(["fuzz", "--target", "reference", "--op", "lora", "--budget", "1", "--out", str(tmp_path / "x"),
                     "--device", "cpu", "--no-progress", "--no-isolate"]) == 0
    assert cli_main(["fuzz", "--target", "sglang", "--op", "lora", "--budget", "1", "--out", str(tmp_path / "y"),
                     "--no-progress"]) == (0 if "sglang" in sys.modules else 2)
