"""A case that comes from outside a campaign -- ``repro --case``, a saved case, a ``matrix --corpus`` entry, a
finding replayed on another release -- runs as a campaign runs it (Note [Cases outside a campaign] in
fuzz/isolated.py): in a worker, never in the user's process, and never when its target declines a feature
the case uses.  SGLang's csgmv kernels write a permutation row past ``x`` unchecked: ``repro`` segfaulted
(exit 139) or printed "REPRODUCED [validation-gap]" after writing outside its tensors, and the same
metadata in a corpus entry took the whole matrix down.  Every command here runs in a child process: on
the old code they crash it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem

from oracle_tests._sglang_releases import wheel_or_skip

_SHRINK = {"family": "csgmv", "op": "csgmv_shrink", "seg_lens": [3], "weight_indices": [0], "lora_ranks": [4],
           "scalings": [1.0], "permutation": [0, 1, 2]}
# a permutation row 64 rows past x: the kernels read and write it (the class every release declines)
PAST_X = {"problem": _SHRINK, "mutation": {"family": "csgmv", "kind": "permutation_out_of_range", "index": 0,
                                           "amount": 64}}
UNCHECKED = ("an unchecked precondition, not a defect: the kernels read and write the rows the batch info names "
             "without bounds checks, so a permutation row at or past x.shape[0] (or a slot, segment bound or count "
             "past its tensor) addresses memory outside the tensors (heap corruption); never sent")


def _cli(cwd, *argv, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-m", "kernel_oracle", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def test_repro_refuses_a_case_its_target_declines_before_running_it(tmp_path):
    wheel_or_skip("0.5.23")
    done = _cli(tmp_path, "repro", "--case-json", json.dumps(PAST_X), "--targets", "sglang-csgmv==0.5.23", "--device", "cpu")
    assert (done.returncode, done.stdout) == (2, ""), done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"kernel-oracle repro: error: target 'sglang-csgmv==0.5.23' declines csgmv.unchecked_bounds ({UNCHECKED}); "
        f"a campaign never gives it this case, so it is not run"]


SEGFAULTS = '''
import ctypes

def step_a_q_fwd(q_nope, B_buf, batch_info, full_K_per_head):
    ctypes.string_at(0)  # reads address 0: SIGSEGV
'''


def test_repro_runs_the_target_in_a_worker_so_its_crash_is_a_verdict(tmp_path):
    (tmp_path / "kosegfaults.py").write_text(SEGFAULTS)
    case = {"problem": {"family": "lora", "op": "step_a_q", "seg_lens": [2], "weight_indices": [0],
                        "lora_ranks": [4], "scalings": [1.0], "H": 1, "qk": 8, "vd": 8, "C": 8, "R": 4}}
    done = _cli(tmp_path, "repro", "--case-json", json.dumps(case), "--targets", "kosegfaults", "--device", "cpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REPRODUCED [crash] on kosegfaults:\ntarget crashed: worker process died (" in done.stdout
    assert "SIGSEGV" in done.stdout


def test_a_corpus_entry_its_target_declines_is_not_run_and_the_matrix_goes_on(tmp_path):
    wheel_or_skip("0.5.23")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "csgmv-row-past-x.toml").write_text(textwrap.dedent('''
        id = "csgmv-row-past-x"
        title = "a permutation row past x"
        upstream = "https://example.org/row-past-x"
        status = "known"
        target = "sglang-csgmv"
        device = "cpu"
        buggy = ["0.5.23"]
        fixed = []
        expect = "crash"

        [[cases]]
        [cases.problem]
        family = "csgmv"
        op = "csgmv_shrink"
        seg_lens = [3]
        weight_indices = [0]
        lora_ranks = [4]
        scalings = [1.0]
        permutation = [0, 1, 2]
        [cases.mutation]
        family = "csgmv"
        kind = "permutation_out_of_range"
        index = 0
        amount = 64
    '''))
    done = _cli(tmp_path, "matrix", "--targets", "sglang-csgmv==0.5.23", "--op", "csgmv", "--cases", "2", "--device",
                "cpu", "--corpus", corpus, "--out", tmp_path / "m", "--quiet")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    record = json.loads((tmp_path / "m" / "matrix.json").read_text())
    (entry,) = record["release_matrix"]["corpus"]
    assert entry["results"] == {"sglang-csgmv==0.5.23": {"outcome": "declined", "expected": "fails",
                                                          "as_expected": None}}
    assert (f"corpus csgmv-row-past-x on sglang-csgmv==0.5.23: not run: sglang-csgmv==0.5.23 declines "
            f"csgmv.unchecked_bounds ({UNCHECKED})") in record["notes"]


# ---- which declined features a case uses (Case.declined: each family's own) --------------------------------

def _csgmv(**kw) -> CsgmvProblem:
    fields = dict(op="csgmv_expand", seg_lens=(3,), weight_indices=(0,), lora_ranks=(4,), scalings=(1.0,),
                  permutation=(0, 1, 2))
    return CsgmvProblem(**{**fields, **kw})


def test_each_family_names_the_declined_features_a_case_uses():
    every = ("csgmv.unchecked_bounds", "csgmv.output_view", "csgmv.stale_host_ints", "csgmv.split_k",
             "csgmv.slice_offsets_cpu")
    assert Case(_csgmv()).declined(every) == ()
    assert Case(_csgmv(), Mutation("csgmv", "permutation_out_of_range")).declined(every) == ("csgmv.unchecked_bounds",)
    assert Case(_csgmv(base="view", cpu_offsets=True)).declined(every) == ("csgmv.output_view", "csgmv.slice_offsets_cpu")
    assert Case(_csgmv(use_cuda_graph=True, graph_pad_to=2, stale_host_ints=(1, 1))).declined(every) == (
        "csgmv.stale_host_ints",)
    assert Case(_csgmv(op="csgmv_shrink", split_k=2)).declined(["csgmv.split_k"]) == ("csgmv.split_k",)
    lora = LoRAProblem(op="step_a_q", seg_lens=(2,), weight_indices=(0,), lora_ranks=(4,), scalings=(1.0,))
    assert Case(lora).declined(["lora.missing_max_len"]) == ()
    assert Case(lora, Mutation("lora", "drop_max_len_and_seg_lens")).declined(["lora.missing_max_len"]) == (
        "lora.missing_max_len",)
    assert Case(dataclasses.replace(lora, with_max_len=False, with_seg_lens=False)).declined(
        ["lora.missing_max_len"]) == ("lora.missing_max_len",)
    vision = VisionProblem(lengths=(3,), H=2, H_kv=1, window=(1, 1))
    assert Case(vision).declined(["gqa", "window_size", "s_aux"]) == ("gqa", "window_size")
