"""Standalone check of an unconfirmed finding: FlashInfer's cuDNN prefill, fp16, a strided v at a shifted offset.

``python -m kernel_oracle.benchmarks.repro_flashinfer_ragged_v`` (a CUDA machine with FlashInfer 0.6.18
and the cuDNN frontend: scripts/flashinfer_wheels.sh).  No harness, oracle or campaign: the tensors and
the ragged element offsets are built here by hand, FlashInfer is called directly in a fresh process (an
empty graph cache, so no stale graph can be replayed), and each sequence is compared with a float64
softmax(q k^T) v.

Why: the H200 main job of 2026-11-30 (``kernel-oracle run --device cuda --time-budget 120``, twice)
reported ``F0003-mismatch-vision-float16`` against ``flashinfer-cudnn``: 989 of 1,024 output elements
wrong (error 4.1 where 0.004 is allowed) for D=16, H=1, lengths (31, 31, 2), 3 spare tokens, v a
strided view (``qkv[:, 2]``, token stride 3*H*D) read from one token later (``v_shift=1``), the output
written two tokens later (``o_shift=2``).  Not yet reproduced outside the suite, so not yet called
FlashInfer's bug: the variants below (v contiguous, no shifts) say which ingredient matters.

``return_lse=False``: the cuDNN of the H200 image (below 9.26) refuses SGLang's ``return_lse=True``
for this layout, and the ``flashinfer-cudnn`` target then runs without the LSE (its module note);
the first version of this script asked for the LSE and measured nothing (2026-11-30: every variant
raised the refusal, then a poisoned graph cache).
"""

from __future__ import annotations

import sys

import torch

VARIANTS = {  # name: (v strided as qkv[:, 2], v token shift, o token shift)
    "as found (v strided, v_shift 1, o_shift 2)": (True, 1, 2),
    "v contiguous": (False, 1, 2),
    "no v shift": (True, 0, 2),
    "no o shift": (True, 1, 0),
    "plain": (False, 0, 0),
}


def run(strided: bool, v_shift: int, o_shift: int, *, lens=(31, 31, 2), spare=3, H=1, D=16,
        dtype=torch.float16, seed=0) -> float:
    """Worst |FlashInfer - float64 attention| over the written tokens of every sequence."""
    from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache

    g = torch.Generator(device="cuda").manual_seed(seed)
    T = sum(lens) + spare
    q = (torch.randn(T, H, D, device="cuda", generator=g) * 8).to(dtype)
    k = torch.randn(T, H, D, device="cuda", generator=g).to(dtype)
    v = torch.randn(T, 3, H, D, device="cuda", generator=g).to(dtype)[:, 2] if strided else \
        torch.randn(T, H, D, device="cuda", generator=g).to(dtype)
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)

    def offsets(shift: int, per_token: int) -> torch.Tensor:  # ragged offsets in elements, (B+1, 1, 1, 1)
        return torch.tensor([(s + shift) * per_token for s in starts], dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)

    B, scale = len(lens), D ** -0.5
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda").view(B, 1, 1, 1)
    out = torch.full((T, H, D), float("nan"), dtype=dtype, device="cuda")
    workspace = torch.empty(128 * 2**20, dtype=torch.uint8, device="cuda")
    res = cudnn_batch_prefill_with_kv_cache(
        q, k, v, scale, workspace, max_token_per_sequence=max(lens), max_sequence_kv=max(lens),
        actual_seq_lens_q=seq, actual_seq_lens_kv=seq, causal=False, return_lse=False,
        batch_offsets_q=offsets(0, H * D), batch_offsets_k=offsets(0, H * D), batch_offsets_v=offsets(v_shift, v.stride(0)),
        batch_offsets_o=offsets(o_shift, H * D), is_cuda_graph_compatible=True, out=out)
    o = res[0] if isinstance(res, tuple) else res
    worst = 0.0
    for b, n in enumerate(lens):
        s = starts[b]
        qs, ks, vs = (x.double() for x in (q[s:s + n], k[s:s + n], v[s + v_shift:s + v_shift + n]))
        p = torch.softmax(torch.einsum("thd,shd->hts", qs, ks) * scale, -1)
        want = torch.einsum("hts,shd->thd", p, vs)
        got = o[s + o_shift:s + o_shift + n].double()
        worst = max(worst, float((got - want).abs().nan_to_num(nan=float("inf")).max()))  # unwritten: inf
    return worst


def main(argv=None) -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    for name, (strided, v_shift, o_shift) in VARIANTS.items():
        try:
            print(f"{name:45s} worst |error| {run(strided, v_shift, o_shift):.4g} (fp16 rounding: about 1e-3)")
        except Exception as exc:  # noqa: BLE001 - one line per variant
            print(f"{name:45s} raised {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
