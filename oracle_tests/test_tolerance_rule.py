"""The tolerance rule itself (reference.tolerance): it must not cry wolf on a correct computation
and must still catch a wrong one.

The false-alarm check uses computations that are correct by construction: the same torch fp32
attention with the head dim and keys visited in a random order (mathematically identical).  See
Note [Baseline orders] in reference/tolerance.py for why the rule takes the worst of several
baseline orders, and the numbers measured before the change.
"""

from __future__ import annotations

import pytest
import torch

from kernel_oracle.harness.problems import VisionProblem, materialize
from kernel_oracle.reference.tolerance import compare
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
