"""Differential tests against the real engine: FlashInfer's cuDNN prefill behind SGLang's wrapper
semantics (target ``flashinfer-cudnn``, :mod:`kernel_oracle.fuzz.targets.flashinfer_cudnn`).

The same cases as our kernel's tests (oracle_tests/_vision_cases.py), run on the engine with a
NaN-poisoned output buffer against the float64 oracle under the tolerance rule, plus a three-way
run (oracle, our Triton kernel, the engine) on the benchmark shapes, the upstream error contracts,
and the engine bugs found so far as strict xfails (they turn into failures the day they are fixed).
Without a GPU, FlashInfer or the cuDNN frontend the target is unavailable: a CPU test checks that
it says so, and the GPU tests skip with the target's own reason.  On the CPU the wrapper itself
(arguments, return_lse fallback, graph-cache guard, poison) runs against a model of the engine's
documented call semantics (:func:`_model_engine`).

Note [One graph key per layout]: FlashInfer replays a cached cuDNN graph for any call with the same
key, whatever the strides or v's head dim (see fuzz/targets/flashinfer_cudnn.py), and the target refuses
such a call.  Cases whose layout differs from the contiguous one therefore get a head count no other
case uses (:data:`OWN_KEY_HEADS`), so each builds its own graph.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_oracle.fuzz.targets.flashinfer_cudnn import DECLINES, FlashInferCudnn, GraphCacheHazard
from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.harness.problem_vision import VisionProblem, materialize_vision
from kernel_oracle.harness.targets import Target
from kernel_oracle.reference.contracts import contract
from kernel_oracle.reference.tolerance import compare
from kernel_oracle.reference.vision import attention_block, flashinfer_cudnn_oracle
from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

from oracle_tests._vision_cases import (
    EDGE_CASES,
    HEAD_DIMS,
    PRECISIONS,
    SLOW_CASES,
    Case,
    _gen,
    build,
    check_against_oracle,
    head_dim_call,
)

HALF = ("bf16", "fp16")  # cuDNN SDPA takes no fp32

# Note [One graph key per layout]: case name -> a head count of its own
OWN_KEY_HEADS = {"v inside an interleaved qkv buffer": 5, "Dv != D (64 -> 48)": 6,
                 "qkv-strided v, reversed outputs at size": 12}


def own_key(case: Case) -> Case:
    heads = OWN_KEY_HEADS.get(case.name)
    return case if heads is None else dataclasses.replace(case, heads=heads)


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


def test_engine_declines_what_it_lacks(engine):
    """No window and no sinks in the engine: the record says so, and campaigns give it no such case."""
    assert engine.to_record()["declines"] == DECLINES and set(DECLINES) == {"window_size", "s_aux"}


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("prec", HALF)
def test_head_dims(request, device, engine, prec, head_dim):
    args, kwargs = head_dim_call(head_dim, PRECISIONS[prec][0], device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid, target=engine)


@pytest.mark.parametrize("prec", HALF)
@pytest.mark.parametrize("case", EDGE_CASES, ids=repr)
def test_edge_layouts(request, device, engine, case, prec):
    args, kwargs = build(own_key(case), PRECISIONS[prec][0], device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid, target=engine)


@pytest.mark.slow
@pytest.mark.parametrize("prec", HALF)
@pytest.mark.parametrize("case", SLOW_CASES, ids=repr)
def test_realistic_shapes(request, device, engine, case, prec):
    args, kwargs = build(own_key(case), PRECISIONS[prec][0], device, _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, repro=request.node.nodeid, target=engine)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES[:4], ids=repr)
def test_three_way_on_benchmark_shapes(request, device, engine, case, record_property):
    """The oracle, our Triton kernel and the engine on the same bf16 inputs: both implementations
    within the rule, and their distance from each other recorded."""
    import kernel_oracle.kernels.vision as kv

    args, kwargs = build(case, torch.bfloat16, device, _gen(request))
    ref = flashinfer_cudnn_oracle(*args, **kwargs)
    faithful = flashinfer_cudnn_oracle(*args, **kwargs, faithful=True)
    outs = {"triton": kv.flashinfer_cudnn_attention(*args, **kwargs),
            "flashinfer-cudnn": engine.entry("vision")(*args, **kwargs)}
    for name, out in outs.items():
        res = compare(out, ref.value, ref.defined.to(out.device), family="vision", baseline=faithful.baselines,
                      out_dtype=torch.bfloat16, what=name)
        record_property(f"{name}_err", res.err)
        assert res.ok, res.message
    defined = ref.defined.to(device)
    gap = (outs["triton"].float() - outs["flashinfer-cudnn"].float()).abs()[defined].max().item()
    record_property("triton_vs_engine_max_abs", gap)


@pytest.mark.parametrize("err", [e for e in OP_DB["vision"].error_inputs("cpu") if e.origin == "upstream"],
                         ids=lambda e: e.name)
def test_upstream_error_contracts(device, engine, err):
    """SGLang's wrapper raises the upstream errors before the engine runs: exact type and text
    (the vision OpInfo's upstream error inputs, in fp16)."""
    call, message = err.build(device, dtype="float16")
    row = contract(err.contract_id)
    with pytest.raises(Exception) as info:
        engine.entry("vision")(*call.args, **call.kwargs)
    assert type(info.value) is row.exc_type, f"{err.contract_id}: raised {type(info.value).__name__}: {info.value}"
    assert str(info.value) == message


def test_unwritten_tokens_stay_poisoned(request, device, engine):
    """Gaps between sequences are never written by the engine (checked by check_against_oracle)."""
    args, kwargs = build(Case("gaps", (6, 13, 40), layout="gaps"), torch.bfloat16, device, _gen(request))
    res = check_against_oracle(args, kwargs, baseline_mode=True, target=engine)
    assert res.total == (6 + 13 + 40) * 2 * 64


# ---------------------------------------------------------------------------------------------
# the engine's bugs, pinned down (GPU): strict xfails, so a fixed engine fails these loudly


def _as_target(eng: FlashInferCudnn, name: str) -> Target:
    """An engine binding as a Target (entry point and poison hook) for check_against_oracle."""
    return Target(name, {"vision": eng.flashinfer_cudnn_attention}, strict=False, poison=eng.poisoned_output)


def _unguarded(device) -> Target:
    from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache

    eng = FlashInferCudnn(torch.device(device), cudnn_batch_prefill_with_kv_cache, guard=False)
    return _as_target(eng, "flashinfer-cudnn (unguarded)")


def test_guard_refuses_a_stale_graph(request, device, engine):
    """Same key, contiguous v then a strided v: the target raises GraphCacheHazard, naming the change."""
    gen = _gen(request)
    first = build(Case("contiguous", (12, 21), heads=7), torch.bfloat16, device, gen)
    check_against_oracle(*first, baseline_mode=True, target=engine)
    args, kwargs = build(Case("strided v", (12, 21), heads=7, layout="qkv_v"), torch.bfloat16, device, gen)
    with pytest.raises(GraphCacheHazard, match=r"v strides \(448, 64, 1\) then \(1344, 64, 1\)"):
        engine.entry("vision")(*args, **kwargs)


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="FlashInfer 0.6.18 bug: _sdpa_prefill_key_fn omits strides, so a graph built for a "
                          "contiguous v is replayed for a strided one (wrong output)")
def test_engine_replays_a_graph_built_for_another_v_stride(request, device, engine):
    eng = _unguarded(device)
    gen = _gen(request)
    first_args, first_kwargs = build(Case("contiguous", (12, 21), heads=9), torch.bfloat16, device, gen)
    eng.entry("vision")(*first_args, **first_kwargs)
    args, kwargs = build(Case("strided v", (12, 21), heads=9, layout="qkv_v"), torch.bfloat16, device, gen)
    check_against_oracle(args, kwargs, baseline_mode=True, target=eng)


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="FlashInfer 0.6.18 bug: _sdpa_prefill_key_fn takes v's head dim from k, so a graph built "
                          "for Dv=48 is replayed for Dv=64 (wrong output)")
def test_engine_replays_a_graph_built_for_another_v_head_dim(request, device, engine):
    eng = _unguarded(device)
    gen = _gen(request)
    first_args, first_kwargs = build(Case("Dv=48", (12, 21), heads=10, v_dim=48), torch.bfloat16, device, gen)
    eng.entry("vision")(*first_args, **first_kwargs)
    args, kwargs = build(Case("Dv=64", (12, 21), heads=10), torch.bfloat16, device, gen)
    check_against_oracle(args, kwargs, baseline_mode=True, target=eng)


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="cuDNN 9.19 via FlashInfer 0.6.18: a batch with no tokens fails with "
                          "CUDNN_STATUS_BAD_PARAM_NULL_POINTER (empty tensors have null data pointers); the contract "
                          "returns an empty output")
def test_engine_on_an_empty_batch(request, device, engine):
    q = torch.empty(0, 1, 80, dtype=torch.float16, device=device)
    md = prepare_flashinfer_cudnn_metadata([0], device, elem_per_token=80)
    out = engine.entry("vision")(q, q, q, None, None, None, forward_metadata=md)
    assert out.shape == (0, 1, 80)


# ---------------------------------------------------------------------------------------------
# the wrapper on the CPU, against a model of the engine's documented call


class _Refused(RuntimeError):
    pass


def _model_engine(calls: list, refuse_lse: bool):
    """``cudnn_batch_prefill_with_kv_cache`` as FlashInfer documents it, in float64 torch: per
    batch entry b, ``actual_seq_lens_q[b]`` tokens starting ``batch_offsets_*[b]`` elements into
    each tensor (element offsets: token offset x the tensor's token stride), non-causal; k and v
    with ``num_heads_kv`` heads, each shared by ``H // num_heads_kv`` query heads."""

    def prefill(q, k, v, scale, workspace, *, max_token_per_sequence, max_sequence_kv, actual_seq_lens_q,
                actual_seq_lens_kv, causal, return_lse, batch_offsets_q, batch_offsets_k, batch_offsets_v,
                batch_offsets_o, is_cuda_graph_compatible, out=None):
        calls.append({"return_lse": return_lse, "causal": causal, "graph": is_cuda_graph_compatible,
                      "max": (max_token_per_sequence, max_sequence_kv), "lens_shape": tuple(actual_seq_lens_q.shape),
                      "offsets_shape": tuple(batch_offsets_q.shape), "k_is_q": batch_offsets_k is batch_offsets_q})
        if return_lse and refuse_lse:
            raise _Refused("For cuDNN version below 9.26.0, a non-ragged Stats output must be a packed BHSD tensor.")
        T, H, Dv = q.shape[0], q.shape[1], v.shape[2]
        if out is None:
            out = torch.zeros(T, H, Dv, dtype=q.dtype, device=q.device)
        for b in range(actual_seq_lens_q.shape[0]):
            n = int(actual_seq_lens_q.flatten()[b])
            if n == 0:
                continue
            qs = int(batch_offsets_q.flatten()[b]) // q.stride(0)
            ks = int(batch_offsets_k.flatten()[b]) // k.stride(0)
            vs = int(batch_offsets_v.flatten()[b]) // v.stride(0)
            os_ = int(batch_offsets_o.flatten()[b]) // (H * Dv)
            group = H // k.shape[1]
            kk, vv = (x.repeat_interleave(group, dim=1) for x in (k[ks:ks + n], v[vs:vs + n]))
            out[os_:os_ + n] = attention_block(q[qs:qs + n], kk, vv, scale, faithful=False,
                                               out_dtype=torch.float64).to(out.dtype)
        return out, (torch.zeros(1) if return_lse else None)

    return prefill


def _model_target(refuse_lse: bool = True):
    calls: list = []
    eng = FlashInferCudnn(torch.device("cpu"), _model_engine(calls, refuse_lse))
    eng.workspace = lambda: None  # the model needs no workspace (skip the 128 MiB allocation)
    return eng, _as_target(eng, "flashinfer-cudnn (engine model)"), calls


@pytest.mark.parametrize("case", EDGE_CASES, ids=repr)
def test_wrapper_against_the_engine_model(request, case):
    """SGLang's call as the wrapper builds it: element offsets, (B,1,1,1) lengths, non-causal,
    k sharing q's offsets, the graph-safe flag; the output lands where the contract says."""
    eng, target, calls = _model_target()
    args, kwargs = build(own_key(case), torch.float16, "cpu", _gen(request))
    check_against_oracle(args, kwargs, baseline_mode=True, target=target)
    last = calls[-1]
    assert not last["causal"] and last["graph"] and last["k_is_q"]
    assert last["lens_shape"][1:] == (1, 1, 1) and last["offsets_shape"] == (last["lens_shape"][0] + 1, 1, 1, 1)


def test_wrapper_passes_k_offsets_in_k_units_under_gqa():
    """GQA: k (T, H_kv, D) is narrower than q, so q's element offsets name other keys; the wrapper passes
    k's own (q's token times k's token stride) and matches the oracle."""
    eng, target, calls = _model_target()
    call = materialize_vision(VisionProblem(lengths=(5, 0, 9), H=4, H_kv=2, dtype="float16", seed=3), "cpu")
    check_against_oracle(call.args, call.kwargs, baseline_mode=True, target=target)
    assert not calls[-1]["k_is_q"]


def test_q_offsets_on_a_narrower_k_are_visible():
    """The defect the GQA semantics exist for: the engine handed q's element offsets for k (SGLang's
    ``batch_offsets_k = batch_offsets_q``) on a GQA batch reads the wrong keys, and the comparison says so."""
    calls: list = []
    prefill = _model_engine(calls, refuse_lse=False)
    # 20 uncovered tokens at the end keep the wrong keys (q's offsets name tokens 2x further) inside k
    call = materialize_vision(VisionProblem(lengths=(5, 0, 9), H=4, H_kv=2, dtype="float16", seed=3, extra_tokens=20),
                              "cpu")
    q, k, v, cu = call.args[:4]
    md = call.kwargs["forward_metadata"]
    B = md.sequence_lengths.numel()
    ind = md.packed_indptrs.view(3, B + 1, 1, 1, 1)
    lens = md.sequence_lengths.view(B, 1, 1, 1)
    out, _ = prefill(q, k, v, 0.25, None, max_token_per_sequence=md.flashinfer_max_seqlen,
                     max_sequence_kv=md.flashinfer_max_seqlen, actual_seq_lens_q=lens, actual_seq_lens_kv=lens,
                     causal=False, return_lse=False, batch_offsets_q=ind[0], batch_offsets_k=ind[0],
                     batch_offsets_v=ind[1], batch_offsets_o=ind[2], is_cuda_graph_compatible=True)
    ref = flashinfer_cudnn_oracle(q, k, v, cu, 1, q.shape[0], 0.25, md)
    faithful = flashinfer_cudnn_oracle(q, k, v, cu, 1, q.shape[0], 0.25, md, faithful=True)
    res = compare(out, ref.value, ref.defined, family="vision", baseline=faithful.baselines, out_dtype=q.dtype)
    assert not res.ok, "q's element offsets applied to a k of H_kv heads must not pass"


@pytest.mark.parametrize("extra,field", [({"window_size": (3, 2)}, "window_size"),
                                         ({"s_aux": torch.zeros(2, dtype=torch.bfloat16)}, "s_aux")])
def test_wrapper_refuses_what_the_engine_lacks(extra, field):
    """The engine has no window and no sinks: the target declines both (its record says why) and refuses
    them by name rather than computing without them."""
    eng, target, _ = _model_target()
    args, kwargs = build(Case("small", (5, 9)), torch.float16, "cpu", torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=f"^{field}=.* is not supported: FlashInfer's cudnn_batch_prefill"):
        target.entry("vision")(*args, **kwargs, **extra)


def test_wrapper_falls_back_from_return_lse_and_says_so():
    eng, target, calls = _model_target(refuse_lse=True)
    args, kwargs = build(Case("small", (5, 9)), torch.float16, "cpu", torch.Generator().manual_seed(1))
    target.entry("vision")(*args, **kwargs)
    target.entry("vision")(*args, **kwargs)
    assert [c["return_lse"] for c in calls] == [True, False, False]  # SGLang's call once, then the fallback
    status = eng.describe()
    assert "refuses SGLang's call with return_lse=True (_Refused: For cuDNN version below 9.26.0" in status
    assert "runs return_lse=False instead" in status


def test_wrapper_keeps_return_lse_when_the_engine_accepts_it():
    eng, target, calls = _model_target(refuse_lse=False)
    args, kwargs = build(Case("small", (5, 9)), torch.float16, "cpu", torch.Generator().manual_seed(1))
    target.entry("vision")(*args, **kwargs)
    assert [c["return_lse"] for c in calls] == [True] and "runs as is" in eng.describe()


def test_wrapper_guard_names_the_layout_change():
    eng, target, _ = _model_target()
    gen = torch.Generator().manual_seed(2)
    first_args, first_kwargs = build(Case("a", (5, 9)), torch.float16, "cpu", gen)
    target.entry("vision")(*first_args, **first_kwargs)
    args, kwargs = build(Case("b", (5, 9), v_dim=48), torch.float16, "cpu", gen)
    with pytest.raises(GraphCacheHazard, match="v head dim 64 then 48"):
        target.entry("vision")(*args, **kwargs)
    eng.guard = False  # the engine's own behaviour: no error (the model has no stale graph to replay)
    target.entry("vision")(*args, **kwargs)
