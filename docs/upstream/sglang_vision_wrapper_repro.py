"""Reproducer of docs/upstream/sglang_vision_gqa_offsets.md and sglang_vision_window_sinks.md: SGLang's
``flashinfer_cudnn`` vision backend (``VisionFlashInferAttention`` in
``sglang/srt/layers/attention/vision.py``) against a hand computation.

    python docs/upstream/sglang_vision_wrapper_repro.py                    # the installed sglang, CUDA
    python docs/upstream/sglang_vision_wrapper_repro.py --wheel sglang-0.5.23-...whl --device cpu
    python docs/upstream/sglang_vision_wrapper_repro.py --wheel ... --device cuda --check gqa

Needs torch; on CUDA also FlashInfer (``flashinfer.prefill.cudnn_batch_prefill_with_kv_cache``).  With
``--wheel`` the release's file is read from its wheel and only the wrapper's own definitions are executed
(the class, its metadata dataclass and helper, two bucket tables), with ``torch``, ``math`` and a
two-pattern ``rearrange`` as their names, so SGLang's runtime need not be installed.  On the CPU the
engine is a plain torch version of ``cudnn_batch_prefill_with_kv_cache`` written here from FlashInfer's
documentation (element offsets counted from each tensor's own data pointer, that tensor's strides inside a
sequence, ``(B, 1, 1, 1)`` lengths): it shows what the wrapper asks for, not what cuDNN does; on CUDA the
real engine runs (where cuDNN refuses ``return_lse=True``, the call is repeated without the LSE, the same
output, and the script says so).

Checks (``--check``, default all):

* ``gqa``: k and v with fewer heads than q (``VisionAttention(num_kv_heads=...)``), two sequences: the
  wrapper passes ``batch_offsets_k=indptr_qk``, q's element offsets, so the second sequence reads other
  keys (or past the end of k);
* ``window``: ``window_size`` and ``s_aux`` (sinks), which ``VisionAttention`` passes every backend from
  0.5.11: the output is the same with and without them;
* ``softmax_scale``: (0.5.10) a ``softmax_scale`` keyword is ignored;
* ``empty``: (from 0.5.17) ``prepare_flashinfer_cudnn_vision_attention_metadata`` on a batch of no sequences;
* ``gqa_past_end``: ``gqa`` at a tower's size, where q's offsets put k's reads far past its end (on CUDA an
  illegal memory access that breaks the process's CUDA context: it runs last).

Exit 1 when a check reproduces, 0 when none does, 2 when the wrapper cannot be loaded.
"""

from __future__ import annotations

import __future__
import argparse
import ast
import dataclasses
import math
import sys
import typing
import zipfile

import torch

VISION = "sglang/srt/layers/attention/vision.py"
WANTED = ("VisionFlashInferAttention", "VisionAttentionMetadata", "prepare_vision_attention_metadata",
          "prepare_flashinfer_cudnn_vision_attention_metadata", "BATCH_BUCKETS", "FLASHINFER_MAX_SEQLEN_BUCKETS")


def rearrange(x, pattern, **axes):
    """The two einops patterns the wrapper uses."""
    if pattern == "b s ... -> (b s) ...":
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    if pattern == "(b s) h d -> b s h d":
        return x.reshape(axes["b"], -1, *x.shape[1:])
    raise ValueError(pattern)


def torch_prefill(q, k, v, scale, workspace, *, max_token_per_sequence, max_sequence_kv, actual_seq_lens_q,
                  actual_seq_lens_kv, batch_offsets_q, batch_offsets_k, batch_offsets_v, batch_offsets_o, causal,
                  return_lse, out=None, **_):
    """FlashInfer's documented non-paged ragged prefill in torch (float32 softmax, grouped heads)."""
    out = torch.empty(q.shape[0], q.shape[1], v.shape[2], dtype=q.dtype) if out is None else out
    group = q.shape[1] // k.shape[1]
    offs = [t.reshape(-1).tolist() for t in (batch_offsets_q, batch_offsets_k, batch_offsets_v, batch_offsets_o)]
    for b, n in enumerate(actual_seq_lens_q.reshape(-1).tolist()):
        n = min(n, max_token_per_sequence)
        if n:
            qb, kb, vb, ob = (torch.as_strided(x, (n, *x.shape[1:]), x.stride(), x.storage_offset() + o[b])
                              for x, o in zip((q, k, v, out), offs))
            s = qb.float().transpose(0, 1) @ kb.float().repeat_interleave(group, 1).permute(1, 2, 0) * scale
            ob.copy_((s.softmax(-1) @ vb.float().repeat_interleave(group, 1).transpose(0, 1)).transpose(0, 1))
    return out, None


def cuda_prefill():
    from flashinfer.prefill import cudnn_batch_prefill_with_kv_cache as real

    def prefill(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - cuDNN < 9.26 refuses return_lse=True on ragged outputs
            if not kwargs.get("return_lse"):
                raise
            print(f"  (the engine refused return_lse=True: {str(exc).splitlines()[0][:120]}; repeated without it)")
            return real(*args, **{**kwargs, "return_lse": False})
    return prefill


def load(wheel, engine):
    """``(VisionFlashInferAttention, the metadata helper or None)``."""
    if wheel is None:
        from sglang.srt.layers.attention import vision

        vision.cudnn_batch_prefill_with_kv_cache = engine
        return vision.VisionFlashInferAttention, getattr(vision, WANTED[3], None)
    tree = ast.parse(zipfile.ZipFile(wheel).read(VISION).decode())
    keep = [n for n in tree.body if (getattr(n, "name", None) in WANTED) or
            (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in WANTED for t in n.targets))]
    ns = {"torch": torch, "nn": torch.nn, "math": math, "dataclasses": dataclasses, "Optional": typing.Optional,
          "rearrange": rearrange, "_is_cuda": True, "cudnn_batch_prefill_with_kv_cache": engine,
          "__name__": "sglang_vision_standalone"}
    sys.modules["sglang_vision_standalone"] = type(sys)("sglang_vision_standalone")
    sys.modules["sglang_vision_standalone"].__dict__.update(ns)  # dataclasses look the module up by name
    mod = sys.modules["sglang_vision_standalone"]
    code = compile(ast.Module(keep, []), VISION, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, mod.__dict__)  # noqa: S102 - the release's own definitions
    return mod.VisionFlashInferAttention, getattr(mod, WANTED[3], None)


def by_hand(q, k, v, scale, window=None, sinks=None):
    """Softmax attention of one sequence in float64: query head h on kv head h // group; ``window``
    (left, right) keeps keys with -left <= j - i <= right; ``sinks`` (H,) adds one logit per head."""
    n, H, _ = q.shape
    group = H // k.shape[1]
    out = torch.empty(n, H, v.shape[2], dtype=torch.float64)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for h in range(H):
        s = q[:, h].double() @ k[:, h // group].double().T * scale
        if window is not None:
            s = s.masked_fill(~((j - i >= -window[0]) & (j - i <= window[1])), float("-inf"))
        m = s.max(1, keepdim=True).values if sinks is None else torch.maximum(s.max(1, keepdim=True).values,
                                                                              sinks[h].double().expand(n, 1))
        p = torch.exp(s - m)
        den = p.sum(1, keepdim=True) + (0 if sinks is None else torch.exp(sinks[h].double() - m))
        out[:, h] = (p / den) @ v[:, h // group].double()
    return out


def _call(cls, device, q, k, v, lens, widths, **kwargs):
    """The wrapper on sequences ``lens`` packed from token 0, element offsets per tensor's width."""
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    packed = torch.cat([cu * w for w in widths])
    module = cls(workspace_buffer=torch.empty(128 * 2**20, dtype=torch.uint8, device=device))
    return module.forward(q, k, v, cu_seqlens=packed, bsz=1, seq_len=q.shape[0],
                          sequence_lengths=torch.tensor(lens, dtype=torch.int32, device=device), max_seqlen=4096,
                          **kwargs)


def check_gqa(cls, helper, device, dtype) -> bool:
    H, Hkv, D, lens, T = 4, 2, 64, [3, 5], 20
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(T, h, D, generator=gen).to(device, dtype) for h in (H, Hkv, Hkv))
    out = _call(cls, device, q, k, v, lens, (H * D, Hkv * D, H * D)).cpu()  # v and o at their own widths
    right = by_hand(q[3:8].cpu(), k[3:8].cpu(), v[3:8].cpu(), D ** -0.5)
    read = by_hand(q[3:8].cpu(), k[6:11].cpu(), v[3:8].cpu(), D ** -0.5)  # keys from q's element offset 3*H*D
    err, err_read = (float((out[3:8].double() - x).abs().max()) for x in (right, read))
    first = float((out[:3].double() - by_hand(q[:3].cpu(), k[:3].cpu(), v[:3].cpu(), D ** -0.5)).abs().max())
    print(f"gqa: q {H} heads, k/v {Hkv} heads, sequences {lens}: sequence 0 error {first:.4f}; sequence 1 error "
          f"{err:.4f} against its own keys (k tokens 3-7), {err_read:.4f} against k tokens 6-10")
    return err > 0.05


def check_window(cls, helper, device, dtype) -> bool:
    H, D, lens = 2, 64, [6, 4]
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(10, H, D, generator=gen).to(device, dtype) for _ in range(3))
    sinks = torch.tensor([2.0, -1.0], device=device, dtype=dtype)
    plain = _call(cls, device, q, k, v, lens, (H * D,) * 3).cpu()
    given = _call(cls, device, q, k, v, lens, (H * D,) * 3, window_size=(1, 1), s_aux=sinks).cpu()
    want = by_hand(q[:6].cpu(), k[:6].cpu(), v[:6].cpu(), D ** -0.5, window=(1, 1), sinks=sinks.cpu())
    err = float((given[:6].double() - want).abs().max())
    same = "identical to" if torch.equal(plain, given) else "differs from"
    print(f"window: window_size=(1, 1) and s_aux={sinks.tolist()} given: output {same} the call without them; "
          f"error {err:.4f} against windowed attention with sinks")
    return torch.equal(plain, given) and err > 0.05


def check_softmax_scale(cls, helper, device, dtype) -> bool:
    H, D, lens = 2, 64, [5, 4]
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(9, H, D, generator=gen).to(device, dtype) for _ in range(3))
    out = _call(cls, device, q, k, v, lens, (H * D,) * 3, softmax_scale=0.37).cpu()
    err = float((out[:5].double() - by_hand(q[:5].cpu(), k[:5].cpu(), v[:5].cpu(), 0.37)).abs().max())
    print(f"softmax_scale: 0.37 given: error {err:.4f} against the hand computation with that scale")
    return err > 0.05


def check_empty(cls, helper, device, dtype) -> bool:
    if helper is None:
        print("empty: this release has no prepare_flashinfer_cudnn_vision_attention_metadata")
        return False
    try:
        helper(torch.zeros(1, dtype=torch.int32), torch.device(device), elem_per_token=128)
    except Exception as exc:  # noqa: BLE001 - the behaviour under test
        print(f"empty: the metadata helper on a batch of no sequences raises {type(exc).__name__}: "
              f"{str(exc).splitlines()[0]}")
        return True
    print("empty: the metadata helper builds metadata for a batch of no sequences")
    return False


def check_gqa_past_end(cls, helper, device, dtype) -> bool:
    """The GQA offsets of ``check_gqa`` at the size of a real tower: 15 query heads on 3 kv heads, 14
    sequences of 480 tokens, no window, no sinks.  q's element offset of the last sequence is 5x k's, so
    the engine reads keys up to four times k's size past its end: on CUDA an illegal memory access
    where that lands outside every allocation (the process's CUDA context is then broken: run this
    check last, or alone).  The same call with 15 kv heads first, as the control."""
    H, D, lens = 15, 64, [480] * 14
    T = sum(lens)
    gen = torch.Generator().manual_seed(3)
    for hkv in (H, 3):
        q, k, v = (torch.randn(T, h, D, generator=gen).to(device, dtype) for h in (H, hkv, hkv))
        try:
            out = _call(cls, device, q, k, v, lens, (H * D, hkv * D, H * D))
            if device == "cuda":
                torch.cuda.synchronize()
            ok = bool(torch.isfinite(out.float()).all())
        except Exception as exc:  # noqa: BLE001 - the behaviour under test
            print(f"gqa_past_end: {H} q heads, {hkv} kv heads, {len(lens)} x {lens[0]} tokens: raises "
                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            return hkv < H
        print(f"gqa_past_end: {H} q heads, {hkv} kv heads, {len(lens)} x {lens[0]} tokens: returns "
              f"({'finite' if ok else 'non-finite'} output)")
    return False


CHECKS = {"gqa": check_gqa, "window": check_window, "softmax_scale": check_softmax_scale, "empty": check_empty,
          "gqa_past_end": check_gqa_past_end}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", default=None, help="an sglang wheel (default: the installed sglang)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    ap.add_argument("--check", default="all", choices=("all", *CHECKS))
    args = ap.parse_args(argv)
    try:
        engine = cuda_prefill() if args.device == "cuda" else torch_prefill
        cls, helper = load(args.wheel, engine)
    except Exception as exc:  # noqa: BLE001 - reported, exit 2
        print(f"cannot load the wrapper: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"engine: {'FlashInfer (cuDNN)' if args.device == 'cuda' else 'torch (the CPU stand-in)'}; "
          f"wrapper from {args.wheel or 'the installed sglang'}")
    hits = [name for name, fn in CHECKS.items()
            if args.check in ("all", name) and fn(cls, helper, args.device, torch.bfloat16)]
    print("reproduced: " + (", ".join(hits) if hits else "none"))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
