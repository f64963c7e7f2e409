"""Reproducer of corpus/sglang-trt-0-5-13-cublas-every-slot.toml: the TRT-LLM-style ``step_a_q_fwd``'s
cuBLAS fast path (``SGLANG_EXPERIMENTAL_LORA_OPTI=1`` with ``SGLANG_OPT_LORA_CUBLAS=1``) with two resident
slots, against a hand computation.

    python docs/upstream/sglang_trt_cublas_every_slot.py --wheel sglang-0.5.13-...whl     (CPU or GPU)

The release's file is loaded as docs/upstream/sglang_trt_cublas_step_b_q.py loads it (``load`` there: the
file executed as it is, only its three SGLang imports given).  Two segments of 4 and 2 rows, routed to
slots 0 and 1 of full rank.  ``step_a_q_fwd(q, B, batch_info, qk + vd)`` must give, for each row of
segment ``s``, ``q[t, h] @ B[slot(s), h*(qk+vd) : h*(qk+vd)+qk]``.  The script runs the Triton path
(switches off) and the cuBLAS path (switches on).  Exit 1 when the cuBLAS path differs from the hand
computation (0.5.13: segment 1's rows get slot 0's weights), 0 when it agrees (0.5.14 takes the fast
path only with one resident slot), 2 when the file cannot be loaded.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_trt_cublas_step_b_q import both_paths  # noqa: E402 - the sibling reproducer's loader

H, QK, VD, RANK = 2, 24, 16, 16
SEGMENTS, SLOTS = (4, 2), (0, 1)


def inputs(device):
    gen = torch.Generator().manual_seed(0)
    rows = sum(SEGMENTS)
    q = torch.randn(rows, H, QK, generator=gen).to(device)
    B = torch.randn(len(SLOTS), H * (QK + VD), RANK, generator=gen).to(device) / 4
    indptr = torch.tensor([0, SEGMENTS[0], rows], dtype=torch.int32, device=device)
    bi = types.SimpleNamespace(use_cuda_graph=False, bs=2, num_segments=2, seg_indptr=indptr,
                               weight_indices=torch.tensor(SLOTS, dtype=torch.int32, device=device),
                               lora_ranks=torch.full((2,), RANK, dtype=torch.int32, device=device),
                               scalings=torch.ones(2, device=device), max_len=max(SEGMENTS),
                               seg_lens=torch.tensor(SEGMENTS, dtype=torch.int32, device=device), permutation=None)
    return q, B, bi


def main(argv=None) -> int:
    loaded = both_paths(argv, __doc__.splitlines()[0])
    if loaded is None:
        return 2
    paths, device = loaded
    q, B, bi = inputs(device)
    w = B.double().view(len(SLOTS), H, QK + VD, RANK)[:, :, :QK, :]  # (slot, H, qk, rank)
    want = torch.empty(sum(SEGMENTS), H, RANK, dtype=torch.float64, device=device)
    start = 0
    for n, slot in zip(SEGMENTS, SLOTS):
        want[start:start + n] = torch.einsum("thk,hkr->thr", q[start:start + n].double(), w[slot])
        start += n
    bad = False
    for cublas, mod in paths.items():
        got = mod.step_a_q_fwd(q.clone(), B, bi, QK + VD).double()
        errors = [float((got[a:b] - want[a:b]).abs().max()) for a, b in ((0, SEGMENTS[0]), (SEGMENTS[0], sum(SEGMENTS)))]
        print(f"  {'cuBLAS' if cublas else 'Triton'} path: max error on slot 0's rows {errors[0]:.2e}, "
              f"on slot 1's rows {errors[1]:.2e}")
        bad |= cublas and max(errors) > 1e-3
    print("reproduced" if bad else "not reproduced")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
