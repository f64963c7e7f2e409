"""Our vision kernel on SGLang's whole call: GQA/MQA, windows and sinks on every code path of the key
loop (pointer loads, descriptor loads, a split head dim; each exact-fp32 level; the folded scale), and
the launch cache keyed on the window and the sinks (Note [GQA, window and sinks] in
kernels.vision._kernel; Note [Launch cache] in kernels.vision.attention).  Small shapes: the
interpreter runs these on the CPU in a few seconds; on a GPU host they run on the GPU (``DEVICE``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kernel_oracle.kernels.vision as kv
from kernel_oracle.harness.problem_vision import VisionProblem, materialize_vision
from kernel_oracle.kernels.options import options
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import flashinfer_cudnn_oracle

from ..conftest import DEVICE

# GQA (4 query heads on 2), a window of keys i-5 .. i+2, sinks; sequences across 16-key blocks
CALL = VisionProblem(lengths=(21, 0, 9), H=4, H_kv=2, D=24, window=(5, 2), sinks="normal", seed=61)

# (name, problem fields, launch options, kernel config or None for the default)
PATHS = [
    ("pointer loads", {}, {}, None),
    ("MQA, large sinks, causal window", {"H_kv": 1, "sinks": "large", "window": (-1, 0)}, {}, None),
    ("descriptor loads", {}, {}, kv.KernelConfig(16, 16, 1, 2, tma=True)),
    # head dim 80 = 64 + 16 (Note [Head-dim split])
    ("descriptor loads, split head dim", {"D": 80}, {"split_head_dim": True}, kv.KernelConfig(16, 16, 1, 2, tma=True)),
    ("pointer loads, split head dim", {"D": 80}, {"split_head_dim": True}, kv.KernelConfig(16, 16, 1, 2)),
    ("fp32 exact level 0", {"dtype": "float32"}, {"fp32_exact": 0}, None),
    ("fp32 exact level 1", {"dtype": "float32"}, {"fp32_exact": 1}, None),
    ("fp32 exact level 2", {"dtype": "float32"}, {"fp32_exact": 2}, None),
    ("bf16, folded scale", {"dtype": "bfloat16"}, {"fold_scale": True}, None),
    ("fp16, scale not folded", {"dtype": "float16"}, {"fold_scale": False}, None),
]


def _check(problem: VisionProblem, vision: dict, config) -> None:
    call = materialize_vision(problem, DEVICE)
    extra = {} if config is None else {"config": config}
    with options(vision=vision, poison_outputs=True):
        out = kv.flashinfer_cudnn_attention(*call.args, **call.kwargs, **extra)
    ref = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    faithful = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
    res = compare(out, ref.value, ref.defined, family="vision", baseline=faithful.baselines, out_dtype=out.dtype)
    assert res.ok, res.message


@pytest.mark.interpreter
@pytest.mark.parametrize("name,fields,vision,config", PATHS, ids=[p[0] for p in PATHS])
def test_gqa_window_sinks_on_every_path(name, fields, vision, config):
    kv.clear_launch_cache()
    _check(dataclasses.replace(CALL, **fields), vision, config)


@pytest.mark.interpreter
def test_cache_keys_the_window_and_the_sinks():
    """The same metadata with another window, other sinks or sinks edited in place is another launch:
    a hit would replay the first call's window or read the first call's sinks."""
    call = materialize_vision(dataclasses.replace(CALL, window=None, sinks=None), DEVICE)
    args, kwargs = call.args, call.kwargs
    kv.clear_launch_cache()
    first = kv.flashinfer_cudnn_attention(*args, **kwargs)
    sinks = torch.full((4,), 2.0, device=DEVICE)
    for extra in ({"window_size": (1, 1)}, {"s_aux": sinks}):
        out = kv.flashinfer_cudnn_attention(*args, **kwargs, **extra)
        want = flashinfer_cudnn_oracle(*args, **kwargs, **extra)
        assert not torch.allclose(out, first)
        assert torch.allclose(out.double()[want.defined], want.value[want.defined], atol=1e-4)
    misses = kv.launch_cache_info()["misses"]
    sinks.fill_(-3.0)  # in place: the same object, a new version
    out = kv.flashinfer_cudnn_attention(*args, **kwargs, s_aux=sinks)
    assert kv.launch_cache_info()["misses"] == misses + 1
    want = flashinfer_cudnn_oracle(*args, **kwargs, s_aux=sinks)
    assert torch.allclose(out.double()[want.defined], want.value[want.defined], atol=1e-4)
    assert kv.flashinfer_cudnn_attention(*args, **kwargs, window_size=(-1, -1), s_aux=None).equal(first)


def test_kv_heads_that_do_not_divide_are_refused():
    """Strict or not, the kernel needs a head mapping: H_kv must divide H."""
    call = materialize_vision(VisionProblem(lengths=(5, 3), H=4), DEVICE)
    q, k, v = call.args[:3]
    with pytest.raises(ValueError, match="k has 3 heads, which do not divide q's 4"):
        kv.flashinfer_cudnn_attention(q, k[:, :3], v[:, :3], *call.args[3:], **call.kwargs, strict=False)
