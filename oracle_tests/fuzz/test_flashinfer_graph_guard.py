"""The flashinfer-cudnn target's graph-cache guard against a stand-in engine, on any device.

FlashInfer caches one cuDNN graph per key that omits strides (the known issue); the target must
know exactly which graphs the engine holds.  The stand-in engine below keeps such a cache the way
``cudnn.graph_cache`` does (a dict in a decorator's closure) and can fail *after* building, as a
malformed call does on the GPU: the guard must still remember that build (the H200's F0003).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kernel_oracle.fuzz.targets import flashinfer_cudnn as fc
from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata


def _graph_cache(key_fn):
    """As cudnn.graph_cache: the cache dict and the key function live in the wrapper's closure."""
    def deco(func):
        cache = {}

        def wrapper(*args, **kwargs):
            key = key_fn(*args, **kwargs)
            if key not in cache:
                cache[key] = func(*args, **kwargs)
            return cache[key]
        return wrapper
    return deco


def _jit(func):
    """An outer wrapper without ``__wrapped__`` (as cudnn.jit may be): the walk must look in its closure."""
    def outer(*args, **kwargs):
        return func(*args, **kwargs)
    return outer


def _key(q, k, v, **_):
    return (q.shape[1], q.shape[2], q.dtype)  # like FlashInfer's: no strides


class _Engine:
    """A fake ``cudnn_batch_prefill_with_kv_cache`` whose graph cache is :data:`build`'s closure dict."""

    def __init__(self, fail_after_build: bool = False):
        self.fail_after_build = fail_after_build
        self.build = _jit(_graph_cache(_key)(lambda q, k, v: object()))

    def __call__(self, q, k, v, scale, workspace, *, return_lse, out=None, **call):
        self.build(q, k, v)
        if self.fail_after_build:
            raise RuntimeError("cudnn execute failed (malformed offsets)")
        return (torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=q.dtype),)


@pytest.fixture
def fake_flashinfer(monkeypatch):
    engine = _Engine()
    prefill = types.ModuleType("flashinfer.cudnn.prefill")
    prefill._build_prefill_graph = engine.build
    pkg = types.ModuleType("flashinfer.cudnn")
    pkg.prefill = prefill
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.cudnn", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.cudnn.prefill", prefill)
    return engine


def _call(target, strided_v: bool):
    H, D, T = 2, 16, 20
    q, k = (torch.randn(T, H, D) for _ in range(2))
    v = torch.randn(T, 3, H, D)[:, 2] if strided_v else torch.randn(T, H, D)
    md = prepare_flashinfer_cudnn_metadata([0, 7, 20], "cpu", elem_per_token=H * D,
                                           v_elem_per_token=v.stride(0))
    return target.flashinfer_cudnn_attention(q, k, v, None, None, None, forward_metadata=md)


def test_the_engine_cache_is_found_through_its_wrappers(fake_flashinfer):
    assert fc.engine_graph_cache() is not None
    fake_flashinfer.build(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.zeros(1, 2, 3))
    assert list(fc.engine_graph_cache()) == [(2, 3, torch.float32)]


def test_a_build_whose_call_failed_still_guards_the_key(fake_flashinfer):
    """A call that fails after the engine cached its graph: the next call with the same key and another
    v layout raises GraphCacheHazard instead of replaying that graph."""
    target = fc.FlashInferCudnn(torch.device("cpu"), fake_flashinfer, graph_cache=fc.engine_graph_cache())
    target.return_lse = False
    fake_flashinfer.fail_after_build = True
    with pytest.raises(RuntimeError, match="cudnn execute failed"):
        _call(target, strided_v=True)
    fake_flashinfer.fail_after_build = False
    with pytest.raises(fc.GraphCacheHazard, match=r"v strides \(96, 16, 1\) then \(32, 16, 1\)"):
        _call(target, strided_v=False)


def test_an_evicted_graph_is_no_hazard(fake_flashinfer):
    """When the engine no longer holds the key's graph, the next call builds a fresh one: no raise."""
    target = fc.FlashInferCudnn(torch.device("cpu"), fake_flashinfer, graph_cache=fc.engine_graph_cache())
    target.return_lse = False
    _call(target, strided_v=True)
    fc.engine_graph_cache().clear()
    _call(target, strided_v=False)
    _call(target, strided_v=False)
    with pytest.raises(fc.GraphCacheHazard):
        _call(target, strided_v=True)


def test_without_the_engine_cache_a_failed_call_is_remembered_too():
    """The fallback mirror (no cache in view) remembers every first call of a key, failed or not."""
    engine = _Engine(fail_after_build=True)
    target = fc.FlashInferCudnn(torch.device("cpu"), engine)
    target.return_lse = False
    with pytest.raises(RuntimeError):
        _call(target, strided_v=True)
    engine.fail_after_build = False
    with pytest.raises(fc.GraphCacheHazard):
        _call(target, strided_v=False)


def test_another_engine_is_not_guarded_by_flashinfers_cache(fake_flashinfer):
    """A stand-in engine on a machine where FlashInfer is installed keeps its own graphs: its target
    mirrors them and is not misled by FlashInfer's (empty) cache -- the H200 suite's failure of
    test_wrapper_guard_names_the_layout_change when the target looked FlashInfer's cache up itself."""
    other = _Engine()
    target = fc.FlashInferCudnn(torch.device("cpu"), other)
    target.return_lse = False
    _call(target, strided_v=True)
    assert fc.engine_graph_cache() == {}  # FlashInfer's cache never saw that build
    with pytest.raises(fc.GraphCacheHazard):
        _call(target, strided_v=False)
