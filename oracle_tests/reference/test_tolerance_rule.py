"""The tolerance rule itself (reference.tolerance): it must not cry wolf on a correct computation
and must still catch a wrong one.

The false-alarm check uses computations that are correct by construction: the same torch fp32
attention with the head dim and keys visited in a random order (mathematically identical).  See
Note [Baseline orders] in reference/tolerance.py for why the rule takes the worst of several
baseline orders, and the numbers measured before the change.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernel_oracle.harness.problems import materialize
from kernel_oracle.harness.problem_vision import VisionProblem
from kernel_oracle.reference.tolerance import compare, round_to_tf32
from kernel_oracle.reference.vision import FP32_BASELINE_ORDERS, attention_block, flashinfer_cudnn_oracle

# small fp32 problems with large logits: where the single-baseline rule was measured to misfire
DRAWS = ((4,), 150), ((12, 7), 100)


def _random_order_fp32(call, gen) -> torch.Tensor:
    """The faithful fp32 computation, one sequence at a time, in a random summation order."""
    q, k, v = (x.flatten(0, 1) if x.dim() == 4 else x for x in call.args[:3])
    ref = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    out = torch.zeros_like(ref.value).flatten(0, -3) if ref.value.dim() == 4 else torch.zeros_like(ref.value)
    out = out.to(q.dtype)
    lens = call.kwargs["sequence_lengths"].flatten().tolist()
    start = 0
    scale = call.kwargs.get("softmax_scale") or q.shape[-1] ** -0.5
    for n in lens:
        if n:
            order = (torch.randperm(q.shape[-1], generator=gen), torch.randperm(n, generator=gen))
            sl = slice(start, start + n)
            out[sl] = attention_block(q[sl], k[sl], v[sl], scale, faithful=True, out_dtype=q.dtype, order=order)
        start += n
    return out.view_as(ref.value)


@pytest.mark.parametrize("lengths,draws", DRAWS, ids=lambda x: str(x))
def test_rule_accepts_fp32_in_any_summation_order(lengths, draws):
    """Over many draws, a correct fp32 computation in a random order passes the rule against the
    oracle's baselines; with the natural-order baseline alone, the same draws produce false alarms
    (the reason for the extra orders: if this part ever stops failing, one order may suffice)."""
    gen = torch.Generator().manual_seed(12345)
    single_order_alarms, alarms = [], []
    for seed in range(draws):
        p = VisionProblem(lengths=lengths, H=1, D=16, dtype="float32", logit_scale=30.0, seed=seed, path="kwargs")
        call = materialize(p, "cpu")
        ref = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
        faithful = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
        assert len(faithful.baselines) == FP32_BASELINE_ORDERS
        other = _random_order_fp32(call, gen)
        if not compare(other, ref.value, ref.defined, family="vision", baseline=faithful.baselines).ok:
            alarms.append(seed)
        if not compare(other, ref.value, ref.defined, family="vision", baseline=faithful.value).ok:
            single_order_alarms.append(seed)
    assert alarms == [], f"the rule rejected a correct fp32 computation on seeds {alarms}"
    assert single_order_alarms, "the single-order baseline no longer misfires on these draws"


def test_compare_takes_the_worst_baseline():
    ref = torch.linspace(-1, 1, 64, dtype=torch.float64)
    defined = torch.ones_like(ref, dtype=torch.bool)
    near = (ref + 1e-6).float()
    far = (ref + 1e-4).float()
    actual = (ref + 1.5e-4).float()  # within 2 * 1e-4, not within 2 * 1e-6
    assert not compare(actual, ref, defined, family="vision", baseline=near).ok
    both = compare(actual, ref, defined, family="vision", baseline=[near, far])
    assert both.ok and both.baseline_err == pytest.approx(1e-4, rel=1e-2)


def test_extra_orders_do_not_hide_a_wrong_value():
    """One output element off by 1e-3 in fp32 still fails with all eight baselines."""
    p = VisionProblem(lengths=(12, 7), H=1, D=16, dtype="float32", logit_scale=30.0, seed=7, path="kwargs")
    call = materialize(p, "cpu")
    ref = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
    faithful = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
    wrong = faithful.value.clone()
    wrong.view(-1)[int(torch.nonzero(ref.defined.flatten())[5])] += 1e-3
    assert compare(faithful.value, ref.value, ref.defined, family="vision", baseline=faithful.baselines).ok
    assert not compare(wrong, ref.value, ref.defined, family="vision", baseline=faithful.baselines).ok


# ---- non-finite values (Note [Non-finite values]) ------------------------------------------------

def _vec(*values, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


ALL = torch.ones(4, dtype=torch.bool)
REF = _vec(1.0, -2.0, 0.5, 3.0, dtype=torch.float64)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("baseline_value", [float("inf"), float("nan")])
def test_non_finite_baseline_does_not_let_a_non_finite_output_pass(bad, baseline_value):
    """The hole: an overflowed baseline made the allowance inf/NaN, and ``diff > allowance`` was False."""
    baseline = _vec(1.0, -2.0, 0.5, baseline_value)
    actual = _vec(1.0, -2.0, 0.5, bad)
    c = compare(actual, REF, ALL, family="lora", baseline=baseline)
    assert not c.ok and c.mismatched == 1 and c.worst_index == (3,)
    assert "Baseline: a baseline is not finite where the reference is (e.g. it overflowed) at 1 element(s) " \
           "away from the overflow threshold: fell back to the assert_close table" in c.message
    assert c.rule == "|a - r| <= 1e-05 + 1.3e-06 * |r| (assert_close table for torch.float32)"
    assert c.baseline_err is None and c.allowed == pytest.approx(1e-5 + 1.3e-6 * 3.0)


def test_non_finite_baseline_never_widens_the_allowance():
    """A finite but wrong output is judged by the dtype table, not by an inf allowance."""
    baseline = _vec(1.0, -2.0, 0.5, float("inf"))
    c = compare(_vec(1.0, -2.0, 0.5, 3.001), REF, ALL, family="lora", baseline=baseline)
    assert not c.ok and c.mismatched == 1
    assert compare(_vec(1.0, -2.0, 0.5, 3.0), REF, ALL, family="lora", baseline=baseline).ok


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_output_fails_where_the_reference_is_finite(bad):
    for baseline in (None, _vec(1.0, -2.0, 0.5, 3.0)):
        c = compare(_vec(1.0, bad, 0.5, 3.0), REF, ALL, family="vision", baseline=baseline)
        assert not c.ok and c.mismatched == 1 and c.worst_index == (1,)
        assert "Non-finite values where the reference is finite, or the reverse: 1" in c.message


def test_non_finite_output_passes_only_where_the_reference_has_the_same_value():
    ref = _vec(1.0, float("inf"), float("nan"), -float("inf"), dtype=torch.float64)
    base = _vec(1.0, float("inf"), float("nan"), -float("inf"))
    assert compare(_vec(1.0, float("inf"), float("nan"), -float("inf")), ref, ALL, family="lora", baseline=base).ok
    for wrong in (_vec(1.0, -float("inf"), float("nan"), -float("inf")),  # sign
                  _vec(1.0, float("inf"), 0.0, -float("inf")),  # finite where the reference is NaN
                  _vec(1.0, float("inf"), float("nan"), float("nan"))):  # NaN where it is -inf
        c = compare(wrong, ref, ALL, family="lora", baseline=base)
        assert not c.ok and c.mismatched == 1, wrong


@pytest.mark.parametrize("ref,out,ok", [
    (65530.0, 65504.0, True),   # just beyond fp16's threshold (65520): the largest finite value is a right rounding
    (65530.0, float("inf"), True),
    (65510.0, float("inf"), True),  # just below it: a value within the allowance reaches it, so inf is right too
    (-65510.0, -float("inf"), True),
    (-65510.0, float("inf"), False),  # the wrong sign
    (60000.0, float("inf"), False),  # far below the threshold: inf is a mismatch
    (1e6, 65504.0, False),  # far beyond it: a saturated value is a mismatch
    (65530.0, float("nan"), False),
])
def test_the_overflow_boundary_accepts_both_roundings(ref, out, ok):
    """Note [Non-finite values]: within the allowance of fp16's overflow threshold (65520) both inf and
    65504 are right roundings (the H200 soak's step_b_q false alarm); farther away only one is."""
    r = _vec(1.0, ref, dtype=torch.float64)
    baseline = _vec(31.0, ref, dtype=torch.float16)  # baseline error 30 (element 0): an allowance of about 72
    c = compare(_vec(1.0, out, dtype=torch.float16), r, torch.ones(2, dtype=torch.bool), family="lora",
                baseline=baseline)
    assert c.ok is ok, c.message


def _boundary_case(baseline_top: float):
    """fp16, 4 elements: a reference of 65515 (in range, 5 below the threshold 65520) whose baseline is
    ``baseline_top``, and elements where the baseline is 16 off (an fp16 accumulation's error at 3e4);
    the target is 32 off there -- within 2 * 16 + floor (22: 65515 is 11 from fp16's 65504), beyond the
    table's 1e-5 + 1e-3 * |r| = 30."""
    ref = _vec(30000.0, -30000.0, 3.0, 65515.0, dtype=torch.float64)
    base = _vec(30020.0, -30020.0, 3.0, baseline_top, dtype=torch.float16)
    out = _vec(30032.0, -30032.0, 3.0, float("inf"), dtype=torch.float16)
    return ref, base, out


def test_a_baseline_rounded_to_inf_at_the_threshold_is_left_out():
    """Note [Non-finite baselines]: one baseline element rounded to inf across 65520 must not send the
    whole output to the assert_close table (a false alarm of a correct fp16 step_b_q)."""
    ref, base, out = _boundary_case(float("inf"))
    c = compare(out, ref, ALL, family="lora", baseline=base)
    assert c.ok, c.message
    assert c.baseline_err == pytest.approx(16.0)  # fp16 spacing at 3e4 is 16: the baseline stores 30016
    assert c.message == "Baseline: a baseline rounded to inf across an overflow threshold at 1 " \
                        "element(s) (not counted in baseline_err)"
    wrong = out.clone()
    wrong[0] = 30208.0  # 208 off: beyond 2 * 16 + 22
    bad = compare(wrong, ref, ALL, family="lora", baseline=base)
    assert not bad.ok and bad.worst_index == (0,) and "at 1 element(s) (not counted" in bad.message


def test_a_baseline_inf_away_from_the_threshold_still_falls_back():
    """The same baseline error with its inf at a reference of 3.0: the faithful computation is no sample
    of the dtype's error there, and the whole output is judged by the table (which rejects 32 at 3e4)."""
    ref, base, out = _boundary_case(65504.0)
    base[2] = float("inf")
    out[3] = 65504.0
    c = compare(out, ref, ALL, family="lora", baseline=base)
    assert not c.ok and c.baseline_err is None
    assert "Baseline: a baseline is not finite where the reference is (e.g. it overflowed) at 1 element(s) " \
           "away from the overflow threshold: fell back to the assert_close table" in c.message


def test_reference_beyond_the_dtype_range_expects_inf():
    """fp16: a float64 reference of 70000 rounds to inf in the output dtype; inf is then the right
    output and a finite one is not (the baseline's inf there is out of range: not measured)."""
    ref = _vec(1.0, 70000.0, dtype=torch.float64)
    base = _vec(1.0, float("inf"), dtype=torch.float16)
    two = torch.ones(2, dtype=torch.bool)
    assert compare(_vec(1.0, float("inf"), dtype=torch.float16), ref, two, family="lora", baseline=base).ok
    assert not compare(_vec(1.0, 65504.0, dtype=torch.float16), ref, two, family="lora", baseline=base).ok


def test_message_reports_the_greatest_differences_at_their_own_indices():
    """Greatest absolute and relative differences are the maxima, each at its own index; the worst
    element (largest multiple of its allowance) is reported on its own line."""
    ref = _vec(100.0, 0.01, 1.0, dtype=torch.float64)
    actual = _vec(100.5, 0.02, 1.0)  # abs max at 0 (0.5), rel max at 1 (1.0)
    c = compare(actual, ref, torch.ones(3, dtype=torch.bool), family="lora")  # the table: rel matters
    assert not c.ok
    assert "Greatest absolute difference: 0.5 at index (0,) (up to 0.00014 allowed)" in c.message
    assert "Greatest relative difference: 1 at index (1,)" in c.message
    assert c.worst_rel == pytest.approx(1.0, rel=1e-6)
    assert f"Worst element: {c.ratio:.3g}x its allowance at index {c.worst_index}" in c.message


# ---- TF32 rounding (Note [TF32 rounding]) -------------------------------------------------------

def _tf32_by_arithmetic(x: float, mode: str) -> float:
    """TF32 rounding written independently: float64 arithmetic on frexp's mantissa (11 significant
    bits), subnormals on the fixed quantum 2**-136, round half to even or truncate, IEEE overflow."""
    if not math.isfinite(x) or x == 0.0:
        return x
    if abs(x) < 2.0 ** -126:
        q = x / 2.0 ** -136
        return math.copysign((round(q) if mode == "rne" else math.trunc(q)) * 2.0 ** -136, x)
    m, e = math.frexp(x)
    q = m * 2.0 ** 11
    y = (round(q) if mode == "rne" else math.trunc(q)) * 2.0 ** (e - 11)
    return math.copysign(math.inf, x) if abs(y) > (2 - 2 ** -10) * 2.0 ** 127 else y


@pytest.mark.parametrize("mode", ["rne", "trunc"])
def test_round_to_tf32_matches_an_independent_definition(mode):
    gen = torch.Generator().manual_seed(99)
    x = torch.randn(3000, generator=gen) * 10.0 ** torch.randint(-40, 38, (3000,), generator=gen).float()
    x = torch.cat([x, torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 3.4028235e38, -3.4028235e38,
                                    3.4011e38, 1e-40, -1e-44, 0.0, -0.0, float("inf"), -float("inf")])])
    got = round_to_tf32(x, mode).tolist()
    for xi, gi in zip(x.tolist(), got):
        want = _tf32_by_arithmetic(xi, mode)
        assert gi == want and math.copysign(1, gi) == math.copysign(1, want), (mode, xi, gi, want)
    nan = round_to_tf32(torch.tensor([0x7F800001, -0x7FFFFF], dtype=torch.int32).view(torch.float32), mode)
    assert nan.view(torch.int32).tolist() == [0x7FC00000, -0x400000], "NaN must stay NaN (quiet, sign kept)"


def test_round_to_tf32_rejects_a_bad_mode_or_dtype():
    with pytest.raises(ValueError, match=r"mode='nearest' is invalid; the only valid values are \('rne', 'trunc'\)"):
        round_to_tf32(torch.ones(2), "nearest")
    with pytest.raises(TypeError, match="Expected a float32 tensor but got dtype=torch.float16"):
        round_to_tf32(torch.ones(2, dtype=torch.float16))


def _tf32_matmul(x, w, mode):
    return round_to_tf32(x, mode) @ round_to_tf32(w, mode)


@pytest.mark.parametrize("mkn", [(64, 512, 16), (128, 128, 64), (64, 16, 512)])
def test_tf32_rule_accepts_truncation_and_rejects_a_coarser_rounding(mkn):
    """The hardware truncates TF32 operands: a truncating matmul in another summation order passes
    against the worst of the two baselines (and failed against round-to-nearest alone: the SGLang
    false alarms), while 8-bit operands and one dropped K term are still caught."""
    M, K, N = mkn
    old_alarms = new_alarms = caught8 = caught_drop = 0
    draws = 10
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        x, w = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g) * 0.05
        ref = x.double() @ w.double()
        d = torch.ones_like(ref, dtype=torch.bool)
        baselines = [_tf32_matmul(x, w, "rne"), _tf32_matmul(x, w, "trunc")]
        hardware = _tf32_matmul(x.flip(1), w.flip(0), "trunc")
        old_alarms += not compare(hardware, ref, d, family="lora", baseline=baselines[0]).ok
        new_alarms += not compare(hardware, ref, d, family="lora", baseline=baselines).ok
        assert compare(_tf32_matmul(x.flip(1), w.flip(0), "rne"), ref, d, family="lora", baseline=baselines).ok
        coarse = [(t.view(torch.int32) & -(1 << 15)).view(torch.float32) for t in (x, w)]  # 8 mantissa bits
        caught8 += not compare(coarse[0] @ coarse[1], ref, d, family="lora", baseline=baselines).ok
        caught_drop += not compare(_tf32_matmul(x[:, :-1], w[:-1], "trunc"), ref, d, family="lora",
                                   baseline=baselines).ok
    assert new_alarms == 0, f"{new_alarms}/{draws} false alarms on truncated TF32"
    assert old_alarms >= draws // 2, "round-to-nearest alone no longer misfires on truncation: revisit the Note"
    assert caught8 == draws and caught_drop == draws


def test_faithful_tf32_oracle_carries_both_modes():
    """faithful="tf32": value rounds to nearest, an alternate truncates; the single modes carry one."""
    from kernel_oracle.harness.problem_lora import LoRAProblem, materialize_lora
    from kernel_oracle.reference.lora import step_a_v_oracle

    call = materialize_lora(LoRAProblem(op="step_a_v", seg_lens=(5, 3), weight_indices=(0, 1), lora_ranks=(16, 8),
                                        scalings=(1.0, 0.5), dtype="float32", seed=3))
    both = step_a_v_oracle(*call.args, faithful="tf32")
    rne = step_a_v_oracle(*call.args, faithful="tf32-rne")
    trunc = step_a_v_oracle(*call.args, faithful="tf32-trunc")
    assert len(both.baselines) == 2 and len(rne.baselines) == 1 and len(trunc.baselines) == 1
    assert torch.equal(both.value, rne.value) and torch.equal(both.baselines[1], trunc.value)
    assert not torch.equal(rne.value, trunc.value)
    p = VisionProblem(lengths=(5,), H=1, D=16, dtype="float32", seed=2, path="kwargs")
    vcall = materialize(p, "cpu")
    vboth = flashinfer_cudnn_oracle(*vcall.args, **vcall.kwargs, faithful="tf32")
    assert len(vboth.baselines) == 2 * FP32_BASELINE_ORDERS


# ---- planted TF32 mutants (fuzz/targets/mutants.py, Note [TF32 mutants]) -------------------------

@pytest.mark.interpreter
def test_tf32_truncation_control_passes_the_rule():
    """Our LoRA kernels with fp32 operands truncated to TF32 (what the tensor cores do with raw fp32)
    survive the CI-profile search under precision "tf32": no false alarm."""
    from kernel_oracle.fuzz.mutant_check import check_mutant

    result = check_mutant("lora_tf32_truncation", max_examples=100)
    assert result.error is None, result.error
    assert not result.killed, f"truncated TF32 was flagged after {result.examples} examples:\n{result.message}"


@pytest.mark.interpreter
def test_tf32_truncation_control_fails_a_round_to_nearest_rule(monkeypatch):
    """The same copy held to round-to-nearest TF32 alone ("tf32-rne") is flagged: the false alarm of the
    SGLang kernels on the H200, reproduced on the CPU (the control can fail)."""
    import dataclasses

    from kernel_oracle.fuzz.mutant_check import check_mutant
    from kernel_oracle.fuzz.targets import mutants

    control = mutants.get_mutant("lora_tf32_truncation")
    strict = dataclasses.replace(control, name="lora_tf32_truncation_rne_rule", precision="tf32-rne")
    monkeypatch.setitem(mutants._BY_NAME, strict.name, strict)
    result = check_mutant(strict.name, max_examples=100)
    assert result.error is None, result.error
    assert result.killed, "truncated TF32 passed a round-to-nearest-only baseline: revisit Note [TF32 rounding]"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="what TF32 tensor cores do is a property of a CUDA device")
@pytest.mark.parametrize("shape", [(4096, 512, 64), (2048, 128, 1536)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_tf32_dot_passes_and_mutants_fail(shape):
    """On the GPU: a plain fp32 ``tl.dot`` (default precision: TF32, raw operands, as SGLang's kv_b kernels)
    passes the rule on every draw; it fails a round-to-nearest-only baseline (the false alarms such a baseline gives);
    8-bit operands and a dropped K term fail on every draw (benchmarks/gpu_verdicts.py, part (a))."""
    from kernel_oracle.benchmarks.gpu_verdicts import tf32_verdicts

    draws = 8
    res = tf32_verdicts(shape, draws)
    assert res[0]["rule_fail"] == 0, f"TF32 tl.dot flagged on {res[0]['rule_fail']}/{draws} draws: {res[0]}"
    assert res[0]["rne_only_fail"] > 0, "tl.dot matched round-to-nearest TF32: the tensor cores no longer truncate? " \
                                        "revisit Note [TF32 rounding]"
    assert res[1]["rule_fail"] == draws and res[2]["rule_fail"] == draws, res


# ---- the flash-attention form among the fp32 baselines (Note [Baseline orders]) -------------------

@pytest.mark.parametrize("block", [32, 64, None])
def test_flash_attention_form_is_the_same_attention(block):
    """The FA-form baseline (base-2 logits, online softmax over key blocks, deferred division) is the
    same mathematics: within fp32 rounding of the float64 result, and not bit-identical to the plain
    softmax (it is a different rounding, which is why it is there)."""
    gen = torch.Generator().manual_seed(5)
    n, H, D = 97, 2, 80
    q, k, v = (torch.randn(n, H, D, generator=gen) * s for s in (3.0, 3.0, 1.0))
    exact = attention_block(q.double(), k.double(), v.double(), D ** -0.5, faithful=False, out_dtype=torch.float64)
    plain = attention_block(q, k, v, D ** -0.5, faithful=True, out_dtype=torch.float32)
    fa = attention_block(q, k, v, D ** -0.5, faithful=True, out_dtype=torch.float32, exp2=True, key_block=block)
    assert (fa.double() - exact).abs().max() < 1e-5
    assert (plain.double() - exact).abs().max() < 1e-5
    assert not torch.equal(fa, plain)


def test_fp32_vision_baselines_include_the_flash_attention_form(monkeypatch):
    """Half the alternates are FA-form; switching them off changes the baselines (and nothing else)."""
    import kernel_oracle.reference.vision as V

    p = VisionProblem(lengths=(70, 33), H=1, D=64, dtype="float32", logit_scale=8.0, seed=3, path="kwargs")
    call = materialize(p, "cpu")
    with_fa = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
    monkeypatch.setattr(V, "FA_FORM_ALTERNATES", False)
    without = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
    assert len(with_fa.baselines) == len(without.baselines) == FP32_BASELINE_ORDERS
    assert torch.equal(with_fa.baselines[0], without.baselines[0])  # the natural order is the plain form
    changed = [i for i, (a, b) in enumerate(zip(with_fa.baselines, without.baselines)) if not torch.equal(a, b)]
    assert changed == [1, 3, 5, 7], changed


@pytest.mark.parametrize("alt_value", [float("inf"), float("nan")])
def test_the_overflow_alternate_is_a_right_output_and_nothing_else(alt_value):
    """compare(overflow_alternate=): where the LoRA oracle's overflowed alternate is inf (or NaN: that inf
    times a zero further on) and the reference finite, the alternate's value is a right output, as is a
    finite value within the allowance; another non-finite value there, or one elsewhere, is not."""
    ref = _vec(1.0, -2.0, 0.5, 3.0, dtype=torch.float64)
    alt = _vec(1.0, -2.0, alt_value, 3.0, dtype=torch.float64)
    base = _vec(1.0, -2.0, alt_value, 3.0)  # the faithful baseline overflowed there too
    other = -alt_value if alt_value == float("inf") else float("inf")
    assert compare(_vec(1.0, -2.0, alt_value, 3.0), ref, ALL, family="lora", baseline=base, overflow_alternate=alt).ok
    assert compare(_vec(1.0, -2.0, 0.5, 3.0), ref, ALL, family="lora", baseline=base, overflow_alternate=alt).ok
    for wrong in (_vec(1.0, -2.0, other, 3.0), _vec(1.0, -2.0, alt_value, float("inf")), _vec(1.0, -2.0, 0.6, 3.0)):
        c = compare(wrong, ref, ALL, family="lora", baseline=base, overflow_alternate=alt)
        assert not c.ok and c.mismatched == 1, wrong
    assert not compare(_vec(1.0, -2.0, alt_value, 3.0), ref, ALL, family="lora", baseline=base).ok  # no alternate
