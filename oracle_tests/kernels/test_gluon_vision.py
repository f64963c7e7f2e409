"""The Gluon Hopper vision kernel (Note [Gluon Hopper kernel] in ``kernels.vision._gluon``).

On every machine: the option and the target configuration that choose it, where it declines (the reasons,
each one), that a request for it runs the Triton kernel where it cannot run, and that it compiles for sm_90
with the schedule it is written for (warp-specialized register split, wgmma, TMA, no spills).  On an sm_90
GPU: the vision differential cases against the float64 oracle, bit-identical repeated calls, also while
another process loads the GPU, and the warm call's direct launch.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import kernel_oracle.kernels.vision as kv
import pytest
import torch
import triton
from kernel_oracle.kernels.options import OptionsError, VisionOptions, options
from kernel_oracle.kernels.vision import _direct
from kernel_oracle.kernels.vision._gluon import gluon_unsupported

from oracle_tests._vision_cases import (
    EDGE_CASES_BEYOND_OPINFO,
    HEAD_DIMS,
    PRECISIONS,
    SLOW_CASES,
    Case,
    _gen,
    _rand,
    build,
    check_against_oracle,
    head_dim_call,
)

REPO = Path(__file__).resolve().parents[2]
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
needs_sm90 = pytest.mark.skipif(not SM90, reason="the Gluon kernel runs on sm_90 GPUs (H100, H200) only")
GLUON = {"vision": {"kernel": "gluon"}}
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def test_kernel_option_is_checked():
    with pytest.raises(OptionsError) as err:
        VisionOptions(kernel="cuda")
    assert str(err.value) == "VisionOptions: kernel='cuda' is invalid; the only valid values are 'triton', 'gluon'"
    assert VisionOptions().kernel == "triton"


def _operands(dtype=torch.bfloat16, d=64, dv=None, heads=2, kv_heads=None, tokens=20):
    q = torch.randn(tokens, heads, d).to(dtype)
    k = torch.randn(tokens, kv_heads or heads, d).to(dtype)
    v = torch.randn(tokens, kv_heads or heads, dv or d).to(dtype)
    return q, k, v


@pytest.mark.parametrize("change,reason", [
    ({"dtype": torch.float32}, "dtype torch.float32 (the Gluon kernel takes float16 and bfloat16)"),
    ({"window": (4, -1)}, "window_size=(4, -1)"),
    ({"sinks": True}, "s_aux (attention sinks)"),
    ({"d": 160}, "head dims d=160, dv=160 (the Gluon kernel takes up to 128)"),
    ({"capability": (10, 0)}, "compute capability 10.0 (the Gluon kernel needs sm_90's wgmma)"),
    ({"capability": (8, 0)}, "compute capability 8.0 (the Gluon kernel needs sm_90's wgmma)"),
    ({"v_stride": 2}, "v with innermost stride 2 (TMA needs 1)"),
    ({"d": 20}, "q with token/head strides (40, 20) not multiples of 16 bytes (TMA)"),
    ({}, ""),
    ({"d": 72, "kv_heads": 1}, ""),
])
def test_where_it_declines(change, reason):
    dtype, d = change.get("dtype", torch.bfloat16), change.get("d", 64)
    q, k, v = _operands(dtype, d, kv_heads=change.get("kv_heads"))
    if change.get("v_stride"):
        v = torch.randn(20, 2, 2 * d).to(dtype)[:, :, ::2]
    sinks = torch.zeros(2) if change.get("sinks") else None
    got = gluon_unsupported(q, k, v, change.get("window", (-1, -1)), sinks, change.get("capability", (9, 0)))
    assert got == reason


def test_cpu_tensors_decline_without_a_capability():
    q, k, v = _operands()
    assert gluon_unsupported(q, k, v, (-1, -1), None) == "cpu tensors (the Gluon kernel runs on sm_90 GPUs)"


def test_a_request_runs_the_triton_kernel_where_gluon_cannot(request, device):
    """fp32 never runs on the Gluon kernel: the launch says "triton" and computes what the default does."""
    gen = _gen(request)
    lens, H, D = (7, 13), 2, 64
    q, k, v = (_rand((sum(lens), H, D), torch.float32, device, gen) for _ in range(3))
    md = kv.prepare_flashinfer_cudnn_metadata([0, 7, 20], device, elem_per_token=H * D)
    with options(**GLUON):
        launch = kv.plan_attention(q, k, v, None, forward_metadata=md)
        asked = kv.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
    assert launch.kernel == "triton" and launch.options.kernel == "gluon"
    default = kv.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
    assert torch.equal(asked, default)


def test_target_configuration_applies_the_option():
    """``triton@vision_kernel=gluon`` runs the vision entry under the option, the LoRA entries as they are."""
    from kernel_oracle.fuzz.targets.registry import resolve_target
    from kernel_oracle.harness.targets import TargetError

    target = resolve_target("triton@vision_kernel=gluon", "cpu")
    assert target.available and target.entries["vision"].launch_options == GLUON
    assert not any(hasattr(fn, "launch_options") for op, fn in target.entries.items() if op != "vision")
    assert not hasattr(resolve_target("triton@vision_kernel=triton", "cpu").entries["vision"], "launch_options")
    with pytest.raises(TargetError, match="vision_kernel"):
        resolve_target("triton@vision_kernel=cuda", "cpu")


_STRUCTURE = textwrap.dedent("""
    import json, subprocess, sys, tempfile
    from triton.backends.nvidia.compiler import get_ptxas
    sys.path.insert(0, "tools")
    import compile_hopper
    ptx = compile_hopper.compile_gluon("bfloat16", 128, 128).asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        open(tmp + "/k.ptx", "w").write(ptx)
        stats = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", tmp + "/k.ptx", "-o", tmp + "/k.cubin"],
                               capture_output=True, text=True)
    json.dump({"ptx": ptx, "ptxas": stats.stdout + stats.stderr, "rc": stats.returncode}, sys.stdout)
""")


@pytest.mark.skipif(not PTXAS.exists(), reason=f"this Triton build has no bundled ptxas ({PTXAS})")
def test_compiled_schedule():
    """The d128 kernel as compiled for sm_90: consumers raised to 240 registers and the producer lowered to
    24 (setmaxnreg: the warp-specialized split), 64 x 128 x 16 wgmma on bf16, bulk tensor (TMA) loads into
    shared memory, the output stored from registers, mbarrier waits, and no spills under Triton's ptxas."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    done = subprocess.run([sys.executable, "-c", _STRUCTURE], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    ptx = got["ptx"]
    assert "setmaxnreg.inc.sync.aligned.u32 \t240;" in ptx and "setmaxnreg.dec.sync.aligned.u32 \t24;" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.mbarrier::complete_tx::bytes", ptx)  # loads
    # the output leaves through pointer stores, never a TMA store (Note [Descriptors where they are used])
    assert "st.global" in ptx and not re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)
    assert "mbarrier.try_wait" in ptx
    assert got["rc"] == 0 and "0 bytes spill stores, 0 bytes spill loads" in got["ptxas"], got["ptxas"][-2000:]


# ---- on an sm_90 GPU ---------------------------------------------------------------------------

_FIRST = textwrap.dedent("""
    import torch
    import kernel_oracle.kernels.vision as kv
    from kernel_oracle.kernels.options import options
    for d, lens in ((128, (300, 77)), (80, (130, 5)), (64, (129,))):
        q, k, v = (torch.randn(sum(lens), 4, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        md = kv.prepare_flashinfer_cudnn_metadata(starts, "cuda", elem_per_token=4 * d)
        with options(vision={"kernel": "gluon"}):
            assert kv.plan_attention(q, k, v, None, forward_metadata=md).kernel == "gluon"
            kv.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)
    torch.cuda.synchronize()
    print("done")
""")
_FIRST_TIMEOUT_S = 300


@functools.lru_cache(maxsize=1)
def _first_launch() -> str:
    """'' once a child process has run the kernel on three shapes and ended, else why not: a kernel that
    hangs or faults fails these tests by name instead of stopping the whole suite."""
    try:
        done = subprocess.run([sys.executable, "-c", _FIRST], cwd=REPO, capture_output=True, text=True,
                              timeout=_FIRST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"the Gluon kernel did not finish within {_FIRST_TIMEOUT_S} s in a child process (a hang?)"
    if done.returncode != 0 or "done" not in done.stdout:
        return f"the Gluon kernel failed in a child process (exit {done.returncode}): {done.stderr[-1500:]}"
    return ""


@pytest.fixture
def gluon_ran():
    """Fails the test (without running the kernel here) when the child process of :func:`_first_launch`
    did not finish."""
    why = _first_launch()
    if why:
        pytest.fail(why, pytrace=False)


@needs_sm90
def test_first_launch_finishes_in_a_child(gluon_ran):
    assert _first_launch() == ""


def _check_on_gluon(args, kwargs, baseline, repro):
    """The launch is planned on the Gluon kernel and meets the tolerance rule (poisoned output, float64
    oracle, untouched tokens: ``check_against_oracle``)."""
    with options(**GLUON):
        rest = {k: v for k, v in kwargs.items() if k not in ("softmax_scale", "forward_metadata")}
        launch = kv.plan_attention(*args[:4], softmax_scale=kwargs.get("softmax_scale"),
                                   forward_metadata=kwargs.get("forward_metadata"), **rest)
        assert launch.kernel == "gluon", "the case should run on the Gluon kernel"
        check_against_oracle(args, kwargs, baseline_mode=baseline, repro=repro)


@needs_sm90
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("prec", ["bf16", "fp16"])
def test_head_dims(request, device, gluon_ran, prec, head_dim):
    dtype, _, baseline = PRECISIONS[prec]
    args, kwargs = head_dim_call(head_dim, dtype, device, _gen(request))
    _check_on_gluon(args, kwargs, baseline, request.node.nodeid)


GLUON_CASES = tuple(c for c in EDGE_CASES_BEYOND_OPINFO + SLOW_CASES if max(c.head_dim, c.v_dim or 0) <= 128) + (
    Case("one long, one short, D=128", (4100, 3), heads=4, head_dim=128),
    Case("negative scale, D=64", (700, 65), heads=2, head_dim=64, scale=-0.3),
    Case("large logits, D=80", (1000, 130), heads=2, head_dim=80, logit_scale=30.0),
)


@needs_sm90
@pytest.mark.parametrize("prec", ["bf16", "fp16"])
@pytest.mark.parametrize("case", GLUON_CASES, ids=repr)
def test_cases(request, device, gluon_ran, case, prec):
    dtype, _, baseline = PRECISIONS[prec]
    args, kwargs = build(case, dtype, device, _gen(request))
    _check_on_gluon(args, kwargs, baseline, request.node.nodeid)


@needs_sm90
@pytest.mark.parametrize("layout", ["contiguous", "v_strided"])
@pytest.mark.parametrize("group", [2, 4])
@pytest.mark.parametrize("head_dim", [80, 128])
def test_grouped_key_value_heads(request, device, gluon_ran, group, head_dim, layout):
    """GQA: query head h reads key/value head h // group (contiguous v, and v inside an interleaved qkv
    buffer with shifted v and o offsets)."""
    from kernel_oracle.harness.problem_vision import VisionProblem, materialize_vision

    problem = VisionProblem(lengths=(300, 129, 1000, 5), H=8, H_kv=8 // group, D=head_dim, dtype="bfloat16",
                            layout=layout, v_shift=3 if layout == "v_strided" else 0, seed=_gen(request).seed())
    call = materialize_vision(problem, device)
    _check_on_gluon(call.args, call.kwargs, True, request.node.nodeid)


def _tower_call(device, gen, lens=(4096, 1000, 3000), heads=16, d=128):
    q, k, v = (_rand((sum(lens), heads, d), torch.bfloat16, device, gen) for _ in range(3))
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    md = kv.prepare_flashinfer_cudnn_metadata(starts, device, elem_per_token=heads * d)
    return (q, k, v, None, None, None), {"forward_metadata": md}


@needs_sm90
def test_twenty_calls_bit_identical(request, device, gluon_ran):
    args, kwargs = _tower_call(device, _gen(request))
    with options(**GLUON):
        first = kv.flashinfer_cudnn_attention(*args, **kwargs)
        for _ in range(19):
            assert torch.equal(kv.flashinfer_cudnn_attention(*args, **kwargs).view(torch.int16),
                               first.view(torch.int16))


_LOAD = textwrap.dedent("""
    import sys, torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    print("ready", flush=True)
    while True:
        a = (a @ a).clamp_(-1, 1)
""")


@needs_sm90
def test_bit_identical_while_another_process_loads_the_gpu(request, device, gluon_ran):
    """A background process runs a matmul loop on the same GPU (time-slicing with this one)."""
    args, kwargs = _tower_call(device, _gen(request))
    with options(**GLUON):
        first = kv.flashinfer_cudnn_attention(*args, **kwargs)
        torch.cuda.synchronize()
        load = subprocess.Popen([sys.executable, "-c", _LOAD], stdout=subprocess.PIPE, text=True)
        try:
            assert load.stdout.readline().strip() == "ready"
            for _ in range(20):
                again = kv.flashinfer_cudnn_attention(*args, **kwargs)
                assert torch.equal(again.view(torch.int16), first.view(torch.int16))
            assert load.poll() is None, "the load process ended before the calls did"
        finally:
            load.kill()
            load.wait()


@needs_sm90
def test_warm_calls_launch_directly(request, device, gluon_ran):
    kv.clear_launch_cache()
    args, kwargs = _tower_call(device, _gen(request), lens=(300, 77))
    with options(**GLUON):
        kv.flashinfer_cudnn_attention(*args, **kwargs)
        before = _direct.direct_launch_info()
        out = kv.flashinfer_cudnn_attention(*args, **kwargs)
        after = _direct.direct_launch_info()
    assert after["enabled"], after["disabled_because"]
    assert after["launches"] == before["launches"] + 1 and out.shape == args[0].shape
