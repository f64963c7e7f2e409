"""The vision kernel's direct launcher (Note [Direct launch] in ``kernels/vision/_direct.py``).

On the CPU: the launcher's own logic against a fake compiled kernel (what it passes, when it
declines, how the bit-for-bit check disables it).  On a GPU: the warm call really takes it, its
output equals the JIT launch's bit for bit, it declines (and stays right) on an unaligned pointer,
and it launches on the current stream (a captured CUDA graph replays it on new data).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import kernel_oracle.kernels.vision as kv
from kernel_oracle.kernels.options import options
from kernel_oracle.kernels.vision import _direct
from kernel_oracle.kernels.vision._kernel import _vision_attn_fwd, attention_arguments
from oracle_tests._vision_cases import Case, _gen, _rand, build, check_against_oracle

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _fresh_state():
    _direct._reset_for_tests()
    yield
    _direct._reset_for_tests()


class _Chain:
    """Triton's HookChain: an object with a list of calls (empty when no hook is installed)."""

    def __init__(self):
        self.calls = []


class _Hooks:
    def __init__(self):
        self.launch_enter_hook, self.launch_exit_hook = _Chain(), None


class _FakeKernel:
    """Stands in for Triton's CompiledKernel: records what its launcher receives."""

    def __init__(self):
        self.calls, self.function, self.packed_metadata, self.handles = [], object(), ("meta",), 0

    def _init_handles(self):
        self.handles += 1

    def run(self, *args):
        self.calls.append(args)


class _Ptr:
    """A tensor's stand-in with a chosen address (data_ptr is all the launcher reads)."""

    def __init__(self, addr):
        self.addr = addr

    def data_ptr(self):
        return self.addr


class CudaLauncher:
    """Stands in for triton 3.6's launcher (the class name is what the raw path checks): its compiled
    C ``launch`` (named so; the tensor-descriptor wrapper is ``inner``) and no scratch memory."""

    global_scratch_size = profile_scratch_size = 0
    num_ctas, launch_cooperative_grid, launch_pdl = 1, 0, 1

    def __init__(self, calls):
        def launch(*args):
            calls.append(args)
        self.launch = launch

    def __call__(self, *args):
        raise AssertionError("the raw path must not go through __call__")


def _fake(device=[0], hooks=None, x=4096, version=None, n_ptr=2):  # noqa: B006 - a mutable cell the test flips
    kernel = _FakeKernel()
    table = torch.zeros(3, dtype=torch.int32)
    # signature order X, Y, (Z, W,) T, n, C with the re-pointed tensors first (4: the vision kernel's unrolled path)
    pointers = ["X", "Y", "Z", "W"][:n_ptr]
    args = {"X": _Ptr(x), "Y": _Ptr(8192), "Z": _Ptr(12288), "W": _Ptr(16384), "T": table, "n": 7, "C": 128}
    runtime = (lambda: device[0], lambda dev: 1000 + dev, hooks or _Hooks())
    if version is not None:
        raw_calls = []
        kernel.run, kernel.raw_calls = CudaLauncher(raw_calls), raw_calls
    return kernel, _direct.DirectLaunch(kernel, (5,), {n: args[n] for n in pointers + ["T", "n", "C"]},
                                        pointers + ["T", "n", "C"], n_ptr, runtime=runtime,
                                        triton_version=version), table


def test_passes_new_addresses_then_the_fixed_arguments_in_signature_order():
    kernel, direct, table = _fake()
    assert kernel.handles == 1
    assert direct(_Ptr(1 << 20), _Ptr(3 << 20)) is True
    (call,) = kernel.calls
    assert call == (5, 1, 1, 1000, kernel.function, kernel.packed_metadata, None, None, None,
                    1 << 20, 3 << 20, table.data_ptr(), 7, 128)
    assert _direct.direct_launch_info()["launches"] == 1


def test_four_pointers_in_order_and_any_unaligned_one_declines():
    """The unrolled branch for the vision kernel's q, k, v, out: order kept, each pointer's alignment checked."""
    kernel = _FakeKernel()
    args = {"Q": _Ptr(4096), "K": _Ptr(8192), "V": _Ptr(12288), "O": _Ptr(16384), "n": 7}
    runtime = (lambda: 0, lambda dev: 1000 + dev, _Hooks())
    direct = _direct.DirectLaunch(kernel, (3, 2), args, ["Q", "K", "V", "O", "n"], 4, runtime=runtime)
    new = [_Ptr(a << 20) for a in (1, 2, 3, 4)]
    assert direct(*new) is True
    assert kernel.calls == [(3, 2, 1, 1000, kernel.function, kernel.packed_metadata, None, None, None,
                             1 << 20, 2 << 20, 3 << 20, 4 << 20, 7)]
    for i in range(4):
        moved = list(new)
        moved[i] = _Ptr((5 << 20) + 8)
        assert direct(*moved) is False
    assert len(kernel.calls) == 1 and _direct.direct_launch_info()["declined"] == 4


@pytest.mark.parametrize("version,raw", [("3.6.0", True), ("3.7.0", False)])
def test_calls_triton_3_6_compiled_launch_directly(version, raw):
    """On triton 3.6 the C launch gets grid, stream, function, cooperative, pdl, two scratch Nones,
    metadata, launch metadata and hooks (None), then the arguments; other versions are not guessed."""
    kernel, direct, table = _fake(version=version)
    assert direct.raw is raw
    if not raw:
        return
    assert direct(_Ptr(1 << 20), _Ptr(3 << 20)) is True
    (call,) = kernel.raw_calls
    assert call == (5, 1, 1, 1000, kernel.function, 0, 1, None, None, kernel.packed_metadata, None, None, None,
                    1 << 20, 3 << 20, table.data_ptr(), 7, 128)


def test_an_unaligned_first_launch_gets_no_direct_launcher():
    with pytest.raises(_direct.Unaligned):
        _fake(x=4096 + 2)
    kernel = _FakeKernel()
    assert _direct.verified(kernel, lambda: _fake(x=4096 + 2)[1], lambda d: pytest.fail("no check")) is None
    assert _direct.direct_launch_info()["enabled"] is True


def test_internals_that_moved_disable_quietly_for_the_caller():
    """make() itself failing (an attribute Triton renamed) disables with a warning, never raises."""
    def make():
        raise AttributeError("'CompiledKernel' object has no attribute 'packed_metadata'")

    with pytest.warns(RuntimeWarning, match="packed_metadata"):
        assert _direct.verified(_FakeKernel(), make, lambda d: pytest.fail("no check")) is None
    assert _direct.direct_launch_info()["enabled"] is False


@pytest.mark.parametrize("n_ptr", [2, 4], ids=["any count", "four, unrolled"])
@pytest.mark.parametrize("why", ["unaligned", "device", "hook", "hook chain"])
def test_declines_where_the_jit_could_decide_differently(why, n_ptr):
    """Both launch functions (four pointers written out, any other count) decline alike; the warm call
    calls ``launch`` itself, the same function ``__call__`` calls."""
    device, hooks = [0], _Hooks()
    kernel, direct, _ = _fake(device, hooks, n_ptr=n_ptr)
    ptrs = [_Ptr(a << 20) for a in (1, 3, 5, 7)][:n_ptr]
    assert direct.launch(*ptrs) is True and len(kernel.calls) == 1  # the same call, launched
    if why == "unaligned":
        ptrs[-1] = _Ptr(ptrs[-1].addr + 2)  # a bf16 view one element in: the compiled kernel assumed 16-byte alignment
    elif why == "device":
        device[0] = 1
    elif why == "hook":
        hooks.launch_exit_hook = print
    else:
        hooks.launch_enter_hook.calls.append(print)
    assert direct(*ptrs) is False and direct.launch(*ptrs) is False and len(kernel.calls) == 1
    assert _direct.direct_launch_info()["declined"] == 2 and _direct.direct_launch_info()["launches"] == 1


def test_verified_checks_once_per_kernel():
    kernel, direct, _ = _fake()
    out = torch.arange(6.0)
    runs = []

    def run_both(d):
        runs.append(d)
        return out, out.clone()

    assert _direct.verified(kernel, lambda: direct, run_both) is direct
    assert _direct.verified(kernel, lambda: direct, run_both) is direct
    assert len(runs) == 1 and _direct.direct_launch_info()["verified"] == 1


@pytest.mark.parametrize("failure", ["bits", "raises"])
def test_a_failed_check_disables_direct_launches(failure):
    kernel, direct, _ = _fake()
    out = torch.tensor([1.0, float("nan")])

    def run_both(d):
        if failure == "raises":
            raise TypeError("launcher() takes 9 positional arguments")
        other = out.clone()
        other[0] = torch.nextafter(other[0], torch.tensor(2.0))  # one ulp: only a bitwise check sees it
        return out, other

    with pytest.warns(RuntimeWarning, match="direct kernel launches disabled"):
        assert _direct.verified(kernel, lambda: direct, run_both) is None
    info = _direct.direct_launch_info()
    assert info["enabled"] is False and info["disabled_because"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _direct.verified(kernel, lambda: direct, lambda d: (out, out)) is None  # stays off, quietly


def test_a_declined_check_does_not_disable():
    kernel, direct, _ = _fake()
    assert _direct.verified(kernel, lambda: direct, lambda d: (torch.zeros(1), None)) is None
    assert _direct.direct_launch_info()["enabled"] is True


def test_nan_payloads_compare_by_bits():
    a = torch.tensor([float("nan"), 1.0])
    assert _direct._bitwise_equal(a, a.clone())
    assert not _direct._bitwise_equal(a, torch.tensor([float("nan"), -1.0]))


def test_interpreter_launches_have_no_direct_path(request, device):
    """Under the interpreter there is no compiled kernel: the launch stays on the JIT path."""
    if device != "cpu":
        pytest.skip("the interpreter runs only on the CPU")
    args, kwargs = build(Case("interp", (5, 9)), torch.float16, device, _gen(request))
    launch = kv.plan_attention(*args, **kwargs)
    launch.run()
    assert launch._direct[0] is False and _direct.direct_launch_info()["launches"] == 0


def test_a_launch_keeps_the_launch_function_and_calls_it(request, device, monkeypatch):
    """VisionLaunch keeps its direct launcher's launch function (the warm call calls it with no layer
    between) and relaunches through it: the grid, the stream, then q, k, v and the new output's addresses."""
    args, kwargs = build(Case("kept", (5, 9)), torch.float16, device, _gen(request))
    launch = kv.plan_attention(*args, **kwargs)
    built = []

    def fake_launcher(self, kernel, q3, k3, v3, out):
        fake = _FakeKernel()
        grid, kernel_args, _ = attention_arguments(q3, k3, v3, out, self.table, self.num_blocks, self.plan.scale,
                                                   self.config, self.precision, self.options)
        built.append((fake, _direct.DirectLaunch(fake, grid, kernel_args, _vision_attn_fwd.arg_names, 4,
                                                 runtime=(lambda: 0, lambda dev: 1000 + dev, _Hooks()))))
        return built[-1][1]

    monkeypatch.setattr(kv.VisionLaunch, "_direct_launcher", fake_launcher)
    launch.run()  # the JIT launch (the interpreter here), then the launcher is built
    [(fake, direct)] = built
    assert launch._direct[0] is direct.launch and fake.calls == []
    out = launch.run()
    (call,) = fake.calls
    assert call[3] == 1000 and call[9:13] == tuple(x.data_ptr() for x in (*args[:3], out))


# ---------------------------------------------------------------------------------------------
# on the GPU

cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="direct launches exist only for compiled kernels (CUDA)")


@cuda_only
@pytest.mark.parametrize("prec", [torch.bfloat16, torch.float32])
def test_warm_call_is_direct_and_bit_identical_to_the_jit(request, prec):
    gen = _gen(request)
    args, kwargs = build(Case("direct", (33, 0, 70, 5), layout="qkv_v"), prec, "cuda", gen)
    kv.clear_launch_cache()
    with options(poison_outputs=True):
        kv.flashinfer_cudnn_attention(*args, **kwargs)  # miss: JIT launch, then the check
        assert _direct.direct_launch_info()["verified"] == 1
        q2 = _rand(args[0].shape, prec, "cuda", gen)
        k2 = _rand(args[1].shape, prec, "cuda", gen)
        v2 = _rand((args[2].shape[0], 3) + tuple(args[2].shape[1:]), prec, "cuda", gen)[:, 2]
        layer2 = (q2, k2, v2) + tuple(args[3:])
        before = _direct.direct_launch_info()["launches"]  # the check made one
        direct_out = kv.flashinfer_cudnn_attention(*layer2, **kwargs)
        assert _direct.direct_launch_info()["launches"] == before + 1
        # direct launches off: another launch (the cache keys the options), a miss then a hit, both JIT
        with options(vision={"direct_launch": False}):
            kv.flashinfer_cudnn_attention(*layer2, **kwargs)
            jit_out = kv.flashinfer_cudnn_attention(*layer2, **kwargs)
    assert _direct.direct_launch_info()["launches"] == before + 1 and kv.launch_cache_info()["misses"] == 2
    assert _direct._bitwise_equal(direct_out, jit_out)
    check_against_oracle(layer2, kwargs, baseline_mode=True, repro=request.node.nodeid)


@cuda_only
def test_unaligned_input_declines_and_stays_right(request):
    gen = _gen(request)
    args, kwargs = build(Case("unaligned", (40, 17)), torch.bfloat16, "cuda", gen)
    launch = kv.plan_attention(*args, **kwargs)
    launch.run()
    assert launch._direct[0]
    q = args[0]
    flat = _rand((q.numel() + 1,), torch.bfloat16, "cuda", gen)
    q2 = flat[1:].view(q.shape)  # same shape and strides, 2 bytes off a 16-byte boundary
    assert q2.data_ptr() % 16 and q2.stride() == q.stride()
    with options(poison_outputs=True):
        out = launch.run(q2, args[1], args[2])
    assert _direct.direct_launch_info()["declined"] == 1
    from kernel_oracle.reference.tolerance import compare
    from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

    layer = (q2,) + tuple(args[1:])
    ref = flashinfer_cudnn_oracle(*layer, **kwargs)
    faithful = flashinfer_cudnn_oracle(*layer, **kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines)
    assert res.ok, res.message


@cuda_only
def test_direct_launch_is_captured_on_the_current_stream(request):
    """A graph captured around a warm call replays the kernel on new data: the launch went to the
    capturing stream (on any other stream it would not be in the graph)."""
    gen = _gen(request)
    args, kwargs = build(Case("graph", (64, 31, 9)), torch.bfloat16, "cuda", gen)
    launch = kv.plan_attention(*args, **kwargs)
    launch.run()
    assert launch._direct[0]
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph):
            out = launch.run()
    assert _direct.direct_launch_info()["launches"] >= 1
    for x in args[:3]:
        x.copy_(_rand(x.shape, x.dtype, "cuda", gen))
    graph.replay()
    torch.cuda.synchronize()
    from kernel_oracle.reference.tolerance import compare
    from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines)
    assert res.ok, res.message
