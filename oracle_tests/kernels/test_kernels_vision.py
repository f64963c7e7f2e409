"""Differential and contract tests of the Triton vision attention (``kernels.vision``).

Every case draws fresh random data (never zeros), runs the kernel with the output poisoned (NaN),
and compares the covered tokens with the float64 oracle under the tolerance rule (docs/semantics.md#tolerance-rule), the
baseline being the faithful same-dtype oracle; tokens no sequence covers must still be NaN
(nothing written outside the sequences, bucket padding included).  Contract errors are the vision
OpInfo's error inputs, run on this kernel (target ``triton``) by the generic ``test_error_inputs``
of ``oracle_tests/reference/test_contracts.py``.

The cases are the vision OpInfo's sample and exhaustive inputs (``harness.opinfo``) and the layouts
beyond them (``oracle_tests/_vision_cases.py``).  Launch choices (head-dim split, exact fp32 level,
folded scale, NaN-poisoned outputs) are passed as options (``kernels.options``), never patched.

The same tests run under the Triton interpreter on the CPU (small shapes) and on a GPU; realistic
shapes are marked ``slow`` (conftest skips them without a GPU, saying why).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kernel_oracle.kernels as kernels
import kernel_oracle.kernels.vision as kv
import kernel_oracle.reference.vision_metadata as rvm
from kernel_oracle.kernels.options import OptionsError, VisionOptions, options
from kernel_oracle.kernels.vision._config import default_config, descriptor_loads_ok, exact_level, stride_alignment
from kernel_oracle.kernels.vision._kernel import attention_arguments
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
    opinfo_samples,
)
from kernel_oracle.reference.contracts import contract, expected_message
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

REPO = Path(__file__).resolve().parents[2]
HAS_CUDA = torch.cuda.is_available()

# ---------------------------------------------------------------------------------------------
# differential tests


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("prec", list(PRECISIONS))
def test_head_dims_and_dtypes(request, device, prec, head_dim):
    """Builder path (prepare_flashinfer_cudnn_metadata) over every head dim and dtype."""
    dtype, precision, baseline = PRECISIONS[prec]
    args, kwargs = head_dim_call(head_dim, dtype, device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=baseline, precision=precision, repro=request.node.nodeid)


@pytest.mark.parametrize("prec,sample", opinfo_samples(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_opinfo_samples(request, device, prec, sample):
    """The vision OpInfo's sample inputs (harness.opinfo.VISION_EDGE_CASES) in every precision."""
    _, precision, baseline = PRECISIONS[prec]
    call = sample.call(device)
    check_against_oracle(call.args, call.kwargs, baseline_mode=baseline, precision=precision,
                         repro=request.node.nodeid)


@pytest.mark.slow
@pytest.mark.parametrize("prec,sample", opinfo_samples(exhaustive=True),
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_opinfo_exhaustive_inputs(request, device, prec, sample):
    """The vision OpInfo's exhaustive inputs (realistic shapes) in every precision."""
    _, precision, baseline = PRECISIONS[prec]
    call = sample.call(device)
    check_against_oracle(call.args, call.kwargs, baseline_mode=baseline, precision=precision,
                         repro=request.node.nodeid)


@pytest.mark.parametrize("prec", ["bf16", "fp16"])
@pytest.mark.parametrize("case", EDGE_CASES_BEYOND_OPINFO, ids=repr)
def test_edge_layouts(request, device, case, prec):
    dtype, precision, baseline = PRECISIONS[prec]
    args, kwargs = build(case, dtype, device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=baseline, precision=precision, repro=request.node.nodeid)


@pytest.mark.slow
@pytest.mark.parametrize("prec", ["bf16", "fp16"])
@pytest.mark.parametrize("case", SLOW_CASES, ids=repr)
def test_realistic_shapes(request, device, case, prec):
    dtype, precision, baseline = PRECISIONS[prec]
    args, kwargs = build(case, dtype, device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=baseline, precision=precision, repro=request.node.nodeid)


@pytest.mark.slow
@pytest.mark.parametrize("prec", ["fp32", "fp32-tf32"])
def test_realistic_fp32(request, device, prec):
    dtype, precision, baseline = PRECISIONS[prec]
    case = Case("fp32 ragged", (1500, 64, 2900), heads=8, head_dim=80)
    args, kwargs = build(case, dtype, device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=baseline, precision=precision, repro=request.node.nodeid)


# fp32 with large logits: finding F0001 of the first main-job campaign (4 tokens, one head, D=16,
# logits x30, 4-D input, kwargs path with a device max_seqlen) missed the rule when the kernel
# scaled the scores before subtracting the row max (see Note [Online softmax] in the kernel).
FP32_LARGE_LOGIT_CASES = (
    Case("F0001: 4 tokens, D=16, logits x30, 4-D, kwargs", (4,), heads=1, head_dim=16, logit_scale=30.0,
         layout="4d", path="kwargs", max_seqlen="tensor_device"),
    Case("logits x30, ragged", (24, 10, 3), logit_scale=30.0),
    Case("logits x30, scale 0.37", (19, 9), logit_scale=30.0, scale=0.37),
    Case("logits x30, negative scale -0.37", (19, 9), logit_scale=30.0, scale=-0.37),
)


@pytest.mark.parametrize("prec", ["fp32", "fp32-tf32"])
@pytest.mark.parametrize("case", FP32_LARGE_LOGIT_CASES, ids=repr)
def test_fp32_large_logits(request, device, case, prec):
    dtype, precision, baseline = PRECISIONS[prec]
    args, kwargs = build(case, dtype, device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=baseline, precision=precision, repro=request.node.nodeid)


@pytest.mark.parametrize("head_dim,split", [(64, False), (80, False), (128, False), (72, True), (80, True)])
@pytest.mark.parametrize("prec", ["bf16", "fp16", "fp32", "fp32-tf32"])
def test_descriptor_loads(request, device, prec, head_dim, split):
    """Note [Descriptor loads]: keys and values read through tensor descriptors are right against the float64
    oracle and give bit for bit what pointer loads give (zeros past the sequence and the head dim either
    way), on sequences shorter than a key block, of whole key blocks and with a ragged last one; with one
    padded tile per head dim and with a split head dim (Note [Head-dim split]: two descriptors each)."""
    dtype = PRECISIONS[prec][0]
    chosen = default_config(head_dim, head_dim, torch.tensor([], dtype=dtype).element_size(), tma=True)
    stages = max(chosen.num_stages, 2) if split else chosen.num_stages  # one stage never splits
    plain, tma = (kv.KernelConfig(*chosen[:3], stages, tma=flag) for flag in (False, True))
    bn = plain.block_n
    case = Case("tma", (bn // 2 + 1, bn, 2 * bn + 3, 3 * bn, 0, 4 * bn - 1), head_dim=head_dim)
    with options(vision={"split_head_dim": split}):
        launched = _right_and_same_bits(request, device, case, prec, tested=tma, twin=plain)
    assert launched["TMA"] and (launched["DB"] > 0) == split


def _right_and_same_bits(request, device, case, prec, tested, twin) -> dict:
    """Run ``case`` under the configs ``tested`` and ``twin`` (NaN-poisoned outputs, fresh data): ``tested``'s
    output must pass the float64 oracle's rule and equal ``twin``'s bit for bit over the covered tokens.
    Returns the kernel arguments ``tested`` launched with (what the test then checks it asked for)."""
    dtype, precision, baseline = PRECISIONS[prec]
    args, kwargs = build(case, dtype, device, _gen(request))
    outs = []
    for config in (tested, twin):
        with options(poison_outputs=True):
            launch = kv.plan_attention(*args, **kwargs, fp32_precision=precision, config=config)
            outs.append(launch.run())
    q3, k3, v3 = launch.plan.q, launch.plan.k, launch.plan.v
    launched = attention_arguments(q3, k3, v3, outs[0], launch.table, 1, 1.0, tested, precision, launch.options)[1]
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=baseline)
    res = compare(outs[0], ref.value, ref.defined.to(device), family="vision", baseline=faithful.baselines,
                  out_dtype=dtype, repro=request.node.nodeid)
    assert res.ok, res.message
    covered = ref.defined.to(device)
    assert torch.equal(outs[0][covered].view(torch.uint8), outs[1][covered].view(torch.uint8))
    return launched


@pytest.mark.parametrize("split,tma,expected_db", [(None, True, 16), (None, False, 0), (False, True, 0),
                                                   (True, False, 16)])
def test_head_dim_split_follows_descriptor_loads(split, tma, expected_db):
    """By default a launch splits a head dim of 80 exactly when it reads through descriptors (Note [Descriptor
    loads]); ``VisionOptions.split_head_dim`` overrides either way; one stage never splits."""
    x = torch.empty(4, 2, 80, dtype=torch.bfloat16)
    table = torch.zeros(1, 5, dtype=torch.int32)
    opts = VisionOptions(split_head_dim=split)
    args = attention_arguments(x, x, x, x, table, 1, 1.0, kv.KernelConfig(16, 16, 1, 2, tma=tma), "ieee", opts)[1]
    assert (args["TMA"], args["DA"], args["DB"]) == (tma, 64 if expected_db else 128, expected_db)
    one_stage = attention_arguments(x, x, x, x, table, 1, 1.0, kv.KernelConfig(16, 16, 1, 1, tma=tma), "ieee",
                                    opts)[1]
    assert one_stage["DB"] == 0


def test_descriptor_loads_only_where_the_layout_allows():
    """A non-unit innermost stride, 8-byte strides or an unaligned pointer keep pointer loads."""
    x = torch.empty(4, 2, 64, dtype=torch.bfloat16)
    assert descriptor_loads_ok(x, x, x, x, 8)
    assert not descriptor_loads_ok(x, x, x, x, 4)
    wide = torch.empty(4, 2, 64, 2, dtype=torch.bfloat16)[..., 0]  # innermost stride 2
    assert not descriptor_loads_ok(x, x, wide, x, 8)
    flat = torch.empty(4 * 2 * 64 + 1, dtype=torch.bfloat16)
    shifted = flat[1:].view(4, 2, 64)  # 2 bytes past a 16-byte boundary
    assert not descriptor_loads_ok(x, shifted, x, x, 8)


def test_comparison_catches_a_wrong_token(request, device):
    """The differential check can fail: one covered token off by a little is reported."""
    args, kwargs = build(Case("small", (9, 14)), torch.float16, device, _gen(request))
    out = kv.flashinfer_cudnn_attention(*args, **kwargs)
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    out[12, 1, 3] += 0.05
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines)
    assert not res.ok and "(12, 1, 3)" in res.message


def test_launch_reuse_across_layers(request, device):
    """One plan, new activations of the same layout: no re-resolution, same contract."""
    gen = _gen(request)
    args, kwargs = build(Case("reuse", (11, 6, 20), layout="qkv_v"), torch.bfloat16, device, gen)
    launch = kv.plan_attention(*args, **kwargs)
    q2 = _rand(args[0].shape, torch.bfloat16, device, gen)
    k2 = _rand(args[1].shape, torch.bfloat16, device, gen)
    v2 = _rand((args[2].shape[0], 3) + tuple(args[2].shape[1:]), torch.bfloat16, device, gen)[:, 2]
    with options(poison_outputs=True):
        out = launch.run(q2, k2, v2)
    ref = flashinfer_cudnn_oracle(q2, k2, v2, *args[3:], **kwargs)
    faithful = flashinfer_cudnn_oracle(q2, k2, v2, *args[3:], **kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines)
    assert res.ok, res.message
    with pytest.raises(ValueError, match="plan again with plan_attention"):
        launch.run(q2.contiguous(), k2, v2.contiguous())


def test_non_strict_skips_out_of_range_sequences(request, device):
    """strict=False accepts what upstream accepts; a sequence whose v range runs past v has
    unspecified output and must not crash or touch other sequences' outputs."""
    args, kwargs = build(Case("v out of range", (8, 12)), torch.float16, device, _gen(request))
    md = kwargs["forward_metadata"]
    packed = md.packed_indptrs.clone()
    B1 = md.sequence_lengths.numel() + 1
    packed[B1 + 1] = (args[2].shape[0] - 4) * args[2].stride(0)  # sequence 1's v starts 4 tokens before the end
    md = kv.VisionAttentionMetadata(packed_indptrs=packed, sequence_lengths=md.sequence_lengths,
                                    flashinfer_max_seqlen=md.flashinfer_max_seqlen)
    res = check_against_oracle(args, {"forward_metadata": md}, baseline_mode=True, strict=False)
    assert res.total == 8 * 2 * 64  # only sequence 0 is defined


def test_non_strict_max_seqlen_too_small(request, device):
    args, kwargs = build(Case("short max_seqlen", (8, 12), path="kwargs"), torch.float16, device, _gen(request))
    kwargs["max_seqlen"] = 10
    res = check_against_oracle(args, kwargs, baseline_mode=True, strict=False)
    assert res.total == 8 * 2 * 64  # sequence 1 (12 > 10 tokens) is unspecified upstream


# ---------------------------------------------------------------------------------------------
# small unit checks


# head dim -> (power-of-two tile, tail tile) with the split on; off (the default) pads to one tile
HEAD_DIM_SPLITS = {8: (16, 0), 64: (64, 0), 72: (64, 16), 80: (64, 16), 96: (64, 32), 112: (128, 0),
                   128: (128, 0), 160: (128, 32), 256: (256, 0)}


@pytest.mark.parametrize("d", list(HEAD_DIM_SPLITS))
def test_head_dim_split(d):
    assert kv.head_dim_split(d, split=True) == HEAD_DIM_SPLITS[d]
    assert kv.head_dim_split(d, split=False) == (max(16, 1 << (d - 1).bit_length()), 0)


@pytest.mark.parametrize("head_dim", [72, 80, 96])
def test_split_head_dim(request, device, head_dim):
    """The split head dim asked for by the option, whatever the loads (on the H200: descriptors, the default;
    triton 3.6's split-PV miscompile is worked around, docs/upstream/triton_split_pv.md)."""
    args, kwargs = build(Case("split", (7, 20), head_dim=head_dim, v_dim=head_dim), torch.bfloat16, device,
                         _gen(request))
    with options(vision={"split_head_dim": True}):
        check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid)


@pytest.mark.parametrize("heads,head_dim,align", [(16, 72, 8), (16, 80, 8), (3, 36, 4), (5, 13, 1)])
def test_stride_alignment(heads, head_dim, align):
    x = torch.empty(4, heads, head_dim, dtype=torch.float16)
    assert stride_alignment(x, x, x, x) == align


def test_shared_types_and_checkout():
    assert kv.VisionAttentionMetadata is rvm.VisionAttentionMetadata
    assert kv.prepare_flashinfer_cudnn_metadata is rvm.prepare_flashinfer_cudnn_metadata
    assert Path(kernels.__file__).resolve().is_relative_to(REPO), (
        f"import kernels resolved to {kernels.__file__}, not this checkout (PyPI has an unrelated 'kernels')")


def test_unsupported_dtype_says_what_to_do(request, device):
    args, kwargs = build(Case("fp64", (4,)), torch.float64, device, _gen(request))
    with pytest.raises(TypeError, match="supports float16, bfloat16 and float32"):
        kv.flashinfer_cudnn_attention(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# the launch cache (Note [Launch cache] in kernels/vision/attention.py)


def _call(args, kwargs, **extra):
    with options(poison_outputs=True):
        return kv.flashinfer_cudnn_attention(*args, **kwargs, **extra)


@pytest.mark.parametrize("path", ["metadata", "kwargs"])
def test_cache_hit_matches_miss(request, device, path):
    """Same metadata, second call: a hit, bit-identical output; new activations (the next layer)
    under the same metadata hit too and still match the oracle."""
    gen = _gen(request)
    case = Case("cache hit", (9, 0, 21), layout="qkv_v", path=path)
    args, kwargs = build(case, torch.bfloat16, device, gen)
    kv.clear_launch_cache()
    first = _call(args, kwargs)
    assert kv.launch_cache_info()["misses"] == 1 and kv.launch_cache_info()["size"] == 1
    second = _call(args, kwargs)
    info = kv.launch_cache_info()
    assert (info["hits"], info["misses"], info["size"]) == (1, 1, 1)
    torch.testing.assert_close(second, first, rtol=0, atol=0, equal_nan=True)
    # the next layer: new q, k, v (v again a strided view) under the same metadata objects
    q2 = _rand(args[0].shape, torch.bfloat16, device, gen)
    k2 = _rand(args[1].shape, torch.bfloat16, device, gen)
    v2 = _rand((args[2].shape[0], 3) + tuple(args[2].shape[1:]), torch.bfloat16, device, gen)[:, 2]
    layer2 = (q2, k2, v2) + tuple(args[3:])
    check_against_oracle(layer2, kwargs, baseline_mode=True, repro=request.node.nodeid)
    assert kv.launch_cache_info()["hits"] == 2
    # a different softmax_scale, strictness or precision is a different launch
    _call(args, kwargs, strict=False)
    assert kv.launch_cache_info()["misses"] == 2


def test_cache_holds_no_activations(request, device):
    args, kwargs = build(Case("no activations", (5, 12)), torch.float16, device, _gen(request))
    kv.clear_launch_cache()
    _call(args, kwargs)
    entry = next(iter(kv.attention._LAUNCH_CACHE.values()))
    assert all(t.device.type == "meta" for t in (entry.launch.plan.q, entry.launch.plan.k, entry.launch.plan.v))


@pytest.mark.parametrize("path", ["metadata", "kwargs"])
def test_cache_in_place_edit_is_honoured(request, device, path):
    """An in-place edit of the metadata after a call (version counter bump) misses the cache: the
    next call computes what the new metadata says."""
    args, kwargs = build(Case("in-place edit", (8, 20), path=path), torch.float16, device, _gen(request))
    md = kwargs.get("forward_metadata")
    seq = md.sequence_lengths if md is not None else kwargs["sequence_lengths"]
    packed = md.packed_indptrs if md is not None else args[3]
    kv.clear_launch_cache()
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid)
    seq[0] -= 1  # sequence 0 now covers 7 tokens: token 7 must stay unwritten (NaN)
    res = check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid)
    assert res.total == (7 + 20) * 2 * 64
    assert kv.launch_cache_info()["misses"] == 2
    packed[0] += 128  # sequence 0's q/k start moves one token (2 heads * 64 = 128 elements)
    res = check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid)
    assert kv.launch_cache_info()["misses"] == 3
    packed[1 + len(seq)] += 128  # and its v start (a view of the same buffer: one version counter)
    packed.view(3, -1)[2, 0] += 128  # and its output start, through a view
    res = check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid)
    assert res.total == (7 + 20) * 2 * 64
    assert kv.launch_cache_info()["misses"] == 4


def _assert_contract(err_id, fields, args, kwargs):
    row = contract(err_id)
    with pytest.raises(Exception) as info:
        kv.flashinfer_cudnn_attention(*args, **kwargs)
    assert type(info.value) is row.exc_type, f"{err_id}: raised {type(info.value).__name__}: {info.value}"
    assert str(info.value) == expected_message(err_id, **fields)


def test_cache_strict_validation_fires_again(request, device):
    """Metadata made malformed after a successful (cached) call is rejected with the exact
    contract message: by a new int max_seqlen, an in-place edited tensor max_seqlen, a negative
    length written in place, and an in-place edit that pushes a sequence past q (upstream)."""
    args, kwargs = build(Case("strict again", (6, 9), path="kwargs", max_seqlen="tensor_device"), torch.float16,
                         device, _gen(request))
    kv.clear_launch_cache()
    _call(args, kwargs)
    _call(args, kwargs)
    assert kv.launch_cache_info()["hits"] == 1
    # a new int max_seqlen below the longest sequence
    _assert_contract("vision.strict.max_seqlen_too_small", {"value": 5, "index": 1, "longest": 9},
                     args, {**kwargs, "max_seqlen": 5})
    # the tensor max_seqlen edited in place
    kwargs["max_seqlen"].fill_(4)
    _assert_contract("vision.strict.max_seqlen_too_small", {"value": 4, "index": 1, "longest": 9}, args, kwargs)
    kwargs["max_seqlen"].fill_(9)
    _call(args, kwargs)  # valid again
    # a negative length written in place
    kwargs["sequence_lengths"][2] = -3
    _assert_contract("vision.strict.negative_length", {"index": 2, "value": -3}, args, kwargs)
    kwargs["sequence_lengths"][2] = 0
    _call(args, kwargs)
    # an upstream error after an in-place edit: sequence 1 now runs past q
    args[3][1] += 2 * 128
    _assert_contract("vision.offset_out_of_bounds", {}, args, kwargs)
    # strict=False still accepts the upstream-valid malformations, and caches them apart
    kwargs["max_seqlen"].fill_(4)
    args[3][1] -= 2 * 128
    _call(args, kwargs, strict=False)
    _assert_contract("vision.strict.max_seqlen_too_small", {"value": 4, "index": 1, "longest": 9}, args, kwargs)


def test_cache_is_bounded(request, device, monkeypatch):
    """At most LAUNCH_CACHE_SIZE launches (64 by default), least recently used dropped first."""
    assert kv.attention.LAUNCH_CACHE_SIZE == 64
    monkeypatch.setattr(kv.attention, "LAUNCH_CACHE_SIZE", 3)
    gen = _gen(request)
    kv.clear_launch_cache()
    calls = [build(Case("bounded", (n,), path="kwargs"), torch.float16, device, gen) for n in (3, 4, 5, 6)]
    for args, kwargs in calls[:3]:
        _call(args, kwargs)
    _call(*calls[0])  # a hit: calls[0] becomes the most recently used
    assert kv.launch_cache_info()["hits"] == 1
    _call(*calls[3])  # evicts calls[1], the least recently used
    info = kv.launch_cache_info()
    assert (info["size"], info["maxsize"]) == (3, 3)
    _call(*calls[0])
    assert kv.launch_cache_info()["hits"] == 2
    _call(*calls[1])
    assert kv.launch_cache_info()["misses"] == 5 and kv.launch_cache_info()["size"] == 3


@pytest.mark.parametrize("size", [0, 1])
def test_repeating_the_last_launch_respects_the_bound(request, device, monkeypatch, size):
    """The last-launch shortcut (a repeat skips hashing) is only taken while that launch is cached:
    with room for none, every call is a miss; with room for one, alternating calls always miss."""
    monkeypatch.setattr(kv.attention, "LAUNCH_CACHE_SIZE", size)
    gen = _gen(request)
    kv.clear_launch_cache()
    a, b = (build(Case("last", (n,), path="kwargs"), torch.float16, device, gen) for n in (5, 7))
    for call in (a, a, b, a, b, b):
        _call(*call)
    info = kv.launch_cache_info()
    expected = (0, 6) if size == 0 else (2, 4)  # (hits, misses): a a | b | a | b b
    assert (info["hits"], info["misses"], info["size"]) == expected + (size,)
    _call(*b)
    assert kv.launch_cache_info()["hits"] == expected[0] + (size == 1)


@pytest.mark.skipif(not HAS_CUDA, reason="host synchronisation is a CUDA notion")
def test_cache_hit_does_not_sync(request, device):
    args, kwargs = build(Case("no sync", (100, 37), path="kwargs", max_seqlen="tensor_device"), torch.bfloat16,
                         device, _gen(request))
    kv.clear_launch_cache()
    kv.flashinfer_cudnn_attention(*args, **kwargs)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        kv.flashinfer_cudnn_attention(*args, **kwargs)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert kv.launch_cache_info()["hits"] == 1


def test_exact_level_follows_its_option():
    """fp32 exact products default to float64 logits (Note [Exact fp32]); the level applies to them only."""
    assert VisionOptions().fp32_exact == 2
    assert [exact_level(torch.float32, "ieee", level) for level in (0, 1, 2)] == [0, 1, 2]
    assert exact_level(torch.float32, "tf32", 2) == 0 and exact_level(torch.bfloat16, "ieee", 2) == 0
    x = torch.zeros(4, 2, 16)
    table = torch.zeros(1, 5, dtype=torch.int32)
    for level in (0, 1, 2):
        args = attention_arguments(x, x, x, x, table, 1, 0.5, default_config(16, 16, 4), "ieee",
                                   VisionOptions(fp32_exact=level))[1]
        assert args["EXACT"] == level


# (options, the exact message of the OptionsError): each vision option's refusal names the field, the value
# and the valid values; a bool is not an int and an int is not a bool
BAD_VISION_OPTIONS = [
    ({"fp32_exact": 3}, "VisionOptions: fp32_exact=3 is invalid; the only valid values are 0, 1, 2"),
    ({"fp32_exact": True}, "VisionOptions: fp32_exact=True is invalid; the only valid values are 0, 1, 2"),
    ({"fp32_exact": "2"}, "VisionOptions: fp32_exact='2' is invalid; the only valid values are 0, 1, 2"),
    ({"split_head_dim": 1}, "VisionOptions: split_head_dim=1 is invalid; the only valid values are None, False, True"),
    ({"split_head_dim": "on"},
     "VisionOptions: split_head_dim='on' is invalid; the only valid values are None, False, True"),
    ({"fold_scale": 0}, "VisionOptions: expected fold_scale to be True or False but got fold_scale=0"),
    ({"direct_launch": None}, "VisionOptions: expected direct_launch to be True or False but got direct_launch=None"),
]


@pytest.mark.parametrize("fields,message", BAD_VISION_OPTIONS, ids=lambda x: x if isinstance(x, str) else str(x))
def test_vision_options_refuse_bad_values(fields, message):
    with pytest.raises(OptionsError) as direct:
        VisionOptions(**fields)
    assert str(direct.value) == message
    with pytest.raises(OptionsError) as through_the_block:  # the same check through options(vision={...})
        with options(vision=fields):
            pytest.fail("options(...) accepted a bad value")
    assert str(through_the_block.value) == message


def test_vision_options_are_frozen_and_hashable():
    """They key the launch cache: equal values hash alike, and nothing changes one after it is built."""
    a, b = VisionOptions(fp32_exact=1, fold_scale=False), VisionOptions(fp32_exact=1, fold_scale=False)
    assert a == b and hash(a) == hash(b) and a != VisionOptions()
    with pytest.raises(AttributeError):
        a.fp32_exact = 2


def _logit_probe(device):
    """Logits 0.25 * (1e8 + 1) and 0.25 * (1e8 - 1): fp32 rounds both products to 1e8 (even weights, 0.5),
    float64 keeps them (weight sigmoid(0.5) = 0.62246).  (args, kwargs) of the call; output column 0 of
    either token is the weight of key 0."""
    q = torch.zeros(2, 1, 16, device=device)
    q[:, 0, 0], q[:, 0, 1] = 1e4, 1.0
    k = q.clone()
    k[1, 0, 1] = -1.0
    v = torch.zeros(2, 1, 16, device=device)
    v[0, 0, 0] = 1.0
    md = kv.prepare_flashinfer_cudnn_metadata([0, 2], device, elem_per_token=16)
    return (q, k, v, None, None, None), {"forward_metadata": md}


EXACT_WEIGHT, FP32_WEIGHT = 0.6224593312018546, 0.5


@pytest.mark.parametrize("level,expected", [(2, EXACT_WEIGHT), (0, FP32_WEIGHT)])
def test_exact_level_2_keeps_logits_that_fp32_rounds_away(level, expected):
    """What Note [Exact fp32] relies on: float64 logits keep what fp32 logits round away."""
    args, kwargs = _logit_probe("cuda" if HAS_CUDA else "cpu")
    with options(vision={"fp32_exact": level}):
        out = kv.flashinfer_cudnn_attention(*args, **kwargs)
    assert out[:, 0, 0].double().cpu().tolist() == pytest.approx([expected] * 2, abs=1e-6)


def test_a_cached_launch_is_not_reused_under_other_options():
    """The same metadata objects under other vision options are another launch (Note [Launch cache]): the
    second call below would give the first one's weights if the cache ignored the options; back under the
    first options, the first launch is a hit again."""
    args, kwargs = _logit_probe("cuda" if HAS_CUDA else "cpu")
    kv.clear_launch_cache()
    weights = []
    for level in (2, 0, 2, 0):
        with options(vision={"fp32_exact": level}):
            weights.append(kv.flashinfer_cudnn_attention(*args, **kwargs)[:, 0, 0].double().cpu().tolist())
    assert weights == [pytest.approx([w] * 2, abs=1e-6) for w in (EXACT_WEIGHT, FP32_WEIGHT) * 2]
    info = kv.launch_cache_info()
    assert (info["misses"], info["hits"], info["size"]) == (2, 2, 2)
    with options(vision={"fold_scale": False}):  # any other field is another launch too
        kv.flashinfer_cudnn_attention(*args, **kwargs)
    assert kv.launch_cache_info()["misses"] == 3


def test_the_scale_is_folded_only_where_the_max_commutes_with_it():
    """Note [Folded scale]: a non-negative scale with EXACT 0 (fp16/bf16, TF32) folds; a negative scale
    (the max would be a min), the exact fp32 levels and ``fold_scale=False`` keep the scaled logits."""
    def fold(dtype, scale, precision="ieee", fold_scale=True):
        x = torch.zeros(4, 2, 16, dtype=dtype)
        table = torch.zeros(1, 5, dtype=torch.int32)
        return attention_arguments(x, x, x, x, table, 1, scale, default_config(16, 16, x.element_size()),
                                   precision, VisionOptions(fold_scale=fold_scale))[1]["FOLD_SCALE"]

    assert fold(torch.bfloat16, 0.125) and fold(torch.float16, 0.0) and fold(torch.float32, 0.125, "tf32")
    assert not fold(torch.bfloat16, -0.125) and not fold(torch.float32, 0.125, "ieee")
    assert not fold(torch.bfloat16, 0.125, fold_scale=False)


# ---------------------------------------------------------------------------------------------
# the target of our kernels (fuzz.targets.triton): its precision option and its poison hook


def test_the_target_passes_its_vision_precision():
    from kernel_oracle.fuzz.targets.triton import kernels_target

    ieee, tf32 = kernels_target("cpu"), kernels_target("cpu", vision_fp32="tf32")
    assert ieee.entries["vision"] is kv.flashinfer_cudnn_attention
    assert tf32.entries["vision"].keywords == {"fp32_precision": "tf32"}
    with pytest.raises(ValueError) as err:
        kernels_target("cpu", vision_fp32="fp16")
    assert str(err.value) == "vision_fp32='fp16' is invalid; the only valid values are 'ieee', 'tf32'"


def test_the_target_poisons_through_the_options_of_the_package_it_loaded(request, device):
    """The poison hook applies ``poison_outputs`` in the kernels package the target loaded: ours for target
    ``triton`` (uncovered tokens come back NaN), a mutant's own copy of ``kernels.options`` for a mutant (the
    copy's kernels read that module's options, not ours)."""
    import importlib

    from kernel_oracle.fuzz.targets.mutants import build_mutant
    from kernel_oracle.fuzz.targets.triton import kernels_target
    from kernel_oracle.kernels.options import current_options

    args, kwargs = build(Case("gaps", (6, 13), layout="gaps"), torch.float16, device, _gen(request))
    target = kernels_target(device)
    with target.poison("vision"):
        assert current_options().poison_outputs
        check_against_oracle(args, kwargs, baseline_mode=True, target=target)  # uncovered tokens must be NaN
    pkg = build_mutant("vision_dropped_key_tail")
    theirs = importlib.import_module(f"{pkg}.options")
    assert theirs is not importlib.import_module("kernel_oracle.kernels.options")
    with kernels_target(device, package=pkg).poison("vision"):
        assert theirs.current_options().poison_outputs and not current_options().poison_outputs
    assert not theirs.current_options().poison_outputs
