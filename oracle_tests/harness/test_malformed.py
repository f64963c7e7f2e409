"""Consequences of accepted malformed metadata (Note [Malformed consequences] in harness.malformed):
each class planted by a small lenient target, and the CLI's judging rule for targets without strict
validation."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import torch

from kernel_oracle.harness.check import Case, check_case
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference import lora

# segment 0 (rows 0..2) gets the bad slot; segment 2 (rows 3..19) stays intact: the valid part
LORA = dict(op="step_b_q", seg_lens=(3, 0, 17), weight_indices=(0, 1, 0), lora_ranks=(16, 5), scalings=(0.5, -2.0),
            H=2, qk=16, vd=8, C=24, R=16, seed=11)
BAD_SLOT = Case(LoRAProblem(**LORA), Mutation("lora", "slot_out_of_range", 0, 1))


def _lenient(after):
    """A target without strict validation: the reference on the call with its weight indices clamped
    into range (what a kernel reading slot 0 for a bad index computes), then, on a bad index only,
    ``after(output)``."""

    def step_b_q_fwd(*args, **kwargs):
        args = list(args)  # the in-place output stays the harness's; the batch info becomes a clamped copy
        i = next(i for i, a in enumerate(args) if hasattr(a, "weight_indices"))
        bi = args[i] = copy.copy(args[i])
        slots = int(bi.lora_ranks.numel())
        bad = bool(((bi.weight_indices < 0) | (bi.weight_indices >= slots)).any())
        bi.weight_indices = torch.where((bi.weight_indices >= 0) & (bi.weight_indices < slots), bi.weight_indices, 0)
        out = lora.step_b_q_fwd(*args, **kwargs)
        if bad:  # what the malformation makes it do (on a valid batch it is right)
            after(out)
        return out

    return Target("planted", {"step_b_q": step_b_q_fwd}, precision="ieee", strict=False)


def _consequence(after):
    verdict = check_case(_lenient(after), BAD_SLOT, "cpu")
    assert verdict.kind == "validation-gap", verdict.message
    return verdict.consequence, verdict.rows


def test_harmless_when_only_the_broken_segment_differs():
    assert _consequence(lambda out: out[0:3].add_(7.0)) == ("harmless", None)


def test_rows_dropped_when_a_valid_row_is_left_nan():
    assert _consequence(lambda out: out[5].fill_(float("nan"))) == ("rows dropped", "rows [5]")


def test_defined_rows_changed_when_a_valid_row_is_wrong():
    assert _consequence(lambda out: out[7].add_(1.0)) == ("defined rows changed", "rows [7]")


def test_a_malformation_without_a_valid_part_is_harmless():
    case = Case(LoRAProblem(**LORA), Mutation("lora", "metadata_dtype", 0, 1))
    verdict = check_case(_lenient(lambda out: out.add_(3.0)), case, "cpu")
    if verdict.kind == "validation-gap":  # accepted: nothing a correct kernel must keep
        assert verdict.consequence == "harmless"


def test_any_error_on_malformed_metadata_is_rejected_by_a_lenient_target_not_by_a_strict_one():
    """No upstream contract names the error for malformed metadata: a target without strict validation
    that raises (an IndexError of its own indexing) rejected it and passes; ours must raise the strict text."""

    def raises(*args, **kwargs):
        raise IndexError("index 50 is out of bounds for dimension 0 with size 50")

    lenient = check_case(Target("lenient", {"step_b_q": raises}, strict=False), BAD_SLOT, "cpu")
    assert lenient.ok and lenient.consequence == "rejected", lenient
    strict = check_case(Target("strict", {"step_b_q": raises}, strict=True), BAD_SLOT, "cpu")
    assert not strict.ok and strict.kind == "contract" and "IndexError" in strict.message, strict


MODULE = '''
import copy
import torch
from kernel_oracle.reference import lora

def step_b_q_fwd(*args, **kwargs):
    args = list(args)
    i = next(i for i, a in enumerate(args) if hasattr(a, "weight_indices"))
    bi = args[i] = copy.copy(args[i])
    n = int(bi.lora_ranks.numel())
    bad = (bi.weight_indices < 0) | (bi.weight_indices >= n)  # read before the clamp below
    good = [s for s in range(int(bi.seg_indptr.numel()) - 1) if not bool(bad[s])
            and int(bi.seg_indptr[s + 1]) > int(bi.seg_indptr[s])]
    bi.weight_indices = torch.where(bad, 0, bi.weight_indices)
    out = lora.step_b_q_fwd(*args, **kwargs)
    if CORRUPT and bool(bad.any()) and good:  # only on malformed input: a row of an intact segment
        out[int(bi.seg_indptr[good[0]])] += 1.0
    return out
'''


def _fuzz(tmp_path, name, corrupt, *extra, budget="60"):
    (tmp_path / f"{name}.py").write_text(f"CORRUPT = {corrupt}\n" + MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "kernel_oracle", "fuzz", "--targets", name, "--op", "step_b_q", "--cases", budget,
           "--device", "cpu", "--quiet", "--out", str(tmp_path / f"out-{name}"), *extra]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_a_plain_module_name_is_a_module_target_judged_on_upstream_contracts(tmp_path):
    proc = _fuzz(tmp_path, "mykernels", False)
    assert "mykernels has no strict validation: judged on upstream contracts" in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_a_lenient_target_that_corrupts_defined_rows_still_fails(tmp_path):
    # 600 cases of seed 5 draw multi-segment cases with a bad slot (a one-segment case has no valid part)
    proc = _fuzz(tmp_path, "corrupting_kernels", True, "--seed", "5", budget="600")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "defined rows changed" in proc.stdout and "validation-gap" in proc.stdout, proc.stdout[-3000:]


def test_an_unknown_plain_name_says_it_was_tried_as_a_module(tmp_path):
    proc = _fuzz(tmp_path / "..", "no-such-target-xyz", False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no importable module either" in proc.stderr and "'reference'" in proc.stderr


def test_the_broken_segment_is_found_when_the_host_count_is_bs():
    """``num_segments`` 0 with ``bs`` routing (a valid disagreement: docs/semantics.md#fields-that-may-disagree):
    the broken segment's rows are still outside the valid part, so a kernel that reads another slot
    there is harmless, not a corruption of defined rows (the README's plain-torch module met this)."""
    case = Case(LoRAProblem(**LORA, eager_counts=(3, 0)), Mutation("lora", "slot_out_of_range", 0, 1))
    verdict = check_case(_lenient(lambda out: out[0:3].add_(7.0)), case, "cpu")
    assert verdict.kind == "validation-gap", verdict.message
    assert (verdict.consequence, verdict.rows) == ("harmless", None)


def test_rounding_of_a_low_precision_output_is_not_a_changed_row():
    """A lenient target right everywhere but the broken segment, in float16: its defined rows differ
    from the float64 reference by its own rounding (about 1e-3), which is not a corruption (the
    README's plain-torch module was reported as changing defined rows for this)."""
    case = Case(LoRAProblem(**{**LORA, "dtype": "float16"}), Mutation("lora", "slot_out_of_range", 0, 1))
    verdict = check_case(_lenient(lambda out: out[0:3].add_(7.0)), case, "cpu")
    assert verdict.kind == "validation-gap", verdict.message
    assert (verdict.consequence, verdict.rows) == ("harmless", None)
    changed = check_case(_lenient(lambda out: out[7].add_(1.0)), case, "cpu")  # still seen in float16
    assert (changed.consequence, changed.rows) == ("defined rows changed", "rows [7]")


def test_a_broken_segments_rows_are_its_permuted_rows():
    """With a permutation, a broken segment's mutated logical range maps to physical rows through it: a
    kernel writing there is not corrupting the valid part (SGLang 0.5.23 on a decreasing seg_indptr,
    padded for a CUDA graph, was reported as changing physical row 2, which is permutation[4])."""
    from kernel_oracle.harness.check import prepared_call
    from kernel_oracle.harness.malformed import valid_rows
    from kernel_oracle.harness.problems import batch_info_of

    case = Case(LoRAProblem(op="step_b_q", seg_lens=(6, 15), weight_indices=(1, 0), lora_ranks=(19, 16),
                            scalings=(6.5, 0.0), H=2, qk=15, vd=16, C=32, R=16, extra_rows=1, permute=True,
                            cuda_graph_pad_to=4, dtype="float32", seed=364),
                Mutation("lora", "seg_indptr_decreasing", 3, 3))
    call, clean = prepared_call(case, "cpu"), prepared_call(Case(case.problem, None), "cpu")
    bad = batch_info_of(call)
    indptr, perm = bad.seg_indptr.tolist(), bad.permutation.tolist()
    assert indptr[1] > indptr[2]  # segment 1 runs backwards: rows indptr[2]..indptr[1] may be written
    mask = valid_rows(case, call, clean)
    lo, hi = indptr[2], indptr[1]
    assert not any(bool(mask[perm[i]]) for i in range(lo, hi)), (indptr, perm, mask.nonzero().flatten().tolist())
    assert bool(mask[perm[0]])  # segment 0 is intact
