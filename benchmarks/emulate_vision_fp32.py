"""Is our vision kernel's rare fp32 miss its arithmetic?  Re-run saved problems beside an emulation.

Answered another way (2026-11-30, H200): the misses came from the kernel's fp32 logits; float64 logits
remove them (Note [Exact fp32] in kernels/vision/_kernel.py, ``triage_vision_fp32``'s ``--exact``).
This emulation of the old fp32 arithmetic (``KERNEL_ORACLE_VISION_FP32_EXACT=0``) stays for triage.

python -m kernel_oracle.benchmarks.emulate_vision_fp32 SUMMARY.json ...

For each saved fp32 vision problem (materialized on the GPU, where its data was drawn), it prints the
rule's worst ratio for our kernel and for a float64-exact emulation of the kernel's arithmetic as
``tl.dot``'s fp32 FMA path does it: q k^T and P V accumulated one term at a time in order with one
rounding each (FMA), base-2 logits, online softmax over 32-key blocks, division last.  If the
emulation misses like the kernel, the miss is fp32 arithmetic of that structure (the baselines do not
model sequential FMA chains); if only the kernel misses, the kernel computes something else.
"""

from __future__ import annotations

import sys

import torch

LOG2E = 1.4426950408889634


def _fma_dot(a, b, acc=None):
    """(H,M,K) @ (H,K,N) in fp32 with acc = fl32(acc + a_k b_k), k in order (FMA: one rounding)."""
    acc = torch.zeros(a.shape[0], a.shape[1], b.shape[2], dtype=torch.float64, device=a.device) if acc is None \
        else acc.double()
    a64, b64 = a.double(), b.double()
    for k in range(a.shape[2]):
        acc = (acc + a64[:, :, k:k + 1] * b64[:, k:k + 1, :]).float().double()
    return acc.float()


def emulate(q, k, v, scale, block=32):
    """q, k (n,H,D), v (n,H,Dv) fp32 -> (n,H,Dv): the kernel's arithmetic, emulated."""
    qh, kt, vh = q.transpose(0, 1), k.permute(1, 2, 0), v.transpose(0, 1)
    H, n = qh.shape[0], qh.shape[1]
    m = torch.full((H, n, 1), float("-inf"), device=q.device)
    l = torch.zeros(H, n, 1, device=q.device)
    acc = torch.zeros(H, n, vh.shape[2], device=q.device)
    c = torch.tensor(float(scale) * LOG2E, dtype=torch.float32)
    for j in range(0, n, block):
        s = _fma_dot(qh, kt[:, :, j:j + block]) * c.to(q.device)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha, p = torch.exp2(m - m_new), torch.exp2(s - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        acc = _fma_dot(p, vh[:, j:j + block], acc * alpha)
        m = m_new
    return (acc * (1.0 / l)).transpose(0, 1)


def main(argv=None) -> int:
    from kernel_oracle.benchmarks.triage_vision_fp32 import _problems
    from kernel_oracle.fuzz.targets import resolve_target
    from kernel_oracle.harness.check import Case, prepared_call
    from kernel_oracle.reference.tolerance import compare
    from kernel_oracle.reference.vision import flashinfer_cudnn_oracle
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    paths = (argv if argv is not None else sys.argv[1:])
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the data of a GPU soak needs the GPU
    target = resolve_target("triton", device)
    for p in _problems(paths):
        call = prepared_call(Case(p), device)
        ref = flashinfer_cudnn_oracle(*call.args, **call.kwargs)
        base = flashinfer_cudnn_oracle(*call.args, **call.kwargs, faithful=True)
        out = target.entry("vision")(*call.args, **call.kwargs)
        kw = {k: v for k, v in call.kwargs.items() if k not in ("softmax_scale", "forward_metadata")}
        plan = resolve_flashinfer_cudnn(*call.args[:4], call.kwargs.get("softmax_scale"),
                                        call.kwargs.get("forward_metadata"), strict=True, **kw)
        emu = torch.zeros(plan.q.shape[0], plan.q.shape[1], plan.v.shape[2], device=device)
        for b in range(plan.num_sequences):
            n = int(plan.lengths[b])
            if n:
                qs, vs, os_ = int(plan.qk_start[b]), int(plan.v_start[b]), int(plan.o_start[b])
                emu[os_:os_ + n] = emulate(plan.q[qs:qs + n], plan.k[qs:qs + n], plan.v[vs:vs + n], plan.scale)
        if plan.reshape_batch is not None:
            emu = emu.unflatten(0, (plan.reshape_batch, -1))
        rk = compare(out, ref.value, ref.defined, family="vision", baseline=base.baselines)
        re_ = compare(emu.view_as(ref.value), ref.value, ref.defined, family="vision", baseline=base.baselines)
        d = (out.double() - emu.view_as(out).double()).abs()[ref.defined].max().item()
        print(f"D={p.D} lengths={p.lengths} ls={p.logit_scale} seed={p.seed}: kernel ratio {rk.ratio:.3g}, "
              f"emulation ratio {re_.ratio:.3g}, max |kernel - emulation| {d:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
