"""The standalone reproducers of the SGLang reports in docs/upstream/ reproduce what the reports say, on
the CPU, from the release wheels (and report nothing where the release behaves)."""

from __future__ import annotations

import os
import re
import zipfile

import pytest

from oracle_tests._sglang_releases import wheel_or_skip

from .._scripts import load_script, run_script

VISION = "docs/upstream/sglang_vision_wrapper_repro.py"


# gqa_past_end: on the CPU the stand-in engine refuses the read past k's end that GQA's offsets ask for
@pytest.mark.parametrize("version, reproduced", [
    ("0.5.10", {"gqa", "window", "softmax_scale", "gqa_past_end"}),  # 0.5.10's forward has no softmax_scale
    ("0.5.12", {"gqa", "window", "gqa_past_end"}),
    ("0.5.23", {"gqa", "window", "empty", "gqa_past_end"}),  # the metadata helper exists from 0.5.17
])
def test_the_vision_wrapper_reproducer(version, reproduced, capsys):
    wheel = str(wheel_or_skip(version))
    repro = load_script(VISION)
    assert repro.main(["--wheel", wheel, "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert out.strip().endswith("reproduced: " + ", ".join(k for k in repro.CHECKS if k in reproduced)), out
    assert "sequence 0 error 0.0" in out  # the first sequence (offset 0) is right: the offsets are the cause


def test_the_vision_reproducers_hand_computation_agrees_with_the_wrapper_where_it_is_right(capsys):
    """With as many kv heads as heads the wrapper's offsets are right: the hand computation agrees."""
    import torch

    repro = load_script(VISION)
    cls, _ = repro.load(str(wheel_or_skip("0.5.23")), repro.torch_prefill)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(8, 2, 16, generator=gen).to(torch.bfloat16) for _ in range(3))
    out = repro._call(cls, "cpu", q, k, v, [3, 5], (32, 32, 32))
    for s, e in ((0, 3), (3, 8)):
        assert float((out[s:e].double() - repro.by_hand(q[s:e], k[s:e], v[s:e], 0.25)).abs().max()) < 0.02


def test_the_cublas_step_b_q_reproducer():
    wheel = str(wheel_or_skip("0.5.23"))
    done = run_script("docs/upstream/sglang_trt_cublas_step_b_q.py", "--wheel", wheel, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    figures = [tuple(float(x) for x in re.findall(r"error (\S+), unrouted rows changed by up to (\S+)", line)[0])
               for line in lines if "path:" in line]
    (triton, cublas, triton_zeroed, cublas_zeroed) = figures
    assert triton[0] < 1e-2 and triton[1] == 0 and triton_zeroed[1] == 0  # the Triton path follows the contract
    assert cublas[0] > 0.5 and cublas[1] > 0.5  # columns past the rank used, unrouted rows changed
    assert cublas_zeroed[0] < 1e-2 and cublas_zeroed[1] > 0.5  # SGLang's zeroed pool hides the first only
    # without max_len and seg_lens the Triton path of each entry point raises; the cuBLAS path returns (no
    # cuBLAS path in step_b_v)
    raises = "raises ValueError('LoRA batch_info must provide max_len or seg_lens.')"
    cublas = {"step_a_q": "returns (10, 2, 16)", "step_b_q": "returns (10, 2, 32)", "step_a_v": "returns (10, 2, 16)",
              "step_b_v": raises}
    outcomes = dict(re.findall(r"^  (step_\w+): Triton path (.*)$", done.stdout, re.M))
    assert outcomes == {op: f"{raises}; cuBLAS path {got}" for op, got in cublas.items()}, done.stdout
    assert lines[-1] == "reproduced: rows, max_len"


@pytest.mark.parametrize("version, code", [("0.5.13", 1), ("0.5.15", 0)])
def test_the_cublas_every_slot_reproducer(version, code):
    """0.5.13's cuBLAS paths (step_a_q, step_b_q, step_a_v) give slot 1's rows slot 0's weights; from 0.5.14
    each takes the fast path only with one resident slot, and both paths agree with the hand computation.  The
    Triton path's fp32 ``tl.dot`` runs in exact fp32 on every device (``TRITON_F32_DEFAULT=ieee``: compiled for a
    GPU it would run TF32, about 3e-3 off the float64 hand computation on these sizes)."""
    done = run_script("docs/upstream/sglang_trt_cublas_every_slot.py", "--wheel", str(wheel_or_skip(version)),
                      timeout=600, env={**os.environ, "TRITON_F32_DEFAULT": "ieee"})
    assert done.returncode == code, done.stdout + done.stderr
    errors = {(op, path): (float(a), float(b)) for op, path, a, b in re.findall(
        r"^  (step_\w+), (\w+) path: max error on slot 0's rows (\S+), on slot 1's rows (\S+)$", done.stdout, re.M)}
    assert {op for op, _ in errors} == {"step_a_q", "step_b_q", "step_a_v"}, done.stdout
    for (op, path), (slot0, slot1) in errors.items():
        assert slot0 < 1e-3, (op, path)
        assert (slot1 > 0.5) == (code == 1 and path == "cuBLAS"), (op, path, slot1)
    assert done.stdout.splitlines()[-1] == ("reproduced" if code else "not reproduced")


EMPTY_BATCH = "docs/upstream/sglang_kv_b_empty_batch.py"
EMPTY_MAX = "max(): Expected reduction dim to be specified for input.numel() == 0"


@pytest.mark.parametrize("version, variants", [("0.5.12", ("default",)), ("0.5.23", ("default", "trt"))])
def test_the_kv_b_empty_batch_reproducer(version, variants):
    """On an empty batch with max_len=None every entry point of each kv_b file raises torch's max() error,
    and returns with max_len=0; 0.5.12 has no TRT-LLM-style file (exit 2)."""
    wheel = str(wheel_or_skip(version))
    for variant in variants:
        done = run_script(EMPTY_BATCH, "--wheel", wheel, "--variant", variant, timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr
        outcomes = dict(re.findall(r"^  (step_\w+): max_len=None raises RuntimeError\((.*)\); "
                                   r"max_len=0 returns \(0, 1, \d+\)$", done.stdout, re.M))
        assert set(outcomes) == {"step_a_q", "step_b_q", "step_a_v", "step_b_v"}, done.stdout
        assert all(EMPTY_MAX in message for message in outcomes.values()), done.stdout
        assert done.stdout.splitlines()[-1] == "reproduced: step_a_q, step_b_q, step_a_v, step_b_v"
    if "trt" not in variants:
        done = run_script(EMPTY_BATCH, "--wheel", wheel, "--variant", "trt", timeout=600)
        assert done.returncode == 2 and "has no trt kv_b_lora_absorbed.py" in done.stderr, done.stdout + done.stderr


def test_the_kv_b_loader_imports_the_release_files_from_files_on_disk():
    """Compiled for a GPU, Triton's ``@jit`` reads a kernel's source from its file ("@jit functions should be
    defined in a Python file": every kv_b reproducer failed on the H200 when the loader exec'd the text)."""
    import inspect
    from pathlib import Path

    repro = load_script("docs/upstream/sglang_trt_cublas_step_b_q.py")
    for variant in ("default", "trt"):
        mod = repro.load(str(wheel_or_skip("0.5.23")), False, variant)
        path = Path(inspect.getsourcefile(mod.step_a_q_fwd))
        assert path.is_file() and "def step_a_q_fwd(" in path.read_text()
        kernels = [v for v in vars(mod).values() if hasattr(v, "fn") and callable(getattr(v, "fn"))]
        assert kernels and all(Path(inspect.getsourcefile(k.fn)).is_file() for k in kernels)


CSGMV_SMEM = "docs/upstream/sglang_csgmv_fp32_shared_memory.py"


@pytest.mark.parametrize("version", ("0.5.10", "0.5.23"))
def test_the_csgmv_shared_memory_reproducer_compiled_for_hopper(version):
    """Without a GPU the reproducer compiles the release's shrink for sm_90: the fp32 launch at the backend's
    64-row chunks asks 245,760 B (the figure the H100 refused), over Hopper's 232,448; the bf16 and 32-row
    controls fit."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = run_script(CSGMV_SMEM, "--wheel", str(wheel_or_skip(version)), "--compile-only", timeout=600,
                      env={**env, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    asks = re.findall(r"^  (\w+), (\d+) tokens \((\d+)-row chunks\): BLOCK_M \3, BLOCK_N 16, BLOCK_K 256, num_stages "
                      r"Triton default: compiled for sm_90 asks ([\d,]+) B of 232,448 B: (\w+)$", done.stdout, re.M)
    assert asks == [("float32", "256", "64", "245,760", "refused"), ("bfloat16", "256", "64", "122,880", "fits"),
                    ("float32", "255", "32", "98,304", "fits")], done.stdout
    assert done.stdout.splitlines()[-1] == "reproduced"


def test_the_csgmv_shared_memory_reproducer_refuses_what_it_cannot_run(tmp_path):
    """No CUDA and no --compile-only: the interpreter has no shared memory, so it says so (exit 2); a wheel
    without the file, or no wheel, is a usage error (exit 2, one line)."""
    import torch

    if not torch.cuda.is_available():
        done = run_script(CSGMV_SMEM, "--wheel", str(wheel_or_skip("0.5.23")), timeout=600)
        assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
        assert done.stderr == ("needs a CUDA device: the Triton interpreter has no shared memory (every call would "
                               "run); --compile-only compiles for sm_90 without one\n")
    empty = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
    done = run_script(CSGMV_SMEM, "--wheel", str(empty), "--compile-only", timeout=600)
    assert done.returncode == 2 and done.stderr == (
        f"cannot load chunked_sgmv_shrink.py from {empty}: LookupError: {empty} has no chunked_sgmv_shrink.py "
        "(SGLang 0.5.10 and later have it)\n"), done.stdout + done.stderr
    done = run_script(CSGMV_SMEM, timeout=600)
    assert done.returncode == 2 and "the following arguments are required: --wheel" in done.stderr
