"""``fuzz --memcheck`` (Note [Malformed consequences] in harness.malformed): after the campaign each
validation-gap row's smallest example runs under compute-sanitizer's memcheck; a reported access makes
the row an out-of-bounds finding.  compute-sanitizer is replaced here by a stand-in command that prints
what memcheck prints and exits as it does, so this runs on any machine; the GPU check runs the real one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernel_oracle.fuzz.campaign import CampaignConfig, run_campaign
from kernel_oracle.harness import malformed
from kernel_oracle.harness.device import interpreting

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "external_tests"
REPORT = ("print('========= COMPUTE-SANITIZER'); print('========= Invalid __global__ read of size 4 bytes'); "
          "print('========= ERROR SUMMARY: 1 error'); raise SystemExit(99)")
CLEAN = "print('========= ERROR SUMMARY: 0 errors')"


def _campaign(tmp_path, monkeypatch, name: str, memcheck_exit: str = None):
    """A campaign of the lenient plain-torch toy module on malformed metadata, with ``--memcheck``
    and the stand-in memcheck running ``memcheck_exit`` (None: the real lookup)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLES))
    seen = []
    if memcheck_exit is not None:
        monkeypatch.setattr(malformed, "sanitizer_command",
                            lambda repro, device: seen.append(repro) or [sys.executable, "-c", memcheck_exit])
    rec = run_campaign(CampaignConfig(target="toy_kernels.lora", op="step_a_q", budget=40, seed=4, device="cpu",
                                      out_dir=tmp_path / name, progress=False, isolate=not interpreting(),
                                      memcheck=True))
    return rec, seen


def test_a_gap_memcheck_reports_becomes_an_out_of_bounds_finding(tmp_path, monkeypatch):
    clean, runs = _campaign(tmp_path, monkeypatch, "clean", CLEAN)
    gaps = clean["validation_gaps"]
    assert gaps and len(runs) == len(gaps) and not clean["findings"], (gaps, clean["findings"])
    assert all("kernel-oracle repro --case-json" in r for r in runs)
    bad, runs = _campaign(tmp_path, monkeypatch, "access", REPORT)
    assert bad["validation_gaps"] == []  # every row was reported: each is a finding now
    oob = [f for f in bad["findings"] if f.get("consequence") == "out of bounds"]
    assert len(oob) == len(gaps) == len(runs), bad["findings"]
    assert all("Invalid __global__ read of size 4 bytes" in f["message"] and "1 error" in f["message"] for f in oob)


def test_the_smallest_case_of_a_row_is_its_example():
    from kernel_oracle.harness.check import Case, Verdict
    from kernel_oracle.harness.problem_lora import LoRAProblem

    def case(lens):
        return Case(LoRAProblem(op="step_a_q", seg_lens=lens, weight_indices=(0,) * len(lens), lora_ranks=(16,),
                                scalings=(1.0,), H=2, qk=16, vd=16, C=32, R=16, dtype="float32", seed=1))

    table = malformed.GapTable()
    for lens in ((9, 9), (2,), (5, 1)):
        table.add(case(lens), Verdict(False, "validation-gap", consequence="harmless"), "t")
    (row,) = table.to_list()
    assert row["count"] == 3 and "[2]" in row["example"].replace(" ", ""), row["example"]


def test_memcheck_without_compute_sanitizer_is_a_note(tmp_path, monkeypatch):
    """On the CPU (or without compute-sanitizer on PATH) nothing is run, and the summary says so."""
    rec, _ = _campaign(tmp_path, monkeypatch, "cpu")
    if not rec["validation_gaps"]:
        pytest.fail("the toy module accepted no malformed metadata: the campaign drew none")
    assert any(n.startswith("--memcheck: not run (device cpu") for n in rec["notes"]), rec["notes"]


def test_memcheck_reads_the_tool_s_exit_and_first_error():
    assert malformed.memcheck([sys.executable, "-c", REPORT]) == \
        ("access", "Invalid __global__ read of size 4 bytes; ERROR SUMMARY: 1 error")
    assert malformed.memcheck([sys.executable, "-c", CLEAN]) == ("clean", "ERROR SUMMARY: 0 errors")
    status, why = malformed.memcheck([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.5)
    assert status == "failed" and "did not finish" in why
