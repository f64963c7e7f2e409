"""The references are fast enough to be the oracle of every run.

No Python loop over tokens: a prefill batch (4096 tokens x 16 heads in 8 segments) and a decode
batch (1000 one-token segments) each take under :data:`LORA_BOUND_S` per LoRA step in float64, and
the vision reference does 8 images totalling 8192 tokens (16 heads, head dim 80) in under
:data:`VISION_BOUND_S`, on a 2-core CPU.  Each call is warmed up once (allocator, thread pool,
lazy imports) and then timed; a slow measurement is retried a couple of times and the best one
kept (timeit's rule: the minimum is the measurement least disturbed by other processes); when the
machine is overloaded by other jobs, CPU time per thread stands in for wall time.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from kernel_oracle.reference import lora as ref_lora
from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.vision import flashinfer_cudnn_attention
from kernel_oracle.reference.vision_metadata import prepare_flashinfer_cudnn_metadata

LORA_BOUND_S = 2.0
VISION_BOUND_S = 5.0
TRIES = 3  # timed runs at most (the first one under the bound ends the measurement)

# realistic kv_b shape: H=16, qk_nope=v_head_dim=128, kv_lora_rank=512, buffer rank 64, 4 slots
H, QK, VD, C, R = 16, 128, 128, 512, 64
RANKS, SCALINGS = (64, 32, 16, 48), (1.0, 0.5, -1.0, 2.0)

# (name, segment lengths)
LORA_BATCHES = [
    ("prefill_8x512", (512,) * 8),
    ("decode_1000x1", (1,) * 1000),
]
LORA_OPS = ref_lora.LORA_OPS  # reference.signatures


def best_time(fn, bound: float) -> tuple[float, float]:
    """Warm up once, then time up to TRIES calls: (best wall time, best CPU time per thread).

    On a machine busier than its cores (other jobs of a shared CI runner) wall time measures the
    neighbours; the process's CPU time divided by torch's thread count still measures our work.
    """
    fn()
    best_wall = best_cpu = float("inf")
    threads = max(1, torch.get_num_threads())
    for _ in range(TRIES):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, (time.process_time() - c0) / threads)
        if best_wall < bound:
            break
    return best_wall, best_cpu


def assert_within(what: str, bound: float, wall: float, cpu: float) -> None:
    """Wall time is the bound; under overload (load average above the core count) CPU time is."""
    if wall < bound:
        return
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    assert load > cores and cpu < bound, (
        f"{what} took {wall:.2f} s wall, {cpu:.2f} s CPU per thread (bound {bound} s, float64; "
        f"load average {load:.1f} on {cores} cores)")


@pytest.fixture(scope="module", params=LORA_BATCHES, ids=[b[0] for b in LORA_BATCHES])
def lora_batch(request):
    _, lens = request.param
    S = sum(lens)
    gen = torch.Generator().manual_seed(7)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    bi = make_lora_batch_info(lens, [i % len(RANKS) for i in range(len(lens))], RANKS, SCALINGS)
    data = dict(
        bi=bi, B=randn(len(RANKS), H * (QK + VD), R, scale=QK ** -0.5), A=randn(len(RANKS), R, C, scale=R ** -0.5),
        q_nope=randn(S, H, QK), lora_a=randn(S, H, R), latent=randn(S, H, C, scale=C ** -0.5),
        base_c=randn(S, H, C), base_v=randn(S, H, VD),
    )
    return data


def _lora_call(op, d):
    bi, B, A = d["bi"], d["B"], d["A"]
    return {
        "step_a_q": lambda: ref_lora.step_a_q_fwd(d["q_nope"], B, bi, QK + VD),
        "step_b_q": lambda: ref_lora.step_b_q_fwd(d["lora_a"], A, bi, d["base_c"]),
        "step_a_v": lambda: ref_lora.step_a_v_fwd(d["latent"], A, bi),
        "step_b_v": lambda: ref_lora.step_b_v_fwd(d["lora_a"], B, bi, d["base_v"], QK, VD),
        "q_side_fused": lambda: ref_lora.q_side_fused_fwd(d["q_nope"], B, A, bi, d["base_c"], QK + VD),
        "v_side_fused": lambda: ref_lora.v_side_fused_fwd(d["latent"], A, B, bi, d["base_v"], QK, VD),
    }[op]


@pytest.mark.parametrize("op", LORA_OPS)
def test_lora_step_speed(op, lora_batch):
    assert_within(op, LORA_BOUND_S, *best_time(_lora_call(op, lora_batch), LORA_BOUND_S))


def test_vision_speed():
    lengths = (512, 1536, 768, 1024, 1280, 256, 1792, 1024)  # 8 images, 8192 tokens
    T, heads, dim = sum(lengths), 16, 80
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(T, heads, dim, generator=gen, dtype=torch.float64) for _ in range(3))
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    md = prepare_flashinfer_cudnn_metadata(cu, "cpu", elem_per_token=heads * dim)
    call = lambda: flashinfer_cudnn_attention(q, k, v, md.cu_seqlens, 1, T, forward_metadata=md)  # noqa: E731
    assert_within("vision", VISION_BOUND_S, *best_time(call, VISION_BOUND_S))
