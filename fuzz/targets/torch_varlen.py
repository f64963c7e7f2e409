"""Target ``torch-varlen``: our contract resolution, then torch's ``varlen_attn`` (a vision peer, CUDA).

``varlen_attn`` takes k and v with their own heads (``enable_gqa``) and a ``window_size`` in
FlashAttention's convention, the reference's (Note [Window and sinks] in
:mod:`reference.vision_arguments`), in the torch releases that have those parameters: where it has no
``enable_gqa`` (torch 2.11), k and v heads are repeated for the query heads that read them (query head
h reads k/v head ``h // (H // H_kv)``, docs/semantics.md#vision-attention); where it has no ``window_size``, the target
declines the window.  It has no attention sinks, so the target declines ``s_aux`` (and refuses one,
naming it, rather than ignoring it)."""

from __future__ import annotations

import torch

from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable
from kernel_oracle.harness.tiles import unknown_model

from .registry import register_target


def _torch_varlen(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception as exc:  # noqa: BLE001
        return unavailable("torch-varlen", f"torch {torch.__version__} has no torch.nn.attention.varlen "
                                            f"({type(exc).__name__})")
    if not str(device).startswith("cuda"):
        return unavailable("torch-varlen", "varlen_attn has no CPU kernel (aten::_flash_attention_forward is "
                                            "CUDA-only); run with --device cuda")
    import inspect

    from kernel_oracle.reference.contracts import raise_contract

    takes = set(inspect.signature(varlen_attn).parameters)
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    def flashinfer_cudnn_attention(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, forward_metadata=None,
                                   **kwargs):
        """Our contract resolution (reference.vision_metadata), then torch's varlen_attn."""
        kwargs.pop("strict", None)
        plan = resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale, forward_metadata, strict=True, **kwargs)
        if plan.sinks is not None:
            raise_contract("vision.strict.unsupported_argument", field="s_aux",
                           got=f"a {tuple(plan.sinks.shape)} tensor", why=NO_SINKS)
        T, H, DV = plan.q.shape[0], plan.q.shape[1], plan.v.shape[2]
        out = torch.zeros(T, H, DV, dtype=plan.q.dtype, device=plan.q.device)
        real = [b for b in range(plan.num_sequences) if int(plan.lengths[b]) > 0]
        if real:
            def gather(t, starts):
                return torch.cat([t[int(starts[b]):int(starts[b]) + int(plan.lengths[b])] for b in real])
            qq, kk, vv = gather(plan.q, plan.qk_start), gather(plan.k, plan.qk_start), gather(plan.v, plan.v_start)
            lens = torch.tensor([int(plan.lengths[b]) for b in real], dtype=torch.int32)
            cu = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lens, 0, dtype=torch.int32)]).to(qq.device)
            mx = int(lens.max())
            extra = {"window_size": plan.window} if "window_size" in takes else {}
            if "enable_gqa" in takes:
                extra["enable_gqa"] = plan.k.shape[1] != H
            elif plan.k.shape[1] != H:  # no enable_gqa: each k/v head once per query head that reads it
                kk, vv = (t.repeat_interleave(H // plan.k.shape[1], dim=1) for t in (kk, vv))
            res = varlen_attn(qq, kk, vv, cu, cu, mx, mx, scale=plan.scale, **extra)
            pos = 0
            for b in real:
                n = int(plan.lengths[b])
                out[int(plan.o_start[b]):int(plan.o_start[b]) + n] = res[pos:pos + n]
                pos += n
        if plan.reshape_batch is not None:
            out = out.unflatten(0, (plan.reshape_batch, -1))
        return out

    return Target("torch-varlen", {"vision": flashinfer_cudnn_attention}, precision="ieee", strict=True,
                  excluded_dtypes={"float32": "varlen_attn (flash attention) supports float16 and bfloat16 only"},
                  notes={op: "torch-varlen is a vision peer only" for op in FAMILY_OPS["lora"]},
                  declines={"s_aux": NO_SINKS, **({} if "window_size" in takes else {"window_size": NO_WINDOW})},
                  tiles={"vision": unknown_model("varlen_attn's blocks are chosen inside torch's flash attention "
                                                 "kernels, which kernel-oracle cannot read")})


NO_SINKS = "torch's varlen_attn has no attention sinks (s_aux); pass s_aux=None"
NO_WINDOW = "this torch's varlen_attn takes no window_size"


register_target("torch-varlen", _torch_varlen, families=("vision",))
