"""Differential tests against the real engine: FlashInfer's cuDNN prefill behind SGLang's wrapper
semantics (target ``flashinfer-cudnn``, :mod:`fuzz.flashinfer_cudnn`).

The same cases as our kernel's tests (oracle_tests/_vision_cases.py), run on the engine with a
NaN-poisoned output buffer against the float64 oracle under the tolerance rule, plus a three-way
run (oracle, our Triton kernel, the engine) on the benchmark shapes and the upstream error
contracts.  Without a GPU, FlashInfer or the cuDNN frontend the target is unavailable: the one
CPU test checks that it says so, and the GPU tests skip with the target's own reason.
"""

from __future__ import annotations

import pytest
import torch

from fuzz.targets import resolve_target
from reference.contracts import contract, expected_message
from reference.tolerance import compare
from reference.vision import flashinfer_cudnn_oracle

from ._vision_cases import (
    EDGE_CASES,
    ERROR_INPUTS,
    HEAD_DIMS,
    PRECISIONS,
    SLOW_CASES,
    Case,
    _gen,
    _rand,
    build,
    check_against_oracle,
)

HALF = ("bf16", "fp16")  # cuDNN SDPA takes no fp32


@pytest.fixture
def engine(device):
    target = resolve_target("flashinfer-cudnn", device)
    if not target.available:
        pytest.skip(f"flashinfer-cudnn is unavailable: {target.reason}")
    return target


def test_unavailable_target_says_why():
    """On a CPU device the target is unavailable and names the reason (never an import crash)."""
    target = resolve_target("flashinfer-cudnn", "cpu")
    assert not target.available
    assert "CUDA" in target.reason and "device=cpu" in target.reason
    assert target.to_record()["reason"] == target.reason


def test_engine_status_is_stated(engine):
    """The report line names the versions and whether SGLang's return_lse=True call runs."""
    status = engine.to_record()["reason"]
    assert "FlashInfer" in status and "cuDNN backend" in status
    assert "return_lse=True" in status
    if "refuses" in status:
        assert "return_lse=False instead" in status


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("prec", HALF)
def test_head_dims(request, device, engine, prec, head_dim):
    import kernels.vision as kv

    dtype = PRECISIONS[prec][0]
    gen = _gen(request)
    lens, H = [5, 17, 33], 2
    q, k, v = (_rand((sum(lens), H, head_dim), dtype, device, gen) for _ in range(3))
    md = kv.prepare_flashinfer_cudnn_metadata([0, 5, 22, 55], device, elem_per_token=H * head_dim)
    check_against_oracle((q, k, v, None, None, None), {"forward_metadata": md}, baseline_mode=True,
                         repro=request.node.nodeid, target=engine)


@pytest.mark.parametrize("prec", HALF)
@pytest.mark.parametrize("case", EDGE_CASES, ids=repr)
def test_edge_layouts(request, device, engine, case, prec):
    args, kwargs = build(case, PRECISIONS[prec][0], device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid, target=engine)


@pytest.mark.slow
@pytest.mark.parametrize("prec", HALF)
@pytest.mark.parametrize("case", SLOW_CASES, ids=repr)
def test_realistic_shapes(request, device, engine, case, prec):
    args, kwargs = build(case, PRECISIONS[prec][0], device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid, target=engine)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES[:4], ids=repr)
def test_three_way_on_benchmark_shapes(request, device, engine, case, record_property):
    """The oracle, our Triton kernel and the engine on the same bf16 inputs: both implementations
    within the rule, and their distance from each other recorded."""
    import kernels.vision as kv

    args, kwargs = build(case, torch.bfloat16, device, _gen(request))
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    outs = {"triton": kv.flashinfer_cudnn_attention(*args, **kwargs), "flashinfer-cudnn": engine.entry("vision")(*args, **kwargs)}
    for name, out in outs.items():
        res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines,
                      out_dtype=torch.bfloat16, what=name)
        record_property(f"{name}_err", res.err)
        assert res.ok, res.message
    defined = ref.defined.to(device)
    gap = (outs["triton"].float() - outs["flashinfer-cudnn"].float()).abs()[defined].max().item()
    record_property("triton_vs_engine_max_abs", gap)


@pytest.mark.parametrize("err", [e for e in ERROR_INPUTS if contract(e.contract_id).origin == "upstream"], ids=repr)
def test_upstream_error_contracts(request, device, engine, err):
    """SGLang's wrapper raises the upstream errors before the engine runs: exact type and text."""
    args, kwargs = err.mutate(*build(err.case, torch.float16, device, _gen(request)))
    row = contract(err.contract_id)
    with pytest.raises(Exception) as info:
        engine.entry("vision")(*args, **kwargs)
    assert type(info.value) is row.exc_type, f"{err.contract_id}: raised {type(info.value).__name__}: {info.value}"
    assert str(info.value) == expected_message(err.contract_id, **err.fields)


def test_unwritten_tokens_stay_poisoned(request, device, engine):
    """Gaps between sequences are never written by the engine (checked by check_against_oracle)."""
    args, kwargs = build(Case("gaps", (6, 13, 40), layout="gaps"), torch.bfloat16, device, _gen(request))
    res = check_against_oracle(args, kwargs, baseline_mode=True, target=engine)
    assert res.total == (6 + 13 + 40) * 2 * 64
