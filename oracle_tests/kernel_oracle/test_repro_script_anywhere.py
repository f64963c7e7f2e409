"""A repro script runs as printed, from any folder (Note [Where the script finds its target] in
kernel_oracle/jobs/repro_script.py): it finds the user's module where kernel-oracle found it, and a release
that is not installed from the wheel cache."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

from kernel_oracle.cli import main
from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.jobs.bug_corpus import known_cases_for
from oracle_tests._sglang_releases import wheel_or_skip
from oracle_tests._user_kernels import unique_name, write_user_module


def _emit(capsys, *argv: str) -> str:
    """Run ``repro ... --emit-script`` and return the command line it prints to run the script."""
    assert main(["repro", *argv, "--device", "cpu", "--emit-script", "out"]) == 1
    printed = capsys.readouterr().out
    found = re.search(r"; run: (python .+)$", printed, re.M)
    assert found, printed
    return found.group(1)


def _run_elsewhere(command: str, folder) -> subprocess.CompletedProcess:
    script = command.split(" ", 1)[1]
    folder.mkdir()
    return subprocess.run([sys.executable, script], cwd=folder, capture_output=True, text=True, timeout=600)


def test_the_script_of_a_users_module_runs_from_another_folder(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # the user stands in the module's folder, as the README's five minutes do
    name = unique_name("mykv_perm")
    write_user_module(work, name, "ignores_permutation")
    case = Case(LoRAProblem("step_b_q", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(16, 16),
                            scalings=(1.0, 2.0), H=1, qk=16, vd=16, C=24, R=16, permute=True, seed=1))
    command = _emit(capsys, "--case-json", json.dumps(case.to_dict()), "--targets", name)
    done = _run_elsewhere(command, tmp_path / "elsewhere")
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, (done.stdout, done.stderr)


def test_the_script_of_a_release_finds_it_in_the_wheel_cache(tmp_path, monkeypatch, capsys):
    wheel_or_skip("0.5.12")
    assert importlib.util.find_spec("sglang") is None, "this test is about a machine without SGLang installed"
    monkeypatch.chdir(tmp_path)
    (case,) = [c for label, c in known_cases_for("sglang==0.5.12") if label["id"] == "sglang-pr-28371"][:1]
    command = _emit(capsys, "--case-json", json.dumps(case.to_dict()), "--targets", "sglang==0.5.12")
    done = _run_elsewhere(command, tmp_path / "elsewhere")
    assert done.returncode == 1 and "REPRODUCED" in done.stdout, (done.stdout, done.stderr)
    assert "sglang==0.5.12 loaded by kernel-oracle" in done.stdout
