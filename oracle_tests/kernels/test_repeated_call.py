"""The repeated call (Note [Repeated call] in kernels/vision/_repeat.py): which calls it serves, which it
leaves to the keyed path of the launch cache, and that what it serves is right.

The shortcut needs a direct launcher, which exists only for compiled kernels; under the interpreter a
stand-in (:func:`_stand_in`) launches the planned kernel on the given tensors' storage, as the direct
launcher does on a GPU, so the same tests run on both (on a GPU the real launcher is used)."""

from __future__ import annotations

import gc
import types
import weakref

import pytest
import torch

import kernel_oracle.kernels.vision as kv
from kernel_oracle.kernels.options import options
from kernel_oracle.kernels.vision import _direct, _kernel, _repeat, attention
from kernel_oracle.kernels.vision._kernel import launch_attention
from kernel_oracle.reference.strict import is_strict, strict_validation
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import flashinfer_cudnn_oracle
from oracle_tests._vision_cases import Case, _gen, _rand, build


def _stand_in(launch, calls: list, accept: bool = True):
    """A direct launcher for the interpreter: the planned kernel on q, k, v and out as given (4-D flattened)."""
    def direct(q, k, v, out):
        calls.append(out)
        if not accept:
            return False
        flat = [x.flatten(0, 1) if x.dim() == 4 else x for x in (q, k, v, out)]
        launch_attention(*flat, launch.table, launch.num_blocks, launch.plan.scale, launch.config, launch.precision,
                         launch.options)
        return True
    return direct


def _call(args, kwargs, **changes):
    """The entry point with NaN-poisoned outputs, under the options in force changed by ``changes``."""
    with options(poison_outputs=True, **changes):
        return kv.flashinfer_cudnn_attention(*args, **kwargs)


def _warm(args, kwargs, calls: list, accept: bool = True):
    """A miss, then a hit that launches directly (the stand-in where there is no real launcher): remembered."""
    kv.clear_launch_cache()
    _call(args, kwargs)
    (entry,) = attention._LAUNCH_CACHE.values()
    if not entry.launch._direct[0]:
        entry.launch._direct[0] = _stand_in(entry.launch, calls, accept)
    _call(args, kwargs)
    assert attention._REPEAT is not None


@pytest.fixture
def keyed(monkeypatch):
    """Counts the calls that build a cache key (the keyed path)."""
    seen = []
    real = attention._cache_key

    def counting(*a, **kw):
        seen.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(attention, "_cache_key", counting)
    return seen


def _check(out, args, kwargs):
    """``out`` against the float64 oracle over the defined region; tokens of no sequence still NaN."""
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines,
                  out_dtype=args[0].dtype)
    assert res.ok, res.message
    row = out.shape[-2] * out.shape[-1]
    uncovered = ~ref.defined.reshape(-1, row).any(-1).cpu()
    assert torch.isnan(out.reshape(-1, row).cpu()[uncovered]).all(), "a token of no sequence was written"


def _same_layout(x: torch.Tensor, gen) -> torch.Tensor:
    """New values in a tensor of ``x``'s shape, strides, dtype and device (the next layer's activations)."""
    fresh = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return fresh.copy_(_rand(x.shape, x.dtype, x.device, gen))


@pytest.mark.parametrize("case", [Case("repeat", (9, 21)), Case("repeat, kwargs", (9, 21), path="kwargs"),
                                  Case("repeat, 4-D", (10, 7, 15), layout="4d"),
                                  Case("repeat, gaps", (6, 13), layout="gaps"),
                                  Case("repeat, tensor max_seqlen", (8, 3), path="kwargs", max_seqlen="tensor")],
                         ids=lambda c: c.name)
def test_the_next_layer_takes_no_key_and_is_right(request, device, case, keyed):
    gen = _gen(request)
    args, kwargs = build(case, torch.bfloat16, device, gen)
    calls: list = []
    _warm(args, kwargs, calls)
    hits = kv.launch_cache_info()["hits"]
    before = len(keyed)
    layer2 = tuple(_same_layout(x, gen) for x in args[:3]) + tuple(args[3:])
    out = _call(layer2, kwargs)
    assert len(keyed) == before, "the repeated call built a cache key"
    assert kv.launch_cache_info()["hits"] == hits + 1
    assert out.shape[:-1] == args[0].shape[:-1] and out.dtype == args[0].dtype
    _check(out, layer2, kwargs)  # the poisoned allocation: uncovered tokens are NaN


def _edits(args, kwargs, gen):
    """(name, call args, call kwargs, option changes) that each must leave the shortcut for the keyed path."""
    q, k, v = args[:3]
    md = kwargs["forward_metadata"]
    longer = tuple(_rand((x.shape[0] + 2,) + tuple(x.shape[1:]), x.dtype, x.device, gen) for x in (q, k, v))
    other_md = kv.VisionAttentionMetadata(packed_indptrs=md.packed_indptrs.clone(),
                                          sequence_lengths=md.sequence_lengths.clone(),
                                          flashinfer_max_seqlen=md.flashinfer_max_seqlen)
    halves = tuple(x.half() for x in (q, k, v))
    return [
        ("softmax_scale", args, {**kwargs, "softmax_scale": 0.25}, {}),
        ("strict keyword", args, {**kwargs, "strict": True}, {}),
        ("precision keyword", args, {**kwargs, "fp32_precision": "ieee"}, {}),
        ("another metadata object", args, {"forward_metadata": other_md}, {}),
        ("two more tokens", longer + tuple(args[3:]), kwargs, {}),
        ("another dtype", halves + tuple(args[3:]), kwargs, {}),
        ("other vision options", args, kwargs, {"vision": {"fold_scale": False}}),
    ]


EDITS = ["softmax_scale", "strict keyword", "precision keyword", "another metadata object", "two more tokens",
         "another dtype", "other vision options"]


@pytest.mark.parametrize("which", range(len(EDITS)), ids=EDITS)
def test_a_different_call_takes_the_keyed_path(request, device, which, keyed):
    gen = _gen(request)
    args, kwargs = build(Case("differs", (5, 9)), torch.bfloat16, device, gen)
    calls: list = []
    _warm(args, kwargs, calls)
    name, a2, k2, changes = _edits(args, kwargs, gen)[which]
    assert name == EDITS[which]
    before = len(keyed)
    out = _call(a2, k2, **changes)
    assert len(keyed) == before + 1, f"{name}: served without a key"
    _check(out, a2, k2)


def test_equal_options_built_apart_still_repeat(request, device, keyed):
    """Two ``options(...)`` blocks with the same values hold distinct but equal option objects: the
    remembered call compares them by value after identity, so the second block's calls still repeat."""
    gen = _gen(request)
    args, kwargs = build(Case("equal options", (5, 9)), torch.bfloat16, device, gen)
    with options(vision={"fold_scale": False}) as first:
        _warm(args, kwargs, [])
    with options(vision={"fold_scale": False}) as again:
        assert again.vision is not first.vision and again.vision == first.vision
        before, hits = len(keyed), kv.launch_cache_info()["hits"]
        out = _call(args, kwargs)
    assert len(keyed) == before and kv.launch_cache_info()["hits"] == hits + 1
    _check(out, args, kwargs)


@pytest.mark.parametrize("poison", [True, False])
def test_one_options_block_repeats_under_its_own_options(request, device, keyed, poison):
    """Calls inside one ``options(...)`` block share one options object: the record matches it by identity and
    allocates as that block says (NaN-filled where it poisons; the uncovered tokens then stay NaN)."""
    gen = _gen(request)
    args, kwargs = build(Case("one block", (6, 13), layout="gaps"), torch.bfloat16, device, gen)
    calls: list = []
    kv.clear_launch_cache()
    with options(poison_outputs=poison, vision={"fold_scale": False}) as block:
        f = kv.flashinfer_cudnn_attention
        f(*args, **kwargs)
        (entry,) = attention._LAUNCH_CACHE.values()
        if not entry.launch._direct[0]:
            entry.launch._direct[0] = _stand_in(entry.launch, calls)
        f(*args, **kwargs)  # the keyed repeat: remembered under this block's options object
        assert attention._REPEAT is not None
        layer2 = tuple(_same_layout(x, gen) for x in args[:3]) + tuple(args[3:])
        before = len(keyed)
        out = f(*layer2, **kwargs)
        assert len(keyed) == before, "the repeated call built a cache key"
        assert entry.launch.options is block.vision
    if poison:
        _check(out, layer2, kwargs)
    else:  # not poisoned: only the defined tokens can be judged
        ref = flashinfer_cudnn_oracle(*layer2, **kwargs)
        faithful = flashinfer_cudnn_oracle(*layer2, **kwargs, faithful=True)
        res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines,
                      out_dtype=layer2[0].dtype)
        assert res.ok, res.message


@pytest.mark.parametrize("path", ["metadata", "kwargs"])
def test_an_in_place_edit_or_a_new_max_seqlen_takes_the_keyed_path(request, device, path, keyed):
    gen = _gen(request)
    args, kwargs = build(Case("edited", (8, 20), path=path, max_seqlen="tensor"), torch.float16, device, gen)
    md = kwargs.get("forward_metadata")
    seq = md.sequence_lengths if md is not None else kwargs["sequence_lengths"]
    _warm(args, kwargs, [])
    seq[0] -= 1  # in place: the version counter moves; token 7 is now of no sequence
    before = len(keyed)
    _check(_call(args, kwargs), args, kwargs)
    assert len(keyed) == before + 1
    if path == "kwargs":  # a new max_seqlen (a new tensor object of the same value, then an int)
        _warm(args, kwargs, [])
        for mx in (kwargs["max_seqlen"].clone(), 20):
            before = len(keyed)
            _check(_call(args, {**kwargs, "max_seqlen": mx}), args, {**kwargs, "max_seqlen": mx})
            assert len(keyed) == before + 1


def test_the_ambient_strict_setting_cache_clearing_and_a_declined_launch(request, device, keyed):
    gen = _gen(request)
    args, kwargs = build(Case("ambient", (5, 9)), torch.bfloat16, device, gen)
    _warm(args, kwargs, [])
    with strict_validation(not is_strict()):
        before = len(keyed)
        _call(args, kwargs)
        assert len(keyed) == before + 1
    _warm(args, kwargs, [])
    kv.clear_launch_cache()
    assert attention._REPEAT is None
    if device == "cpu":  # a stand-in that declines: the call is served by the keyed path, still right
        calls: list = []
        _warm(args, kwargs, calls, accept=False)
        before, n_calls = len(keyed), len(calls)
        out = _call(args, kwargs)
        assert len(keyed) == before + 1 and len(calls) > n_calls
        _check(out, args, kwargs)


@pytest.mark.parametrize("size", [0, 1])
def test_nothing_is_remembered_that_the_cache_does_not_hold(request, device, monkeypatch, size):
    monkeypatch.setattr(attention, "LAUNCH_CACHE_SIZE", size)
    gen = _gen(request)
    args, kwargs = build(Case("bound", (5, 9)), torch.bfloat16, device, gen)
    kv.clear_launch_cache()
    _call(args, kwargs)
    if size == 0:
        assert attention._REPEAT is None and kv.launch_cache_info()["size"] == 0
    else:
        (entry,) = attention._LAUNCH_CACHE.values()
        if not entry.launch._direct[0]:
            entry.launch._direct[0] = _stand_in(entry.launch, [])
        _call(args, kwargs)
        assert attention._REPEAT is not None
        other, okw = build(Case("bound 2", (4, 4)), torch.bfloat16, device, gen)
        _call(other, okw)  # evicts the first launch: nothing of it may stay remembered
        assert kv.launch_cache_info()["size"] == 1
        assert attention._REPEAT is None or attention._REPEAT.md is okw["forward_metadata"]


def test_a_remembered_scale_is_compared(request, device, keyed):
    gen = _gen(request)
    args, kwargs = build(Case("scaled", (5, 9), scale=0.5), torch.bfloat16, device, gen)
    _warm(args, kwargs, [])
    before = len(keyed)
    _check(_call(args, kwargs), args, kwargs)
    assert len(keyed) == before, "the same scale should repeat without a key"
    other = {**kwargs, "softmax_scale": 0.25}
    _check(_call(args, other), args, other)
    assert len(keyed) == before + 1


# ---------------------------------------------------------------------------------------------
# how the layouts are checked: torch's C tensor check, or Python reads (Note [Repeated call])

def _layout_variants(t: torch.Tensor, position: int) -> dict:
    """Tensors like ``t`` but for one layout fact each.  q, k, v (positions 0-2) also by dtype, device and
    rank; the metadata tensors (3, 4) by shape and strides (they are the same objects, by identity)."""
    longer = t.new_empty((t.shape[0] + 1,) + tuple(t.shape[1:]))
    strided = t.new_empty((2 * t.shape[0],) + tuple(t.shape[1:]))[::2]  # same shape, twice the first stride
    assert strided.shape == t.shape and strided.stride() != t.stride()
    out = {"shape": longer, "strides": strided}
    if position < 3:
        out.update(dtype=t.to(torch.float16), device=torch.empty_like(t, device="meta"), rank=t.unsqueeze(0))
    return out


@pytest.mark.parametrize("reader", ["torch", "python"])
def test_the_layout_check_refuses_each_difference(monkeypatch, reader):
    if reader == "python":
        monkeypatch.setattr(_repeat, "_TENSOR_GUARDS", None)
    else:
        assert _repeat._TENSOR_GUARDS is not None, "torch's tensor check failed its probe: layouts are read in Python"
    tensors = [torch.randn(6, 2, 8, dtype=torch.bfloat16) for _ in range(3)]
    tensors += [torch.tensor([3, 3], dtype=torch.int32), torch.arange(9, dtype=torch.int32)]
    check = _repeat._layout_check(*tensors)
    assert check(*[torch.empty_like(t) for t in tensors])  # new tensors, same layouts
    for i, t in enumerate(tensors):
        for what, other in _layout_variants(t, i).items():
            call = list(tensors)
            call[i] = other
            assert not check(*call), f"tensor {i}: another {what} was accepted"


@pytest.mark.parametrize("fake", ["accepts anything", "raises"])
def test_a_torch_check_that_fails_its_probe_is_not_used(monkeypatch, fake):
    """The probe refuses a check that would let another layout through, and one that raises (its
    signature moved): the layouts are then read in Python."""
    from torch._C._dynamo import guards

    class Lax:
        def __init__(self, *tensors, **kwargs):
            if fake == "raises":
                raise TypeError("missing dynamic_dims_sizes=...")

        def check(self, *tensors):
            return True

    monkeypatch.setattr(guards, "TensorGuards", Lax)
    assert _repeat._probe_tensor_guards() is None


def test_torch_check_is_stricter_and_needs_distinct_tensors():
    """What torch's check also compares (requires_grad, the dispatch keys) only sends a call to the keyed
    path; tensors passed twice are read in Python, where the C check would refuse every call."""
    if _repeat._TENSOR_GUARDS is None:
        pytest.skip("torch's tensor check is not usable with this torch: layouts are read in Python")
    q, k, v = (torch.randn(6, 2, 8) for _ in range(3))
    sl, pk = torch.tensor([3, 3], dtype=torch.int32), torch.arange(9, dtype=torch.int32)
    check = _repeat._layout_check(q, k, v, sl, pk)
    assert check(q, k, v, sl, pk) and not check(q.clone().requires_grad_(), k, v, sl, pk)
    shared = _repeat._layout_check(q, q, v, sl, pk)  # self-attention on one tensor
    assert shared(k, k, v, sl, pk) and not shared(k, k, v.half(), sl, pk)


@pytest.mark.parametrize("reader", ["torch", "python"])
def test_one_tensor_as_q_and_k_repeats_too(request, device, keyed, monkeypatch, reader):
    if reader == "python":
        monkeypatch.setattr(_repeat, "_TENSOR_GUARDS", None)
    gen = _gen(request)
    args, kwargs = build(Case("q is k", (9, 21)), torch.bfloat16, device, gen)
    args = (args[0], args[0]) + tuple(args[2:])
    _warm(args, kwargs, [])
    before = len(keyed)
    qk = _same_layout(args[0], gen)
    layer2 = (qk, qk, _same_layout(args[2], gen)) + tuple(args[3:])
    out = _call(layer2, kwargs)
    assert len(keyed) == before, "the repeated call built a cache key"
    _check(out, layer2, kwargs)


def test_the_record_holds_no_activation(request, device):
    """Neither the remembered call's q, k, v nor a later call's stay alive through the record."""
    gen = _gen(request)
    args, kwargs = build(Case("held", (5, 9)), torch.bfloat16, device, gen)
    _warm(args, kwargs, [])  # the second call is remembered: its q, k, v are args[:3]
    rest = tuple(args[3:])
    layer2 = tuple(_same_layout(x, gen) for x in args[:3])
    refs = [weakref.ref(x) for x in layer2 + tuple(args[:3])]
    out = _call(layer2 + rest, kwargs)
    del layer2, args
    gc.collect()
    assert attention._REPEAT is not None and out is not None
    assert [r() is None for r in refs] == [True] * 6, "the record keeps activations alive"


def test_a_remembered_direct_launcher_gets_the_new_addresses(request, device, keyed):
    """With a :class:`DirectLaunch` (its C launch a recording stand-in), the repeated call launches through its
    launch function: the grid, the stream, then the new q, k, v and output addresses, once, counted."""
    gen = _gen(request)
    args, kwargs = build(Case("addresses", (9, 21)), torch.bfloat16, device, gen)
    kv.clear_launch_cache()
    first = _call(args, kwargs)
    (entry,) = attention._LAUNCH_CACHE.values()
    launch, calls = entry.launch, []
    kernel = types.SimpleNamespace(_init_handles=lambda: None, run=lambda *a: calls.append(a), function="fn",
                                   packed_metadata="meta")
    grid, kernel_args, _ = _kernel.attention_arguments(args[0], args[1], args[2], first, launch.table,
                                                      launch.num_blocks, launch.plan.scale, launch.config,
                                                      launch.precision, launch.options)
    hooks = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    direct = _direct.DirectLaunch(kernel, grid, kernel_args, _kernel._vision_attn_fwd.arg_names, 4,
                                  runtime=(lambda: 0, lambda dev: 1000 + dev, hooks))
    launch._direct[0] = direct.launch  # as VisionLaunch keeps it
    _call(args, kwargs)  # the keyed repeat: remembered
    assert attention._REPEAT is not None
    layer2 = tuple(_same_layout(x, gen) for x in args[:3]) + tuple(args[3:])
    before, hits, launches = len(keyed), kv.launch_cache_info()["hits"], _direct.direct_launch_info()["launches"]
    out = _call(layer2, kwargs)
    assert len(keyed) == before and kv.launch_cache_info()["hits"] == hits + 1
    assert _direct.direct_launch_info()["launches"] == launches + 1
    # JITFunction.run's order: the grid (num_blocks, H, 1), the stream, the function, the packed metadata,
    # launch metadata and hooks (None), then the arguments
    assert len(grid) == 2 and calls[-1][:9] == (*grid, 1, 1000, "fn", "meta", None, None, None)
    assert calls[-1][9:13] == tuple(x.data_ptr() for x in (*layer2[:3], out))
