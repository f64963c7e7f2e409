"""Mutation testing: every bug planted in a copy of our kernels (fuzz/mutants.py) is killed by the
CI-profile properties.  A mutant whose anchor vanished (the kernels changed) fails here by name."""

from __future__ import annotations

import pytest

from kernel_oracle.fuzz.mutant_check import check_mutant
from kernel_oracle.fuzz.targets.mutants import MUTANTS

# examples per mutant before it counts as surviving (CI profile: derandomized, tiny problems)
MAX_EXAMPLES = 100


def test_at_least_twelve_mutants():
    assert len(MUTANTS) >= 12
    assert {m.family for m in MUTANTS} == {"lora", "vision"}


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_mutant_is_killed(name, record_property):
    result = check_mutant(name, max_examples=MAX_EXAMPLES)
    record_property("op", f"mutant:{name}")
    assert result.error is None, result.error
    assert result.killed, f"mutant {name} survived {result.examples} examples: {result.description}"
    record_property("examples_to_kill", result.examples)
