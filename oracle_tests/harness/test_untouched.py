"""Rows no segment routes come back bit-identical (harness/untouched.py): one check for the verdict and for the
standalone repro script, which carries its text."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from kernel_oracle.cli import main
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.untouched import SCRIPT_SOURCE, changed_rows, changed_rows_message
from oracle_tests._user_kernels import unique_name, write_user_module

# step B_q with two unrouted rows after the routed five (rows 5 and 6)
_CASE = Case(LoRAProblem("step_b_q", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, 2.0),
                         H=2, qk=16, vd=16, C=24, R=16, extra_rows=2, seed=3))


def _bits(values, dtype):
    return torch.tensor(values, dtype=torch.int32).view(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
def test_changed_rows_are_the_untouched_rows_whose_bits_differ(dtype):
    """A changed NaN payload and a sign flip of zero count, a changed routed row does not; rows ascending."""
    before = torch.zeros(6, 2, 3, dtype=dtype)
    untouched = torch.tensor([False, True, True, True, True, False])
    out = before.clone()
    if dtype == torch.float32:
        before[1, 0, 0] = _bits([0x7FC00000], torch.float32)[0]
        out[1, 0, 0] = _bits([0x7FC00001], torch.float32)[0]  # another NaN: not bit-identical
        out[3, 1, 2] = -0.0
    else:
        out[1, 0, 0] = 1
        out[3, 1, 2] = 2
    out[0] = 7  # routed rows may change
    out[5, 1, 1] = 7
    assert changed_rows(out, before, untouched) == [1, 3]
    assert changed_rows(before.clone(), before, untouched) == []
    assert changed_rows(out, before, torch.zeros(6, dtype=torch.bool)) == []


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's module with a plant, written to (and run from) ``tmp_path``: ``user_module(plant) -> name``."""
    monkeypatch.chdir(tmp_path)
    names = []

    def make(plant: str) -> str:
        names.append(unique_name("my_untouched"))
        write_user_module(tmp_path, names[-1], plant)
        return names[-1]
    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_the_verdict_names_the_unrouted_rows_a_target_changed(user_module):
    target = resolve_target(user_module("nudges_last_row"), "cpu")
    verdict = check_case(target, _CASE, "cpu")
    assert not verdict.ok and verdict.kind == "mismatch"
    assert verdict.message == changed_rows_message([6]) == \
        "rows routed by no segment changed (must stay bit-identical): rows [6]"
    assert check_case(resolve_target(user_module(""), "cpu"), _CASE, "cpu").ok


def test_the_repro_script_runs_the_verdicts_own_check(user_module, tmp_path, capsys):
    """The script carries the check's text and, with only torch, names the same rows as the verdict."""
    name = user_module("nudges_last_row")
    assert main(["repro", "--case-json", json.dumps(_CASE.to_dict()), "--targets", name, "--device", "cpu",
                 "--emit-script", "out"]) == 1
    script = re.search(r"; run: python (.+)$", capsys.readouterr().out, re.M).group(1)
    text = open(script, encoding="utf-8").read()
    assert SCRIPT_SOURCE in text and "\nimport kernel_oracle" not in text and "\nfrom kernel_oracle" not in text
    (tmp_path / "elsewhere").mkdir()
    done = subprocess.run([sys.executable, script], cwd=tmp_path / "elsewhere", capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"REPRODUCED: {changed_rows_message([6])}" in done.stdout, done.stdout
