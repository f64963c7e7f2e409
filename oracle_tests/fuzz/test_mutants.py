"""Mutation testing: every bug planted in a copy of our kernels (fuzz/mutants.py) is killed by the
CI-profile properties.  A mutant whose anchor vanished (the kernels changed) fails here by name.  The
csgmv mutants, which patch a release's files from its wheel, are tested in test_csgmv_mutants.py."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from kernel_oracle.fuzz.mutant_check import check_mutant
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.fuzz.targets.mutants import MUTANTS, get_mutant
from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem

# examples per mutant before it counts as surviving (CI profile: derandomized, tiny problems)
MAX_EXAMPLES = 100


def test_at_least_twelve_mutants():
    assert len(MUTANTS) >= 12
    assert {m.family for m in MUTANTS} == {"lora", "vision", "csgmv"}
    assert {m.family for m in MUTANTS if m.source == "kernels"} == {"lora", "vision"}


def _check(name: str, tmp_path):
    """check_mutant in this process; on a GPU session, a mutant that accepts malformed metadata runs in
    a fresh process (``kernel-oracle mutants``): compiled kernels fed malformed indices may read out of
    bounds, and an illegal memory access would end this session's CUDA context for every later test."""
    if interpreting() or "malformed" not in get_mutant(name).categories:
        return check_mutant(name, max_examples=MAX_EXAMPLES)
    out = tmp_path / "kill.json"
    proc = subprocess.run([sys.executable, "-m", "kernel_oracle", "mutants", name, "--cases", str(MAX_EXAMPLES),
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert out.is_file(), f"kernel-oracle mutants {name} exited {proc.returncode}: {proc.stderr[-3000:]}"
    (result,) = json.loads(out.read_text())
    return SimpleNamespace(**result)


@pytest.mark.parametrize("name", [m.name for m in MUTANTS if m.source == "kernels"])
def test_mutant_is_killed(name, record_property, tmp_path):
    result = _check(name, tmp_path)
    record_property("op", f"mutant:{name}")
    assert result.error is None, result.error
    assert result.killed, f"mutant {name} survived {result.examples} examples: {result.description}"
    record_property("examples_to_kill", result.examples)


# Note [Wrong-field mutants]: (mutant, a problem whose copies agree, the same problem with them apart); the
# mutant computes right on the first (so strategies that keep the copies equal never kill it) and fails
# the second.  The GQA, window and sinks mutants likewise pass without the feature and fail with it.
_LORA = LoRAProblem(op="step_b_q", seg_lens=(3, 5), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, -0.5),
                    extra_rows=2, seed=71)
_VISION = VisionProblem(lengths=(6, 9, 4), H=4, seed=73)
WRONG_FIELD = [
    ("lora_reads_bs_not_num_segments", _LORA, {"eager_counts": (1, 2)}),
    ("lora_bounds_from_seg_lens", _LORA, {"seg_lens_drift": "rolled"}),
    ("lora_grid_from_longest_segment", _LORA, {"max_len_slack": 16}),
    ("vision_lengths_from_indptr_gaps", _VISION, {"gaps": (2, 0, 3)}),
    ("vision_kwargs_over_forward_metadata", _VISION, {"path": "metadata_and_kwargs"}),
    ("vision_gqa_interleaved_heads", _VISION, {"H_kv": 2}),
    ("vision_ignores_window", _VISION, {"window": (2, 1)}),
    ("vision_ignores_sinks", _VISION, {"sinks": "normal"}),
]


@pytest.mark.parametrize("name,agree,apart", WRONG_FIELD, ids=[w[0] for w in WRONG_FIELD])
def test_wrong_field_mutants_need_the_copies_apart(name, agree, apart, device):
    target = resolve_target(f"mutant:{name}", device)
    assert check_case(target, Case(agree), device).ok, f"{name} must compute right where the copies agree"
    verdict = check_case(target, Case(dataclasses.replace(agree, **apart)), device)
    assert not verdict.ok, f"{name} passed with {apart}"
