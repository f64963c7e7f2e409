"""A user's own tests of their kernel (toy_kernels) with kernel-oracle: the API, the strategies and
the pytest plugin's ``oracle_target`` fixture (targets from ``--oracle-target`` or pytest.ini)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from hypothesis import given, settings

import kernel_oracle
from kernel_oracle.strategies import cases
from toy_kernels import buggy, lora

H, QK, VD, R = 2, 16, 8, 8
FULL_K = QK + VD


@dataclass
class LoRABatchInfo:
    """The user's own batch info (SGLang's field names): kernel-oracle only reads the fields."""

    use_cuda_graph: bool
    bs: int
    num_segments: int
    seg_indptr: torch.Tensor
    weight_indices: torch.Tensor
    lora_ranks: torch.Tensor
    scalings: torch.Tensor
    max_len: Optional[int]
    seg_lens: Optional[torch.Tensor]
    permutation: Optional[torch.Tensor]


def batch(seg_lens=(3, 5), slots=(1, 0), ranks=(8, 4), permute=True) -> LoRABatchInfo:
    """Two segments routed to slots 1 and 0 (ranks 4 and 8), rows permuted."""
    S = sum(seg_lens)
    indptr = torch.tensor([0, *torch.tensor(seg_lens).cumsum(0).tolist()], dtype=torch.int32)
    perm = torch.randperm(S, generator=torch.Generator().manual_seed(0)) if permute else None
    return LoRABatchInfo(False, len(seg_lens), len(seg_lens), indptr, torch.tensor(slots, dtype=torch.int32),
                         torch.tensor(ranks, dtype=torch.int32), torch.ones(len(ranks)), max(seg_lens),
                         torch.tensor(seg_lens, dtype=torch.int32), perm)


def step_a_q_inputs(dtype=torch.float32):
    bi = batch()
    S = int(bi.seg_indptr[-1])
    q_nope = torch.randn(S, H, QK, dtype=dtype)
    B_buf = torch.randn(2, H * FULL_K, R, dtype=dtype) * QK ** -0.5
    return q_nope, B_buf, bi, FULL_K


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_step_a_q_matches_the_oracle(dtype):
    # strict=False: like SGLang's kernels, ours does not validate malformed metadata
    kernel_oracle.assert_matches("step_a_q", lora.step_a_q_fwd, *step_a_q_inputs(dtype), strict=False)


def test_missing_max_len_raises_the_upstream_error():
    q_nope, B_buf, bi, full_k = step_a_q_inputs()
    bi.max_len, bi.seg_lens = None, None  # the oracle raises; the kernel must raise the same, word for word
    kernel_oracle.assert_matches("step_a_q", lora.step_a_q_fwd, q_nope, B_buf, bi, full_k, strict=False)


def test_the_planted_bug_is_caught_and_located():
    with pytest.raises(AssertionError, match=r"(?s)Tensor-likes are not close!.*"
                                             r"Where: token=\d+, head=\d, segment=\d, slot=\d.*Reproduce: "):
        kernel_oracle.assert_matches("step_a_q", buggy.step_a_q_fwd, *step_a_q_inputs(), strict=False)


def _property(fns: dict, *, strict: bool, precisions: Optional[dict] = None, device: str = "cpu",
              max_examples: Optional[int] = None):
    """Valid problems, partial metadata and upstream-contract breakers of the ops in ``fns``, as
    tensors on ``device``; ``precisions``: op -> how the kernel runs fp32 matmuls (default ``"ieee"``)."""
    @settings(max_examples=max_examples) if max_examples else (lambda f: f)
    @given(cases("lora", categories=("valid", "partial", "upstream"), ops=sorted(fns), limits="tiny"))
    def check(case):
        call = kernel_oracle.materialize(case, device)
        precision = (precisions or {}).get(case.op, "ieee")
        kernel_oracle.assert_matches(case.op, fns[case.op], *call.args, strict=strict, precision=precision,
                                     **call.kwargs)
    check()


def test_properties_of_every_target(oracle_target, oracle_device):
    """Runs on each ``--oracle-target`` (pytest.ini: toy_kernels.lora)."""
    ops = oracle_target.ops("lora")
    if not ops:
        pytest.skip(f"{oracle_target.name} has no kv_b LoRA entry point")
    _property({op: oracle_target.entry(op) for op in ops}, strict=oracle_target.strict,
              precisions={op: oracle_target.precision_for(op) for op in ops}, device=oracle_device)


@pytest.mark.xfail(raises=AssertionError, strict=True, reason="toy_kernels.buggy ignores the permutation")
def test_properties_find_the_planted_bug():
    _property({"step_a_q": buggy.step_a_q_fwd, "step_a_v": buggy.step_a_v_fwd}, strict=False, max_examples=60)
