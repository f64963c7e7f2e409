"""The public API (kernel_oracle.assert_matches, replay, materialize, strategies) and the pytest plugin
as another project sees them: every check here has a planted bug it must catch."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from hypothesis import given, settings

import kernel_oracle
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.reference import csgmv as ref_csgmv
from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference.contracts import contract
from kernel_oracle.reference.vision import flashinfer_cudnn_attention

REFERENCE = {"step_a_q": ref_lora.step_a_q_fwd, "step_b_q": ref_lora.step_b_q_fwd,
             "step_a_v": ref_lora.step_a_v_fwd, "step_b_v": ref_lora.step_b_v_fwd,
             "q_side_fused": ref_lora.q_side_fused_fwd, "v_side_fused": ref_lora.v_side_fused_fwd,
             "vision": flashinfer_cudnn_attention, "csgmv_shrink": ref_csgmv.chunked_sgmv_lora_shrink_forward,
             "csgmv_expand": ref_csgmv.chunked_sgmv_lora_expand_forward}

# segments (5, 0, 3) -> slots (0, 1, 1), ranks (16, 4), permuted rows, 2 unrouted rows
LORA = dict(seg_lens=(5, 0, 3), weight_indices=(0, 1, 1), lora_ranks=(16, 4), scalings=(1.0, -0.5), permute=True,
            extra_rows=2, seed=3)


def _problem(op: str):
    return VisionProblem(lengths=(5, 0, 7), extra_tokens=2, seed=3) if op == "vision" else LoRAProblem(op=op, **LORA)


def _buggy_step_a_q(q_nope, B_buf, batch_info, full_k):
    """The reference, plus a wrong value at token perm[5] (segment 2, slot 1), head 1, rank index 2."""
    out = ref_lora.step_a_q_fwd(q_nope, B_buf, batch_info, full_k)
    out[int(batch_info.permutation[5]), 1, 2] += 0.25
    return out


# ---- results -------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", kernel_oracle.OPS)
def test_reference_matches_on_every_op(op):
    if OP_DB[op].family == "csgmv":  # every opinfo sample (S <= 12), judged by the oracle's own bound
        for sample in OP_DB[op].sample_inputs("cpu", torch.float32):
            call = kernel_oracle.materialize(sample.problem)
            assert kernel_oracle.assert_matches(op, REFERENCE[op], *call.args, **call.kwargs).ok, sample.name
        return
    call = kernel_oracle.materialize(_problem(op))
    verdict = kernel_oracle.assert_matches(op, REFERENCE[op], *call.args, **call.kwargs)
    assert verdict.ok and verdict.ratio is not None and verdict.ratio <= 1.0


def test_mismatch_reports_layout_locator_and_repro(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_ORACLE_REPRO_DIR", str(tmp_path))
    call = kernel_oracle.materialize(_problem("step_a_q"))
    token = int(call.args[2].permutation[5])
    with pytest.raises(AssertionError) as info:
        kernel_oracle.assert_matches("step_a_q", _buggy_step_a_q, *call.args, **call.kwargs)
    msg = str(info.value)
    assert msg.startswith("Tensor-likes are not close!")
    assert "Mismatched elements: 1 / " in msg
    assert f"Greatest absolute difference: 0.25 at index ({token}, 1, 2)" in msg
    assert f"Where: token={token}, head=1, segment=2, slot=1" in msg
    spec = f"{__name__}:_buggy_step_a_q"
    assert re.search(rf"Reproduce: python -c \"import kernel_oracle; kernel_oracle.replay\('.+\.pt', '{spec}'\)\"",
                     msg), msg
    assert len(list(tmp_path.glob("step_a_q-*.pt"))) == 1


def test_inplace_step_must_leave_unrouted_rows_and_the_callers_tensors_alone():
    call = kernel_oracle.materialize(_problem("step_b_q"))
    base_before = call.args[3].clone()
    unrouted = sorted(set(range(call.args[0].shape[0])) - set(int(r) for r in call.args[2].permutation[:8]))

    def writes_an_unrouted_row(x, A_buf, bi, base):
        ref_lora.step_b_q_fwd(x, A_buf, bi, base)
        base[unrouted[0]] += 1.0
        return base

    with pytest.raises(AssertionError, match=rf"(?s)not close!.*Where: token={unrouted[0]}, head=0, segment=None"):
        kernel_oracle.assert_matches("step_b_q", writes_an_unrouted_row, *call.args, repro="")
    assert torch.equal(call.args[3], base_before)  # the user's tensors are never modified


def test_wrong_dtype_is_reported_before_values():
    call = kernel_oracle.materialize(_problem("step_a_v"))
    with pytest.raises(AssertionError, match=r"output dtype are not comparable: expected torch.float32, "
                                             r"got torch.float64"):
        kernel_oracle.assert_matches("step_a_v", lambda *a: ref_lora.step_a_v_fwd(*a).double(), *call.args, repro="")


# ---- contracts -----------------------------------------------------------------------------------

def _without_max_len(call):
    bi = call.args[2]
    bi.max_len, bi.seg_lens = None, None
    return call


def test_contract_error_must_match_type_and_full_text():
    call = _without_max_len(kernel_oracle.materialize(_problem("step_a_q")))
    exact = contract("lora.missing_max_len").message()
    assert exact == "LoRA batch_info must provide max_len or seg_lens."
    kernel_oracle.assert_matches("step_a_q", REFERENCE["step_a_q"], *call.args)

    def ignores_it(q, B, bi, k):
        return torch.zeros(q.shape[0], q.shape[1], B.shape[2], dtype=q.dtype)

    def other_text(q, B, bi, k):
        raise ValueError("max_len is missing")

    def other_type(q, B, bi, k):
        raise RuntimeError(exact)

    with pytest.raises(AssertionError, match=re.escape(f"no error raised; expected ValueError({exact!r})")):
        kernel_oracle.assert_matches("step_a_q", ignores_it, *call.args, repro="")
    with pytest.raises(AssertionError, match=re.escape("raised ValueError('max_len is missing')")):
        kernel_oracle.assert_matches("step_a_q", other_text, *call.args, repro="")
    with pytest.raises(AssertionError, match=re.escape(f"raised RuntimeError({exact!r})")):
        kernel_oracle.assert_matches("step_a_q", other_type, *call.args, repro="")


def test_vision_upstream_contract_on_the_kwargs_path():
    call = kernel_oracle.materialize(VisionProblem(lengths=(4, 6), path="kwargs"))
    del call.kwargs["sequence_lengths"]
    exact = "sequence_lengths should be prepared for vision flashinfer_cudnn attention backend"
    kernel_oracle.assert_matches("vision", flashinfer_cudnn_attention, *call.args, **call.kwargs)
    with pytest.raises(AssertionError, match=re.escape(f"no error raised; expected RuntimeError({exact!r})")):
        kernel_oracle.assert_matches("vision", lambda q, *a, **kw: torch.zeros_like(q), *call.args, repro="",
                                     **call.kwargs)


def test_strict_false_compares_what_upstream_accepts():
    """Malformed metadata upstream accepts (max_len below the longest segment): a kernel without
    strict validation is compared with upstream semantics under strict=False, and is a validation
    gap under the default strict=True."""
    call = kernel_oracle.materialize(_problem("step_a_q"))
    call.args[2].max_len = 2
    lenient = functools.partial(ref_lora.step_a_q_fwd, strict=False)
    verdict = kernel_oracle.assert_matches("step_a_q", lenient, *call.args, strict=False)
    assert verdict.ok
    with pytest.raises(AssertionError, match=r"Finding: validation-gap .*strict validation on"):
        kernel_oracle.assert_matches("step_a_q", lenient, *call.args, repro="")


# ---- replay --------------------------------------------------------------------------------------

def test_replay_reraises_until_fixed(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_ORACLE_REPRO_DIR", str(tmp_path))
    call = kernel_oracle.materialize(_problem("step_a_q"))
    with pytest.raises(AssertionError) as first:
        kernel_oracle.assert_matches("step_a_q", _buggy_step_a_q, *call.args)
    path = re.search(r"replay\('([^']+)'", str(first.value)).group(1)
    where = re.search(r"Where: .*", str(first.value)).group(0)
    with pytest.raises(AssertionError, match=re.escape(where)):
        kernel_oracle.replay(path, f"{__name__}:_buggy_step_a_q")
    assert kernel_oracle.replay(path, REFERENCE["step_a_q"]).ok


@dataclass
class LoRABatchInfo:
    """A project's own batch-info class with SGLang's name and its ten required fields only."""

    use_cuda_graph: bool
    bs: int
    num_segments: int
    seg_indptr: torch.Tensor
    weight_indices: torch.Tensor
    lora_ranks: torch.Tensor
    scalings: torch.Tensor
    max_len: Optional[int]
    seg_lens: Optional[torch.Tensor]
    permutation: Optional[torch.Tensor]


def test_replay_loads_a_projects_own_batch_info_weights_only(tmp_path, monkeypatch):
    """SGLang's LoRABatchInfo is saved as our same-field mirror, so replay needs no pickled class."""
    monkeypatch.setenv("KERNEL_ORACLE_REPRO_DIR", str(tmp_path))
    call = kernel_oracle.materialize(_problem("step_a_q"))
    theirs = LoRABatchInfo(**{f.name: getattr(call.args[2], f.name) for f in dataclasses.fields(LoRABatchInfo)})
    args = (call.args[0], call.args[1], theirs, call.args[3])
    with pytest.raises(AssertionError) as first:
        kernel_oracle.assert_matches("step_a_q", _buggy_step_a_q, *args)
    path = re.search(r"replay\('([^']+)'", str(first.value)).group(1)
    with pytest.raises(AssertionError, match=re.escape(re.search(r"Where: .*", str(first.value)).group(0))):
        kernel_oracle.replay(path, _buggy_step_a_q)


class _Opaque:
    pass


def test_replay_refuses_files_that_would_run_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"op": "step_a_q", "args": (_Opaque(),), "kwargs": {}, "precision": "ieee", "strict": True}, path)
    with pytest.raises(ValueError, match=r"was refused: .*nothing in it was run\): .*Unsupported global: .*_Opaque"):
        kernel_oracle.replay(path, REFERENCE["step_a_q"])


# ---- arguments -----------------------------------------------------------------------------------

@pytest.mark.parametrize("op, fn, kw, exc, text", [
    ("step_x", REFERENCE["step_a_q"], {}, ValueError, "op='step_x' is unknown; the only valid values are"),
    ("step_a_q", 3, {}, TypeError, "Expected a callable with the signature of step_a_q_fwd but got fn=3"),
    ("step_a_q", REFERENCE["step_a_q"], {"precision": "fp32"}, ValueError,
     "precision='fp32' is unknown; the only valid values are ['ieee', 'tf32', 'tf32-rne', 'tf32-trunc']"),
    ("step_a_q", REFERENCE["step_a_q"], {"strict": "yes"}, TypeError,
     "Expected strict to be True or False but got strict='yes'"),
])
def test_bad_arguments_name_the_field(op, fn, kw, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        kernel_oracle.assert_matches(op, fn, **kw)


def test_materialize_applies_a_cases_mutation_and_rejects_other_things():
    from kernel_oracle.harness.check import Case
    from kernel_oracle.harness.mutations import Mutation, kinds

    kind = next(k for k in kinds("lora", ("upstream",)))
    case = Case(_problem("step_a_q"), Mutation("lora", kind, 0, 1))
    mutated, plain = kernel_oracle.materialize(case), kernel_oracle.materialize(case.problem)
    assert (mutated.args[2].max_len, mutated.args[2].seg_lens) != (plain.args[2].max_len, plain.args[2].seg_lens)
    sample = next(OP_DB["csgmv_shrink"].sample_inputs("cpu", torch.float32))  # x (3, 32), weights (1, 8, 32)
    csgmv = Case(sample.problem, Mutation("csgmv", "permutation_out_of_range", 0, 1))
    assert isinstance(sample.problem, kernel_oracle.strategies.CsgmvProblem)
    assert kernel_oracle.materialize(sample.problem).args[2].permutation.tolist() == [0, 1, 2]
    assert kernel_oracle.materialize(csgmv).args[2].permutation.tolist() == [3, 1, 2]
    with pytest.raises(TypeError) as info:
        kernel_oracle.materialize({"op": "step_a_q"})
    assert str(info.value) == ("Expected a LoRAProblem, VisionProblem, CsgmvProblem or Case (from "
                               "kernel_oracle.strategies) but got problem={'op': 'step_a_q'}")


def test_a_csgmv_row_off_by_a_little_is_caught():
    """Planted defect: the shrink's first routed row 0.1 % off (x (3, 32), weights (1, 8, 32))."""
    def off(x, weights, batch_info, num_slices, split_k=None):
        out = ref_csgmv.chunked_sgmv_lora_shrink_forward(x, weights, batch_info, num_slices, split_k)
        out[int(batch_info.permutation[0])] *= 1.001
        return out

    call = kernel_oracle.materialize(next(OP_DB["csgmv_shrink"].sample_inputs("cpu", torch.float32)).problem)
    with pytest.raises(AssertionError) as info:
        kernel_oracle.assert_matches("csgmv_shrink", off, *call.args, **call.kwargs, repro="-")
    assert str(info.value).startswith("output: 8 of 24 defined entries differ; first at row 0, column 0: ")


# ---- strategies in a user's property test ----------------------------------------------------------

def test_strategies_drive_assert_matches_and_catch_a_planted_bug():
    strategy = kernel_oracle.strategies.cases("lora", categories=("valid", "upstream"), ops=["step_a_v"],
                                              dtypes=["float32"], limits="tiny")

    def run(fn):
        @settings(max_examples=15, derandomize=True, database=None, deadline=None)
        @given(strategy)
        def prop(case):
            call = kernel_oracle.materialize(case)
            kernel_oracle.assert_matches(case.op, fn, *call.args, repro="", **call.kwargs)
        prop()

    run(REFERENCE["step_a_v"])
    with pytest.raises(AssertionError, match="Tensor-likes are not close!"):
        run(lambda *a: ref_lora.step_a_v_fwd(*a) * 1.01)


# ---- import hygiene --------------------------------------------------------------------------------

def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_root_import_is_light_and_exports_lazily():
    out = _python("""
        import sys, kernel_oracle
        # the families registry and the built-in records load with the package (standard library only)
        heavy = ("torch", "hypothesis", "kernel_oracle.harness.problems", "kernel_oracle.fuzz", "kernel_oracle.api")
        print([m for m in heavy if m in sys.modules])
        import kernel_oracle.reference.tolerance
        print([m for m in heavy[2:] if m in sys.modules])
        kernel_oracle.assert_matches, kernel_oracle.strategies.lora_problems
        from kernel_oracle.strategies import cases
        print(sorted(m for m in heavy if m in sys.modules))
        try:
            kernel_oracle.assert_close
        except AttributeError as exc:
            print(exc)
    """).splitlines()
    assert out[:3] == ["[]", "[]", str(sorted(["torch", "hypothesis", "kernel_oracle.harness.problems",
                                                "kernel_oracle.fuzz", "kernel_oracle.api"]))]
    assert "has no attribute 'assert_close'; its public names are" in out[3]
    assert kernel_oracle.strategies.lora_problems is kernel_oracle.fuzz.strategies_lora.lora_problems


# ---- the pytest plugin in another project ------------------------------------------------------------

_USER_TEST = '''
import hypothesis

def test_fixtures(oracle_target, oracle_device, fuzz_target):
    assert oracle_target is fuzz_target and oracle_device in ("cpu", "cuda")
    print("TARGET", oracle_target.name, sorted(oracle_target.entries))

def test_profile_untouched_unless_asked():
    print("MAX_EXAMPLES", hypothesis.settings().max_examples)
'''


def _write_user_test(tmp_path):
    (tmp_path / "test_user.py").write_text(_USER_TEST)
    return tmp_path


def _pytest_in(tmp_path, *args: str) -> subprocess.CompletedProcess:
    _write_user_test(tmp_path)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_plugin_loads_in_another_project_with_namespaced_options(tmp_path):
    proc = _pytest_in(tmp_path, "--oracle-target", "reference", "--oracle-device", "cpu")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "TARGET reference ['csgmv_expand', 'csgmv_shrink', 'q_side_fused', 'step_a_q', 'step_a_v', 'step_b_q', " \
           "'step_b_v', 'v_side_fused', 'vision']" in proc.stdout
    assert "kernel-oracle targets" in proc.stdout
    # --oracle-target runs the tests that take a target, and says so; the project's others are deselected
    assert "1 others deselected" in proc.stdout and "1 deselected" in proc.stdout, proc.stdout[-2000:]
    proc = _pytest_in(tmp_path, "-k", "profile")
    assert "MAX_EXAMPLES 100" in proc.stdout  # Hypothesis's default: the plugin loaded no profile
    proc = _pytest_in(tmp_path, "--oracle-profile", "ci", "-k", "profile")
    assert "MAX_EXAMPLES 12" in proc.stdout, proc.stdout[-2000:]


def test_plugin_can_be_turned_off(tmp_path):
    proc = _pytest_in(tmp_path, "-p", "no:kernel_oracle", "--oracle-target", "reference")
    assert proc.returncode == 4 and "unrecognized arguments: --oracle-target" in proc.stderr, proc.stderr[-2000:]


# ---- Note [Parallel on a GPU machine] --------------------------------------------------------------

def test_gpu_workers_decision():
    from kernel_oracle.pytest.plugin import gpu_workers

    gpu = {"CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_workers("auto", [], gpu, cpu_count=16) == 8
    assert gpu_workers("auto", [], gpu, cpu_count=2) == 2
    assert gpu_workers("auto", [], gpu, cpu_count=64) == 16
    assert gpu_workers("3", ["oracle_tests"], gpu) == 3
    assert gpu_workers("", [], gpu) == 0  # not asked for
    assert gpu_workers("auto", [], {"CUDA_VISIBLE_DEVICES": ""}) == 0  # no GPU visible
    assert gpu_workers("auto", ["-n", "0"], gpu) == 0  # the command decides
    assert gpu_workers("auto", ["-n4"], gpu) == 0
    assert gpu_workers("auto", ["--pdb"], gpu) == 0
    assert gpu_workers("auto", ["-p", "no:xdist"], gpu) == 0
    assert gpu_workers("auto", [], {**gpu, "PYTEST_XDIST_WORKER": "gw1"}) == 0  # never nested
    assert gpu_workers("auto", [], {**gpu, "KERNEL_ORACLE_GPU_WORKERS": "0"}) == 0
    assert gpu_workers("", [], {**gpu, "KERNEL_ORACLE_GPU_WORKERS": "5"}) == 5
    with pytest.raises(pytest.UsageError, match=r"oracle_gpu_workers='many' is not a number of workers"):
        gpu_workers("many", [], gpu)
    with pytest.raises(pytest.UsageError, match=r"oracle_gpu_workers='-2' is not a number of workers"):
        gpu_workers("-2", [], gpu)


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist is in the cluster extra")
def test_a_project_that_asks_runs_on_xdist_workers_when_a_gpu_is_visible(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\noracle_gpu_workers = 2\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    visible = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_user.py", "-k",
                              "profile"], cwd=_write_user_test(tmp_path), capture_output=True, text=True, timeout=300,
                             env={**env, "CUDA_VISIBLE_DEVICES": "0"})
    assert visible.returncode == 0, visible.stdout[-3000:] + visible.stderr[-2000:]
    assert "created: 2/2 workers" in visible.stdout, visible.stdout[-3000:]
    assert "kernel-oracle: 2 pytest-xdist workers on this GPU machine" in visible.stdout
    serial = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py", "-k",
                             "profile", "-n", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**env, "CUDA_VISIBLE_DEVICES": "0"})
    assert serial.returncode == 0 and "workers" not in serial.stdout, serial.stdout[-3000:]
