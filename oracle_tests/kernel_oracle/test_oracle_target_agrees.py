"""``pytest oracle_tests --oracle-target MODULE`` runs that module's differential tests only and judges
it as ``kernel-oracle fuzz`` does: the same module is clean in both, or fails in both.  A module
without strict validation (a user's plain-torch module: oracle_tests/_user_kernels.py) accepts
malformed metadata; where that is harmless it is a validation gap, no failure, for both commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oracle_tests._user_kernels import unique_name, write_user_module

SUITE = Path(__file__).resolve().parents[1]
_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "TRITON_INTERPRET")}


def _pytest(folder: Path, name: str):
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", str(SUITE), "--oracle-target", name, "-p", "no:cacheprovider",
                           "-q", "-rA"], cwd=folder, env=_ENV, capture_output=True,
                          text=True, timeout=600)
    return proc, time.monotonic() - start


def _fuzz(folder: Path, name: str):
    return subprocess.run([sys.executable, "-m", "kernel_oracle", "fuzz", "--targets", name, "--op", "lora",
                           "--device", "cpu", "--quiet", "--out", str(folder / "out")],
                          cwd=folder, env=_ENV, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("plant, clean", [("", True), ("drops_segment_end", False), ("sloppy_slot_1", False)])
def test_pytest_and_fuzz_judge_a_lenient_module_alike(tmp_path, plant, clean):
    """One campaign underneath both (Note [One campaign underneath]): ``sloppy_slot_1`` is wrong only on the
    draws that give slot 1 a long segment, which a dozen examples per property missed (pytest passed it
    while fuzz found it)."""
    name = unique_name()
    write_user_module(tmp_path, name, plant)
    proc, seconds = _pytest(tmp_path, name)
    fuzz = _fuzz(tmp_path, name)
    out = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert fuzz.returncode == (0 if clean else 1), fuzz.stdout[-3000:] + fuzz.stderr[-2000:]
    assert proc.returncode == (0 if clean else 1), out
    # its own tests only, each named by the target (-rA lists every one that ran, with or without xdist,
    # which a GPU machine's suite turns on and which reports no deselection), in well under a minute
    lines = proc.stdout.splitlines()
    ran = [ln for ln in lines if ln.startswith(("PASSED ", "FAILED ", "ERROR "))]
    assert ran and all(f"target={name}" in ln for ln in ran), out
    assert "test_layers" not in proc.stdout and "target=reference" not in proc.stdout, out
    assert seconds < 60, f"{seconds:.0f} s"
    if clean:  # the malformed property runs on a module without strict validation, judged by consequence
        assert any(ln.startswith("PASSED") and f"test_property[target={name}-lora-malformed]" in ln for ln in lines), out
        assert "validation gaps" in fuzz.stdout, "the module accepts malformed metadata: listed, not failed"
    else:  # the valid property fails with the campaign's finding, as fuzz prints it
        assert any(ln.startswith("FAILED") and f"test_property[target={name}-lora-valid]" in ln for ln in lines), out
        finding = next(ln for ln in fuzz.stdout.splitlines() if ln.startswith("FINDING "))
        assert finding.split(":", 1)[1].strip().split(" (")[0] in proc.stdout, (finding, out)


def test_one_rule_says_which_accepted_malformation_fails(tmp_path, monkeypatch):
    """The campaign and the pytest property call the same rule (harness.malformed.in_gap_table): a
    module whose only defect is what it does with a bad slot fails where it changes the rows of the
    intact segments, and a harmless acceptance is a validation gap for both."""
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case
    from kernel_oracle.harness.malformed import in_gap_table
    from kernel_oracle.harness.mutations import Mutation
    from kernel_oracle.harness.problem_lora import LoRAProblem

    monkeypatch.chdir(tmp_path)
    problem = LoRAProblem("step_b_q", seg_lens=(3, 4), weight_indices=(0, 1), lora_ranks=(16, 16), scalings=(1., 2.),
                          H=1, qk=16, vd=16, C=24, R=16, seed=5)
    bad_slot = Case(problem, Mutation("lora", "slot_out_of_range", 0, 1))
    verdicts = {}
    for plant in ("", "corrupts_on_bad_slot"):
        name = unique_name()
        write_user_module(tmp_path, name, plant)
        target = resolve_target(name, "cpu")
        assert check_case(target, Case(problem), "cpu").ok, "both are right on the valid batch"
        verdicts[plant] = (check_case(target, bad_slot, "cpu"), target.strict)
    corrupt, strict = verdicts["corrupts_on_bad_slot"]
    assert (corrupt.kind, corrupt.consequence) == ("validation-gap", "defined rows changed")
    assert not in_gap_table(corrupt, strict), "a finding for fuzz, a failure for the property"
    accepted, strict = verdicts[""]
    assert accepted.ok or in_gap_table(accepted, strict), "harmless: a gap for fuzz, a pass for the property"
