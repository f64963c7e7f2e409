"""The harness beside the target: data generated on the target's device (the CPU scheme the documented
host one), the verdict computed beside the target (only the verdict and, for a failure, its bucket
travel), the worker's warm-up set, the Triton cache option and the GPU size preset."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings

from kernel_oracle.fuzz.strategies import LIMITS, REALISTIC_SHARE, default_limits
from kernel_oracle.fuzz.strategies_lora import lora_problems
from kernel_oracle.fuzz.strategies_vision import vision_problems
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.buckets import bucket_of
from kernel_oracle.harness.check import Case, check_case, execute, expected_outcome, judge, prepared_call
from kernel_oracle.harness.device import triton_cache_dir, worker_env
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.problems import generation_scheme, materialize
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.harness.targets import Target
from kernel_oracle.harness.warmup import WARM_UP_DTYPES, warm_up, warm_up_cases

from oracle_tests.conftest import DEVICE, HAS_CUDA

LORA = dict(op="step_b_q", seg_lens=(3, 0, 17), weight_indices=(0, 1, 0), lora_ranks=(16, 5), scalings=(0.5, -2.0),
            H=2, qk=16, vd=8, C=24, R=16, seed=11)


# ---- where data is generated -------------------------------------------------------------------------------------

def test_cpu_generation_is_the_documented_host_scheme():
    """The CPU draws are the scheme saved findings were made with: one CPU generator seeded with the
    problem's seed, fp32 normal draws in the documented order (permutation, B_buf, A_buf, input, base)."""
    p = LoRAProblem(**{**LORA, "permute": True})
    call = materialize(p, "cpu")
    gen = torch.Generator().manual_seed(p.seed)
    perm = torch.randperm(p.S, generator=gen)
    torch.randn(p.L, p.H * (p.qk + p.vd), p.R, generator=gen)  # B_buf: drawn, step B does not take it
    A = torch.randn(p.L, p.R, p.C, generator=gen) * p.R ** -0.5
    x = torch.randn(p.S, p.H, p.R, generator=gen)
    base = torch.randn(p.S, p.H, p.C, generator=gen)
    assert torch.equal(call.arg("A_buf"), A)
    assert torch.equal(call.arg("q_lora_a"), x) and torch.equal(call.arg("base_output"), base)
    assert torch.equal(call.arg("batch_info").permutation, perm)
    v = VisionProblem(lengths=(3, 5), seed=4, logit_scale=2.0)
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(v.T, v.H, v.D, generator=gen) * 2.0
    assert torch.equal(materialize(v, "cpu").arg("q"), q)


def test_generation_schemes_are_named_and_unknown_devices_refused():
    assert generation_scheme("cpu") != generation_scheme("cuda")
    assert generation_scheme(torch.device("cuda", 0)) == generation_scheme("cuda")
    with pytest.raises(ValueError, match=r"device='mps' is unsupported; the only valid device types are \['cpu', 'cuda'\]"):
        materialize(LoRAProblem(**LORA), "mps")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="device-side generation needs a CUDA device")
def test_gpu_data_is_generated_on_the_gpu_and_reproducible():
    p = LoRAProblem(**{**LORA, "permute": True, "strided": True})
    a, b = materialize(p, "cuda"), materialize(p, "cuda")
    for x, y in zip(a.args, b.args):
        if isinstance(x, torch.Tensor):
            assert x.device.type == "cuda"
            assert torch.equal(x.nan_to_num(), y.nan_to_num())
    assert torch.equal(a.arg("batch_info").permutation, b.arg("batch_info").permutation)


# ---- the verdict beside the target ------------------------------------------------------------------------------

VERDICT_CASES = {
    "triton lora": ("triton", Case(LoRAProblem(**LORA))),
    "triton vision": ("triton", Case(VisionProblem(lengths=(3, 0, 9), seed=2))),
    "mismatch": ("mutant:lora_scaling_missing", Case(LoRAProblem(**LORA))),
    "contract": ("mutant:lora_drifted_error_message",
                 Case(LoRAProblem(**{**LORA, "op": "step_a_q", "with_max_len": False, "with_seg_lens": False}))),
}


def _host_verdict(target, case, device):
    """The campaign's path before 12.1: output copied to the host, judged there, bucket from the host copy."""
    call = prepared_call(case, device)
    expected = expected_outcome(case, device, precision=target.precision_for(case.op), call=call)
    observed = execute(target, case, device, call=call)
    verdict = judge(case, expected, observed, call=call, device=device)
    return verdict, (None if verdict.ok else bucket_of(case, verdict, observed=observed, expected=expected, call=call))


@pytest.mark.parametrize("name", sorted(VERDICT_CASES))
def test_verdict_beside_the_target_is_the_host_verdict(name):
    spec, case = VERDICT_CASES[name]
    target = resolve_target(spec, DEVICE)
    got = check_case(target, case, DEVICE)
    want, bucket = _host_verdict(target, case, DEVICE)
    assert (got.ok, got.kind, got.message) == (want.ok, want.kind, want.message)
    assert got.ratio == pytest.approx(want.ratio, rel=1e-9) if want.ratio is not None else got.ratio is None
    assert got.bucket == bucket
    assert got.ok == (name.startswith("triton")), got.message
    assert not _tensors_in(got)  # what travels back: no tensor, a few hundred bytes
    assert len(pickle.dumps(got)) < 4096


def _tensors_in(obj) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj):
        return _tensors_in(vars(obj))
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors_in(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors_in(v)]
    return []


def test_check_case_buckets_failures_only():
    """One check for in-process callers and the worker alike: a failure carries its bucket (computed
    once, from the observation beside the target), a pass carries none."""
    spec, case = VERDICT_CASES["mismatch"]
    failed = check_case(resolve_target(spec, DEVICE), case, DEVICE)
    assert not failed.ok and failed.bucket is not None and failed.bucket.kind == "mismatch"
    passed = check_case(resolve_target("triton", DEVICE), case, DEVICE)
    assert passed.ok and passed.bucket is None


# ---- warm-up --------------------------------------------------------------------------------------------------

def _recording_target(calls: list, fail_on: str = "") -> Target:
    def entry(op):
        def fn(*args, **kwargs):
            if op == fail_on:
                raise RuntimeError("boom")
            calls.append((op, args[0].dtype, args[0].shape))
            return args[0]
        return fn
    return Target("recording", {op: entry(op) for ops in FAMILY_OPS.values() for op in ops},
                  excluded_dtypes={"float16": "not tested here"})


def test_warm_up_runs_every_op_and_dtype_at_realistic_sizes():
    calls: list = []
    info = warm_up(_recording_target(calls), "cpu", time_s=None)
    assert info["complete"] and info["cases"] == info["of"] == len(calls) and not info["errors"]
    ops = {op for fam in ("lora", "vision") for op in FAMILY_OPS[fam]}  # csgmv has no warm-up cases: no kernels of ours
    dtypes = {torch.bfloat16, torch.float32}  # float16 excluded by the target
    assert {(op, dt) for op, dt, _ in calls} == {(op, dt) for op in ops for dt in dtypes}
    assert max(s[0] for op, _, s in calls if op != "vision") >= 400  # realistic token counts
    assert {s[-1] for op, _, s in calls if op == "vision"} == {64, 80, 128}  # realistic head dims
    first = warm_up_cases(sorted(ops), WARM_UP_DTYPES)[:len(ops) - 1]
    assert {c.op for c in first} == ops - {"vision"}  # the commonest batch of every op comes first


def test_warm_up_stops_at_its_time_and_a_raising_target_is_no_error():
    calls: list = []
    info = warm_up(_recording_target(calls, fail_on="step_a_q"), "cpu", time_s=1e-9)
    assert info["cases"] == 0 and not info["complete"] and info["of"] > 1
    info = warm_up(_recording_target([], fail_on="step_a_q"), "cpu", time_s=None, dtypes=("float32",))
    assert info["complete"] and info["errors"] == []  # the target's errors are judged by the campaign
    with pytest.raises(ValueError, match=r"Expected a positive number of seconds or None but got time_s=0"):
        warm_up(_recording_target([]), "cpu", time_s=0)


def test_only_our_kernels_on_cuda_get_the_variant_warm_up(monkeypatch):
    """``warm_up_target``: the LoRA variants (compiled by children first) for spec "triton" on CUDA only;
    the children get at most CHILDREN_SHARE of the time and the worker the rest."""
    from kernel_oracle.fuzz import precompile
    from kernel_oracle.harness.warmup import variant_cases

    started, waited = [], []

    class Children:
        def wait(self, seconds):
            waited.append(seconds)
            return True

        def stop(self):
            return {"processes": 3, "cases": 7, "seconds": 0.1}

    monkeypatch.setattr(precompile, "start_variants", lambda spec, device, **kw: started.append((spec, device, kw))
                        or Children())
    ops = sorted(op for ops in FAMILY_OPS.values() for op in ops)
    fixed = len(warm_up_cases(ops, ("bfloat16", "float32")))
    info = precompile.warm_up_target(_recording_target([]), "reference", "cuda", time_s=None, processes=3)
    assert started == [] and info["parallel"] is None and info["of"] == fixed
    info = precompile.warm_up_target(_recording_target([]), "triton", "cpu", time_s=None, processes=3)
    assert started == [] and info["of"] == fixed  # the interpreter compiles nothing
    info = precompile.warm_up_target(_recording_target([]), "triton", "cuda", time_s=40.0, processes=3)
    lora = tuple(op for op in ops if op in FAMILY_OPS["lora"])  # the ops whose kernels have compiled variants
    assert info["of"] == fixed + len(variant_cases(lora, ("bfloat16", "float32"))) and info["parallel"]["cases"] == 7
    assert [(s, d, kw["ops"], kw["dtypes"], kw["processes"]) for s, d, kw in started] == \
        [("triton", "cuda", lora, ("float32", "bfloat16"), 3)]
    assert waited == [precompile.CHILDREN_SHARE * 40.0]
    precompile.warm_up_target(_recording_target([]), "triton", "cuda", time_s=precompile.MIN_PARALLEL_S / 2,
                              processes=3)
    assert len(started) == 1  # too short a warm-up for children


# ---- Triton cache option --------------------------------------------------------------------------------------------

def test_worker_env_sets_a_persistent_triton_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = worker_env("cuda", {"TRITON_INTERPRET": "1", "PATH": "/bin"}, triton_cache="cache/triton")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton") and (tmp_path / "cache" / "triton").is_dir()
    assert "TRITON_INTERPRET" not in env
    assert "TRITON_CACHE_DIR" not in worker_env("cpu", {"PATH": "/bin"})
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"^--triton-cache file: is a file, not a directory; pass a directory$"):
        triton_cache_dir("file")


# ---- the GPU size preset --------------------------------------------------------------------------------------------

def test_default_limits_by_device_and_target():
    assert default_limits("cuda", "triton") == default_limits("cuda:1", "reference") == "gpu"
    assert default_limits("cpu", "reference") == "small"
    assert default_limits("cpu", "triton") == "tiny"


GEN = settings(max_examples=120, derandomize=True, database=None, deadline=None,
               suppress_health_check=list(HealthCheck))


def _within(p, lim) -> bool:
    if isinstance(p, LoRAProblem):
        return len(p.seg_lens) <= lim.max_segments and max(p.seg_lens, default=0) <= lim.max_seg_len + 1
    return len(p.lengths) <= lim.max_sequences and max(p.lengths, default=0) <= lim.max_seq_len + 1


@pytest.mark.parametrize("make", [lora_problems, vision_problems], ids=["lora", "vision"])
def test_gpu_preset_is_mostly_small_with_a_share_of_realistic_problems(make):
    """Four seeded runs of 30 draws, not one of 120: Hypothesis's examples within a run are correlated
    (mutations of earlier ones), and the mix of constants it takes from our loaded modules (p=0.05 per
    draw, 6.170's ``_get_local_constants``) changes with test order: one derandomized run of 120 drew
    no realistic problem after test_compare.py had imported more of our modules, 11-17 otherwise."""
    lim, full = LIMITS["gpu"], LIMITS[REALISTIC_SHARE["gpu"][0]]
    seen: list = []

    for run in range(4):
        @settings(GEN, max_examples=30, derandomize=False)
        @seed(run)
        @given(make(limits="gpu"))
        def draw(p):
            seen.append(p)

        draw()
    small = [p for p in seen if _within(p, lim)]
    assert 0.7 <= len(small) / len(seen) < 1.0, len(small) / len(seen)  # about 1 in REALISTIC_SHARE["gpu"][1] realistic
    assert all(_within(p, full) for p in seen)


# ---- the suite's TRITON_INTERPRET guard (conftest) -------------------------------------------------------------------

def test_a_leaked_triton_interpret_fails_the_test_that_leaked_it(tmp_path):
    """The conftest's autouse guard, run as a plugin on two throw-away tests: the one that flips the
    switch by hand errors (and the switch is restored), the one using monkeypatch passes."""
    (tmp_path / "test_leak.py").write_text(
        "import os\nORIGINAL = os.environ.get('TRITON_INTERPRET')\n"
        "def test_leaks():\n    os.environ['TRITON_INTERPRET'] = '0' if ORIGINAL else '1'\n"
        "def test_sees_it_restored():\n    assert os.environ.get('TRITON_INTERPRET') == ORIGINAL\n"
        "def test_monkeypatch_is_fine(monkeypatch):\n    monkeypatch.setenv('TRITON_INTERPRET', 'x')\n")
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "oracle_tests.conftest",
                           str(tmp_path / "test_leak.py")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})
    out = proc.stdout
    assert "3 passed, 1 error" in out, out[-3000:]  # test_leaks passes its call, errors at teardown
    assert "ERROR at teardown of test_leaks" in out and "this test changed TRITON_INTERPRET" in out, out[-3000:]


# ---- each machine runs the kernels its way ----------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="the compiled path needs a CUDA device; this machine interprets")
def test_a_gpu_session_compiles_the_kernels():
    """On a GPU machine nothing in the session turned the interpreter on before the kernels were imported."""
    from kernel_oracle.fuzz.targets.triton import kernels_precision
    from kernel_oracle.harness.device import interpreting
    from kernel_oracle.kernels.vision import _kernel

    assert not interpreting() and _kernel.INTERPRETING is False
    assert kernels_precision("cuda")["step_a_q"] == "tf32"  # TF32 tensor cores: only when compiled


@pytest.mark.interpreter
@pytest.mark.skipif(HAS_CUDA, reason="a GPU machine compiles the kernels (test_a_gpu_session_compiles_the_kernels)")
def test_a_cpu_session_interprets_the_kernels():
    from kernel_oracle.harness.device import interpreting
    from kernel_oracle.kernels.vision import _kernel

    assert interpreting() and _kernel.INTERPRETING is True


def test_triton_cache_option_reaches_the_worker(tmp_path):
    """``kernel-oracle fuzz --triton-cache DIR``: the target, run in the isolated worker, sees
    ``TRITON_CACHE_DIR=DIR`` (absolute, created); a file in its place is a one-line usage error."""
    import subprocess
    import sys

    pkg = tmp_path / "cache_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    seen = tmp_path / "seen.txt"
    (pkg / "probe.py").write_text(
        "import os\nfrom kernel_oracle.reference.lora import step_a_q_fwd as _ref\n\n"
        "def step_a_q_fwd(*args, **kwargs):\n"
        f"    open({str(seen)!r}, 'w').write(os.environ.get('TRITON_CACHE_DIR', '<unset>'))\n"
        "    return _ref(*args, **kwargs)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_CACHE_DIR", None)
    cmd = [sys.executable, "-m", "kernel_oracle", "fuzz", "--targets", "cache_probe_pkg.probe", "--op", "step_a_q",
           "--cases", "2", "--device", "cpu", "--quiet", "--upstream-contracts-only"]
    proc = subprocess.run(cmd + ["--out", str(tmp_path / "out"), "--triton-cache", "tc"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert seen.read_text() == str(tmp_path / "tc") and (tmp_path / "tc").is_dir()
    (tmp_path / "afile").write_text("x")
    bad = subprocess.run(cmd + ["--out", str(tmp_path / "out2"), "--triton-cache", "afile"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--triton-cache afile: is a file, not a directory" in bad.stderr


def test_a_cpu_child_runs_one_intra_op_thread_unless_told():
    """A CPU worker's small cases run faster on one thread (harness.device.worker_env); a user's own
    OMP_NUM_THREADS wins, and a GPU worker's is left as it is."""
    assert worker_env("cpu", {"PATH": "/bin"})["OMP_NUM_THREADS"] == "1"
    assert worker_env("cpu", {"PATH": "/bin", "OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"
    assert "OMP_NUM_THREADS" not in worker_env("cuda", {"PATH": "/bin"})
