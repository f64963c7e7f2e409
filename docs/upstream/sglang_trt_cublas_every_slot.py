"""Reproducer of corpus/sglang-trt-0-5-13-cublas-every-slot.toml: the TRT-LLM-style cuBLAS fast paths of
``step_a_q_fwd``, ``step_b_q_fwd`` and ``step_a_v_fwd`` (``SGLANG_EXPERIMENTAL_LORA_OPTI=1`` with
``SGLANG_OPT_LORA_CUBLAS=1``) with two resident slots, against a hand computation.

    python docs/upstream/sglang_trt_cublas_every_slot.py --wheel sglang-0.5.13-...whl     (CPU or GPU)

The release's file is loaded as docs/upstream/sglang_trt_cublas_step_b_q.py loads it (``load`` there: the
file executed as it is, only its three SGLang imports given).  Two segments of 4 and 2 rows, routed to
slots 0 and 1 of full rank (scalings 1 and 0.5), every row routed, contiguous tensors, so only the slot
can make a path differ.  Each row ``t`` of segment ``s`` (slot ``l = slot(s)``, ``w = qk + vd``) must get

* ``step_a_q_fwd(q, B, batch_info, w)``: ``q[t, h] @ B[l, h*w : h*w + qk]``;
* ``step_b_q_fwd(x, A, batch_info, base)``: ``base[t, h] + scaling[l] * x[t, h] @ A[l]``;
* ``step_a_v_fwd(attn, A, batch_info)``: ``attn[t, h] @ A[l].T``.

``step_b_v_fwd`` has no cuBLAS path in any release.  The script runs the Triton path (switches off) and
the cuBLAS path (switches on) of each.  Exit 1 when a cuBLAS path differs from the hand computation
(0.5.13: segment 1's rows get slot 0's weights and scaling), 0 when all agree (0.5.14 takes each fast
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

H, QK, VD, RANK, C = 2, 24, 16, 16, 32
SEGMENTS, SLOTS, SCALINGS = (4, 2), (0, 1), (1.0, 0.5)


def inputs(device):
    gen = torch.Generator().manual_seed(0)
    rows = sum(SEGMENTS)
    t = {"q": torch.randn(rows, H, QK, generator=gen),  # q_nope (S, H, qk)
         "B": torch.randn(len(SLOTS), H * (QK + VD), RANK, generator=gen) / 4,  # B_buf (L, H*(qk+vd), R)
         "x": torch.randn(rows, H, RANK, generator=gen),  # q_lora_a (S, H, R)
         "A": torch.randn(len(SLOTS), RANK, C, generator=gen) / 4,  # A_buf (L, R, C)
         "base": torch.randn(rows, H, C, generator=gen),  # base_output of step B_q (S, H, C)
         "attn": torch.randn(rows, H, C, generator=gen)}  # attn_output (S, H, C)
    t = {k: v.to(device) for k, v in t.items()}
    indptr = torch.tensor([0, SEGMENTS[0], rows], dtype=torch.int32, device=device)
    bi = types.SimpleNamespace(use_cuda_graph=False, bs=2, num_segments=2, seg_indptr=indptr,
                               weight_indices=torch.tensor(SLOTS, dtype=torch.int32, device=device),
                               lora_ranks=torch.full((2,), RANK, dtype=torch.int32, device=device),
                               scalings=torch.tensor(SCALINGS, device=device), max_len=max(SEGMENTS),
                               seg_lens=torch.tensor(SEGMENTS, dtype=torch.int32, device=device), permutation=None)
    return t, bi


def by_hand(op: str, t: dict, rows: slice, slot: int) -> torch.Tensor:
    """What ``op`` must give on ``rows``, all of one segment routed to ``slot``, in float64."""
    d = {k: v.double() for k, v in t.items()}
    if op == "step_a_q":
        w = d["B"][slot].view(H, QK + VD, RANK)[:, :QK, :]  # (H, qk, R)
        return torch.einsum("thk,hkr->thr", d["q"][rows], w)
    if op == "step_b_q":
        return d["base"][rows] + SCALINGS[slot] * d["x"][rows] @ d["A"][slot]
    return d["attn"][rows] @ d["A"][slot].T  # step_a_v


def call(mod, op: str, t: dict, bi):
    if op == "step_a_q":
        return mod.step_a_q_fwd(t["q"].clone(), t["B"], bi, QK + VD)
    if op == "step_b_q":
        return mod.step_b_q_fwd(t["x"].clone(), t["A"], bi, t["base"].clone())
    return mod.step_a_v_fwd(t["attn"].clone(), t["A"], bi)


def main(argv=None) -> int:
    loaded = both_paths(argv, __doc__.splitlines()[0])
    if loaded is None:
        return 2
    paths, device, _ = loaded
    t, bi = inputs(device)
    segments = [slice(0, SEGMENTS[0]), slice(SEGMENTS[0], sum(SEGMENTS))]
    bad = False
    for op in ("step_a_q", "step_b_q", "step_a_v"):
        for cublas, mod in paths.items():
            got = call(mod, op, t, bi).double()
            errors = [float((got[rows] - by_hand(op, t, rows, slot)).abs().max())
                      for rows, slot in zip(segments, SLOTS)]
            print(f"  {op}, {'cuBLAS' if cublas else 'Triton'} path: max error on slot 0's rows {errors[0]:.2e}, "
                  f"on slot 1's rows {errors[1]:.2e}")
            bad |= cublas and max(errors) > 1e-3
    print("reproduced" if bad else "not reproduced")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
