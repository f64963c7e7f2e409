"""The kv_b LoRA reference against an independent formulation (dense per-head delta matrices).

Every sample input of the OpInfo database runs through the float64 oracle and through
:func:`kernel_oracle.reference.independent_lora.lora_independent`; the two must agree on the value and on the
defined region.  The drop-in steps (SGLang signatures) are then held to the tolerance rule in the
input's own dtype, the faithful modes to theirs, and the strict switch is checked both ways.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from kernel_oracle.harness.opinfo import OP_DB
from kernel_oracle.harness.opinfo_lora import LORA_OPINFOS
from kernel_oracle.harness.problem_lora import LoRAProblem, materialize_lora
from kernel_oracle.reference.independent_lora import lora_independent
from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference.batch_info import LoRABatchInfo
from kernel_oracle.reference.strict import is_strict, strict_validation
from kernel_oracle.reference.tolerance import compare

from oracle_tests._checks import assert_defined_close, reference_entry

LORA_OPS = [info.name for info in LORA_OPINFOS]
# faithful vs float64: at most this many units of the activation dtype's eps times the largest output
FAITHFUL_ULPS = 4

# (op, dtype, sample) for every LoRA OpInfo, every dtype it lists, every small sample
LORA_CASES = [
    pytest.param(info, dtype, sample, id=f"{info.name}-{str(dtype)[6:]}-{sample.name}")
    for info in LORA_OPINFOS
    for dtype in info.dtypes
    for sample in info.sample_inputs("cpu", dtype)
]


def _call(sample, device):
    return sample.call(device)


@pytest.mark.parametrize("info,dtype,sample", LORA_CASES)
def test_oracle_matches_independent(info, dtype, sample, device):
    call = _call(sample, device)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in call.args]
    result = info.oracle(*call.args)
    assert result.value.dtype == torch.float64
    for a, b in zip(call.args, before):  # an oracle never modifies its inputs
        if isinstance(a, torch.Tensor):
            assert torch.equal(a.nan_to_num(), b.nan_to_num()), "the oracle modified an input"
    value, defined = lora_independent(info.name, call.args)
    assert_defined_close(result.value, result.defined, value, defined, what=f"{info.name} oracle")


@pytest.mark.parametrize("info,dtype,sample", LORA_CASES)
def test_step_in_input_dtype(info, dtype, sample, device):
    """The drop-in step: input dtype out, in place where SGLang's is, within the tolerance rule."""
    call = _call(sample, device)
    value, defined = lora_independent(info.name, call.args)
    baseline = info.oracle(*call.args, faithful=True)
    original = call.args[call.inplace].clone() if call.inplace is not None else None
    out = reference_entry(info)(*call.args, **call.kwargs)
    if call.inplace is not None:
        base = call.args[call.inplace]
        assert out is base, "step B / fused steps return base_output itself (updated in place)"
        routed = torch.zeros(base.shape[0], dtype=torch.bool)
        routed[value.ne(original.cpu().to(torch.float64)).flatten(1).any(1)] = True
        # rows no segment changes keep their values bit for bit (NaN gaps of strided views included)
        assert torch.equal(base[~routed.to(base.device)].nan_to_num(), original[~routed.to(base.device)].nan_to_num())
        expected_dtype = original.dtype
    else:
        expected_dtype = call.args[0].dtype
        assert torch.all(out[~defined.to(out.device)] == 0), "step A output is zero outside the defined region"
    assert out.dtype == expected_dtype and out.device == call.args[0].device
    cmp = compare(out, value, defined, family="lora", baseline=baseline.baselines, out_dtype=expected_dtype,
                  what=info.name)
    assert cmp.ok, cmp.message


@pytest.mark.parametrize("op", LORA_OPS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_faithful_modes(op, dtype, device):
    """faithful=True rounds like the kernels (not a no-op below fp64); "tf32" rounds matmul inputs."""
    p = LoRAProblem(op=op, seg_lens=(9, 5, 12), weight_indices=(1, 0, 1), lora_ranks=(16, 9),
                    scalings=(0.5, -1.5), dtype=str(dtype)[6:], seed=31)
    call = materialize_lora(p, device)
    oracle = OP_DB[op].oracle
    exact = oracle(*call.args)
    faithful = oracle(*call.args, faithful=True)
    out_dtype = call.args[call.inplace].dtype if call.inplace is not None else dtype
    assert faithful.value.dtype == out_dtype
    assert torch.equal(faithful.defined, exact.defined)
    d = exact.defined
    err = (faithful.value.double() - exact.value)[d].abs().max().item()
    assert err > 0, "faithful mode should carry the rounding of the activation dtype"
    # normwise: a few roundings of the activation dtype, relative to the largest output
    scale = exact.value[d].abs().max().item()
    assert err <= FAITHFUL_ULPS * torch.finfo(dtype).eps * scale, (err, scale)
    if dtype == torch.float32:
        tf32 = oracle(*call.args, faithful="tf32")
        err_tf32 = (tf32.value.double() - exact.value)[d].abs().max().item()
        assert err_tf32 > 4 * err, f"TF32 rounding should cost more than fp32: {err_tf32} vs {err}"
        assert err_tf32 < 1e-2 * exact.value[d].abs().max().item()


def test_faithful_rejects_unknown_mode():
    call = materialize_lora(LoRAProblem(op="step_a_q", seg_lens=(3,), weight_indices=(0,), lora_ranks=(4,),
                                        scalings=(1.0,)))
    with pytest.raises(ValueError, match="the only valid values are False, True, 'tf32'"):
        ref_lora.step_a_q_oracle(*call.args, faithful="fp8")


@dataclasses.dataclass
class _OtherBatchInfo:
    """Same fields as SGLang's LoRABatchInfo, a different class: the APIs must duck-type."""

    seg_indptr: torch.Tensor
    weight_indices: torch.Tensor
    lora_ranks: torch.Tensor
    scalings: torch.Tensor
    permutation: object
    seg_lens: object
    max_len: object
    num_segments: int
    bs: int
    use_cuda_graph: bool


@pytest.mark.parametrize("op", LORA_OPS)
@pytest.mark.parametrize("kind", ["namespace", "other_dataclass"])
def test_duck_typed_batch_info(op, kind, device):
    p = LoRAProblem(op=op, seg_lens=(4, 0, 7), weight_indices=(1, 0, 0), lora_ranks=(16, 5), scalings=(1.0, 2.0),
                    permute=True, extra_rows=2, seed=17)
    call = materialize_lora(p, device)
    bi = next(a for a in call.args if isinstance(a, LoRABatchInfo))
    names = [f.name for f in dataclasses.fields(_OtherBatchInfo)]
    fields = {n: getattr(bi, n) for n in names}
    other = types.SimpleNamespace(**fields) if kind == "namespace" else _OtherBatchInfo(**fields)
    swapped = tuple(other if a is bi else a for a in call.args)
    want = OP_DB[op].oracle(*call.args)
    got = OP_DB[op].oracle(*swapped)
    assert torch.equal(got.value, want.value) and torch.equal(got.defined, want.defined)


def test_strict_is_on_by_default_and_switchable():
    assert is_strict()
    with strict_validation(False):
        assert not is_strict()
        with strict_validation(True):
            assert is_strict()
        assert not is_strict()
    assert is_strict()


def _bad_slot_call(op, device, value):
    p = LoRAProblem(op=op, seg_lens=(5, 6, 4), weight_indices=(0, 1, 0), lora_ranks=(16, 8),
                    scalings=(1.0, -0.5), seed=23)
    call = materialize_lora(p, device)
    next(a for a in call.args if isinstance(a, LoRABatchInfo)).weight_indices[1] = value
    return call


@pytest.mark.parametrize("op", LORA_OPS)
@pytest.mark.parametrize("switch", ["per_call", "context"])
def test_strict_off_marks_unknown_slot_undefined(op, switch, device):
    """Slot out of range, strict off: no error; that segment's rows (5..10) are undefined; the rest
    agrees with the independent formulation run without the broken segment."""
    call = _bad_slot_call(op, device, 9)
    if switch == "per_call":
        result = OP_DB[op].oracle(*call.args, strict=False)
    else:
        with strict_validation(False):
            result = OP_DB[op].oracle(*call.args)
    assert not result.defined[5:11].any()
    fixed = _bad_slot_call(op, device, 0)
    bi = next(a for a in fixed.args if isinstance(a, LoRABatchInfo))
    bi.lora_ranks = bi.lora_ranks.clone()
    # the independent formulation of "segment 1 contributes nothing": route it to a rank-0 slot
    bi.lora_ranks = torch.cat([bi.lora_ranks, torch.zeros(1, dtype=torch.int32, device=bi.lora_ranks.device)])
    bi.scalings = torch.cat([bi.scalings, torch.ones(1, dtype=torch.float32, device=bi.scalings.device)])
    bi.weight_indices[1] = 2
    value, _ = lora_independent(op, fixed.args)
    mask = result.defined
    assert mask.any()
    assert_defined_close(result.value, mask, value, mask, what=f"{op} strict off, slot out of range")


@pytest.mark.parametrize("op", LORA_OPS)
def test_strict_off_max_len_too_small(op, device):
    """max_len=3 for segments of 5 and 6 rows: rows past position 3 are undefined, the first 3
    rows of every segment are still computed."""
    call = _bad_slot_call(op, device, 1)
    bi = next(a for a in call.args if isinstance(a, LoRABatchInfo))
    bi.max_len = 3
    result = OP_DB[op].oracle(*call.args, strict=False)
    value, defined = lora_independent(op, call.args)
    dropped = torch.tensor([3, 4, 8, 9, 10, 14])
    assert not result.defined[dropped].any()
    keep = torch.ones(result.value.shape[0], dtype=torch.bool)
    keep[dropped] = False
    assert_defined_close(result.value[keep], result.defined[keep], value[keep], defined[keep],
                         what=f"{op} strict off, max_len too small")


@pytest.mark.parametrize("op", LORA_OPS)
def test_strict_off_repeated_permutation_rows(op, device):
    p = LoRAProblem(op=op, seg_lens=(5, 6), weight_indices=(0, 1), lora_ranks=(16, 8), scalings=(1.0, 2.0),
                    permute=True, seed=29)
    call = materialize_lora(p, device)
    bi = next(a for a in call.args if isinstance(a, LoRABatchInfo))
    row = int(bi.permutation[0])
    bi.permutation[7] = row  # logical row 7 (segment 1) writes physical row `row` again
    result = OP_DB[op].oracle(*call.args, strict=False)
    assert not result.defined[row].any()
    assert result.defined.flatten(1).any(1).sum() >= 8  # the other routed rows stay defined


@pytest.mark.parametrize("op", LORA_OPS)
def test_step_float64_inputs(op, device):
    """float64 in, float64 out, equal to the oracle (and the independent formulation) exactly-ish."""
    p = LoRAProblem(op=op, seg_lens=(6, 3, 8), weight_indices=(0, 1, 0), lora_ranks=(16, 7), scalings=(1.0, -2.0),
                    dtype="float64", permute=True, extra_rows=1, seed=37)
    call = materialize_lora(p, device)
    value, defined = lora_independent(op, call.args)
    out = reference_entry(OP_DB[op])(*call.args)
    assert out.dtype == torch.float64
    assert_defined_close(out, defined.to(out.device), value, defined, what=f"{op} float64 step")

def test_float64_oracle_keeps_exact_values_just_beyond_the_threshold():
    """Within OVERFLOW_MARGIN of fp16's overflow threshold (65520) the oracle keeps the exact value (a
    kernel may store inf or 65504 there: the rule accepts both); farther out it holds inf.  The "early"
    range (the overflow alternate) overflows from the margin below the threshold on."""
    from kernel_oracle.reference import lora

    t = torch.tensor([65530.0, -65600.0, 66100.0, -1e6, 100.5, 65100.0, 64900.0], dtype=torch.float64)
    inf = float("inf")
    assert lora._Arith(False).round(t, torch.float16).tolist() == [65530.0, -65600.0, inf, -inf, 100.5, 65100.0,
                                                                   64900.0]
    assert lora._Arith(True).round(t.float(), torch.float16).tolist() == [inf, -inf, inf, -inf, 100.5, 65088.0,
                                                                          64896.0]
    token = lora._RANGE.set(("early", None))
    try:
        assert lora._Arith(False).round(t, torch.float16).tolist() == [inf, -inf, inf, -inf, 100.5, inf, 64900.0]
    finally:
        lora._RANGE.reset(token)



@pytest.mark.parametrize("parts,overflows", [((32768.0, 32768.0, 16.0, 16.0), True),  # 65568: fp16 inf
                                              ((32768.0, 32736.0, 8.0, 4.0), False)])  # 65516: fp16 65504
def test_a_delta_at_fp16s_threshold_may_overflow_into_an_fp32_output(parts, overflows, device):
    """Note [Range at rounding points]: step_b_q, fp16 operands, an fp32 base.  The split step rounds the
    scaled delta to fp16 before the fp32 add, so a delta of 65568 (within OVERFLOW_MARGIN beyond fp16's
    threshold 65520) is inf in our kernel and in the fp16 baseline, while the exact value is finite: the
    session-7 H200 soak's 38.8% false alarm.  The oracle gives the overflowed output as an alternate
    (also for 65516, just below: a kernel's error may carry it over), and our kernel passes."""
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, prepared_call, execute, expected_outcome, judge

    p = LoRAProblem(op="step_b_q", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(4, 4), scalings=(1.0, 0.5),
                    H=2, qk=16, vd=16, C=32, R=4, dtype="float16", base_dtype="float32", seed=5)
    case, target = Case(p), resolve_target("triton", device)
    call = prepared_call(case, device)
    x, a_buf = call.args[0], call.args[1]
    with torch.no_grad():
        x[:3] = 1.0
        a_buf[0] = 0.0
        for i, part in enumerate(parts):
            a_buf[0, i] = part
    expected = expected_outcome(case, device, precision=target.precision_for(case.op), call=call)
    exact = torch.tensor(sum(parts), dtype=torch.float64)
    assert torch.isfinite(expected.value[:3]).all()
    assert torch.allclose(expected.value[:3] - call.args[3][:3].double(), exact.expand(3, 2, 32).to(expected.value))
    alt = expected.overflow_alternate
    assert alt is not None and torch.isinf(alt[:3]).all() and torch.equal(alt[3:], expected.value[3:])
    observed = execute(target, case, device, call=call, to_host=False)
    assert bool(torch.isinf(observed.output[:3]).all()) is overflows  # the kernel rounds the delta to fp16
    verdict = judge(case, expected, observed, call=call, device=device)
    assert verdict.ok, verdict.message
    wrong = observed.output.clone()
    wrong[3, 1, 7] = float("inf")  # an inf where no rounding point came near the threshold
    bad = judge(case, expected, dataclasses.replace(observed, output=wrong), call=call, device=device)
    assert not bad.ok and "Non-finite values where the reference is finite, or the reverse: 1" in bad.message


def test_a_fused_mid_at_fp16s_threshold_overflows_into_inf_and_nan(device):
    """q_side_fused in fp16: the step-A result (a rounding point) is 65568 in rank 0, inf in fp16; times
    A's zero columns that is NaN, times 1e-3 inf, while the exact value is finite everywhere.  The
    oracle's overflow alternate holds that NaN and inf, and our kernel, which rounds there, passes."""
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, prepared_call, execute, expected_outcome, judge

    p = LoRAProblem(op="q_side_fused", seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(4, 4),
                    scalings=(1.0, 0.5), H=2, qk=16, vd=16, C=32, R=4, dtype="float16", base_dtype="float16", seed=5)
    case, target = Case(p), resolve_target("triton", device)
    call = prepared_call(case, device)
    q, b_buf, a_buf = call.args[0], call.args[1], call.args[2]
    with torch.no_grad():
        q[:3] = 0.0
        q[:3, :, :4] = 1.0
        for h in range(2):
            b_buf[0, h * 32: h * 32 + 16] = 0.0  # FULL_K = 32: the K half of head h
            b_buf[0, h * 32: h * 32 + 4, 0] = torch.tensor([32768.0, 32768.0, 16.0, 16.0])
        a_buf[0] = 0.0
        a_buf[0, :, 16:] = 1e-3
    expected = expected_outcome(case, device, precision=target.precision_for(case.op), call=call)
    alt = expected.overflow_alternate
    assert torch.isfinite(expected.value).all()
    assert torch.isnan(alt[:3, :, :16]).all() and torch.isinf(alt[:3, :, 16:]).all()
    observed = execute(target, case, device, call=call, to_host=False)
    verdict = judge(case, expected, observed, call=call, device=device)
    assert verdict.ok, verdict.message
    assert not judge(case, dataclasses.replace(expected, overflow_alternate=None), observed, call=call,
                     device=device).ok


@pytest.mark.parametrize("op", ["step_b_v", "step_b_q", "v_side_fused"])
def test_float64_oracle_overflows_where_a_rounding_point_does(op, device):
    """Note [Range at rounding points]: an fp16 delta beyond 65504 is inf in the float64 oracle too (slot
    0, scaling 1e12), finite values stay exact (slot 1), and our kernel, which rounds there, passes."""
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, check_case

    p = LoRAProblem(op=op, seg_lens=(3, 2), weight_indices=(0, 1), lora_ranks=(4, 4), scalings=(1e12, 0.5),
                    H=2, qk=16, vd=16, C=32, R=4, dtype="float16",
                    base_dtype="float32" if op != "v_side_fused" else "float16", seed=3)
    call = materialize_lora(p, device)
    result = OP_DB[op].oracle(*call.args)
    assert torch.isinf(result.value[:3]).all() and torch.isfinite(result.value[3:5]).all()
    exact = dataclasses.replace(p, scalings=(1.0, 0.5))
    small = OP_DB[op].oracle(*materialize_lora(exact, device).args)
    assert torch.equal(small.value[3:5], result.value[3:5])  # the other slot is untouched by the overflow
    verdict = check_case(resolve_target("triton", device), Case(p), device)
    assert verdict.ok, verdict.message
