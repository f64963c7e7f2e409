"""Mutation testing: every bug planted in a copy of our kernels (fuzz/mutants.py) is killed by the
CI-profile properties.  A mutant whose anchor vanished (the kernels changed) fails here by name."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from kernel_oracle.fuzz.mutant_check import check_mutant
from kernel_oracle.fuzz.targets.mutants import MUTANTS, get_mutant
from kernel_oracle.harness.device import interpreting

# examples per mutant before it counts as surviving (CI profile: derandomized, tiny problems)
MAX_EXAMPLES = 100


def test_at_least_twelve_mutants():
    assert len(MUTANTS) >= 12
    assert {m.family for m in MUTANTS} == {"lora", "vision"}


def _check(name: str, tmp_path):
    """check_mutant in this process; on a GPU session, a mutant that accepts malformed metadata runs in
    a fresh process (``kernel-oracle mutants``): compiled kernels fed malformed indices may read out of
    bounds, and an illegal memory access would end this session's CUDA context for every later test."""
    if interpreting() or "malformed" not in get_mutant(name).categories:
        return check_mutant(name, max_examples=MAX_EXAMPLES)
    out = tmp_path / "kill.json"
    proc = subprocess.run([sys.executable, "-m", "kernel_oracle", "mutants", name, "--max-examples", str(MAX_EXAMPLES),
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert out.is_file(), f"kernel-oracle mutants {name} exited {proc.returncode}: {proc.stderr[-3000:]}"
    (result,) = json.loads(out.read_text())
    return SimpleNamespace(**result)


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_mutant_is_killed(name, record_property, tmp_path):
    result = _check(name, tmp_path)
    record_property("op", f"mutant:{name}")
    assert result.error is None, result.error
    assert result.killed, f"mutant {name} survived {result.examples} examples: {result.description}"
    record_property("examples_to_kill", result.examples)
