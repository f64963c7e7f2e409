"""A pure-torch ``cudnn_batch_prefill_with_kv_cache``: the engine under SGLang's vision wrapper on
machines without a GPU.

Note [The CPU prefill engine]
-----------------------------
SGLang's ``VisionFlashInferAttention.forward`` (every release, :mod:`.sglang_vision`) ends in one
call of FlashInfer's ``cudnn_batch_prefill_with_kv_cache``.  To test *the wrapper* where cuDNN
cannot run, this module implements that call from FlashInfer's documentation (0.6.18, the
non-paged ragged form SGLang uses), and nothing else:

* ``q`` ``(Tq, Hq, D)``, ``k_cache`` ``(Tk, Hkv, D)``, ``v_cache`` ``(Tk, Hkv, Dv)``, float16 or
  bfloat16 (cuDNN SDPA's types; anything else raises ``TypeError``); ``Hq`` a multiple of ``Hkv``:
  query head ``h`` attends key/value head ``h // (Hq // Hkv)`` (GQA / MQA, k and v have the heads
  they have);
* ``actual_seq_lens_q`` / ``actual_seq_lens_kv`` ``(B, 1, 1, 1)`` on ``q``'s device; ``B > 1``
  needs ``batch_offsets_q`` and ``batch_offsets_o`` (FlashInfer's own ``ValueError``);
* ``batch_offsets_{q,k,v,o}``: ``B+1`` cumulative **element** offsets (any shape holding ``B+1``
  numbers, e.g. SGLang's ``(B+1, 1, 1, 1)`` views), each applied to *its own tensor's* data
  pointer; inside a sequence tokens, heads and dims are addressed with that tensor's own strides
  (a view into an interleaved qkv buffer is read as such).  Sequence ``b`` of ``n_q`` queries and
  ``n_kv`` keys starts at element ``batch_offsets_x[b]`` of tensor ``x``, whatever ``x``'s width:
  an offset computed for another tensor reads other tokens, exactly as on the GPU;
* the graph's sequence dimension is ``max_token_per_sequence`` / ``max_sequence_kv``: queries and
  keys past it are neither computed nor read (a too-small bound drops rows);
* out: ``(Tq, Hq, Dv)`` in ``o_data_type`` or ``q``'s dtype, allocated empty unless given; only the
  sequences' rows are written; ``return_lse``: the natural log-sum-exp of the scaled logits,
  float32 ``(B, max_token_per_sequence, Hq)`` (rows past a sequence NaN);
* ``causal=False`` only, non-paged only, element units only: what SGLang's wrapper calls (anything
  else raises ``NotImplementedError`` naming the argument).

An offset that runs past a tensor's storage (or below it) raises an :class:`IndexError` naming the
tensor, the sequence and the elements: on the CPU an out-of-bounds read or write is an error, not garbage.  Inside the
storage (past a view's end, in the rest of its buffer) it reads what is there, as the GPU does.
Scores and softmax are computed in float32 (cuDNN's ``compute_data_type``), the product with v in
float32, the output rounded once.  An empty batch returns an empty output (cuDNN refuses null
pointers there: ``harness/known_issues.toml``, ``flashinfer-cudnn-empty-batch``).
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["ENGINE_DTYPES", "cudnn_batch_prefill_with_kv_cache"]

ENGINE_DTYPES = (torch.float16, torch.bfloat16)


def _offsets(name: str, t: Optional[torch.Tensor], count: int) -> Optional[list[int]]:
    """``t``'s ``count`` element offsets as ints (None stays None)."""
    if t is None:
        return None
    flat = t.reshape(-1)
    if int(flat.numel()) != count:
        raise ValueError(f"{name} holds {int(flat.numel())} offsets; pass batch_size + 1 = {count}")
    return [int(x) for x in flat.tolist()]


def _lengths(name: str, t: torch.Tensor, q: torch.Tensor) -> list[int]:
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or tuple(t.shape[1:]) != (1, 1, 1):
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} has shape {shape}; FlashInfer documents (batch_size, 1, 1, 1)")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device}, q on {q.device}; the cuDNN path needs both on q's device")
    return [int(x) for x in t.reshape(-1).tolist()]


def _window(name: str, b: int, x: torch.Tensor, offset: int, n: int) -> torch.Tensor:
    """``n`` tokens of ``x`` starting at element ``offset`` of its data, with ``x``'s own strides;
    an :class:`IndexError` naming the tensor, the sequence and the elements when they leave its storage."""
    start = x.storage_offset() + offset
    end = start + sum((size - 1) * stride for size, stride in zip((n, x.shape[1], x.shape[2]), x.stride())) + 1
    storage = x.untyped_storage().nbytes() // x.element_size()
    if offset < 0 or end > storage:
        raise IndexError(f"cudnn_batch_prefill_with_kv_cache (CPU engine): sequence {b} of {name} spans elements "
                         f"[{start}, {end}) of a storage of {storage} elements (batch_offsets_{name[0]}[{b}] = "
                         f"{offset}): an out-of-bounds access, on a GPU a read of other memory or a fault")
    return torch.as_strided(x, (n, x.shape[1], x.shape[2]), x.stride(), start)


def _refuse_unsupported(q, k_cache, v_cache, *, block_tables, causal, batch_offsets_units, scales) -> None:
    if causal:
        raise NotImplementedError("causal=True: the CPU engine implements SGLang's vision call (causal=False)")
    if block_tables is not None or k_cache.dim() != 3 or v_cache.dim() != 3:
        raise NotImplementedError("a paged KV cache: the CPU engine implements the non-paged (T, H, D) form")
    if batch_offsets_units != "elements":
        raise NotImplementedError(f"batch_offsets_units={batch_offsets_units!r}: the CPU engine takes 'elements'")
    if any(s is not None for s in scales):
        raise NotImplementedError("FP8 scales: the CPU engine takes float16 and bfloat16")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype not in ENGINE_DTYPES:
            raise TypeError(f"{name} is {t.dtype}; cuDNN SDPA takes torch.float16 and torch.bfloat16")
    if q.dim() != 3 or k_cache.shape[1] == 0 or q.shape[1] % k_cache.shape[1] or k_cache.shape[1] != v_cache.shape[1]:
        raise ValueError(f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}: "
                         f"need (T, Hq, D), (T, Hkv, D), (T, Hkv, Dv) with Hq a multiple of Hkv")


def _attend(qb: torch.Tensor, kb: torch.Tensor, vb: torch.Tensor, scale: float):
    """softmax(q k^T * scale) v in float32 with grouped heads: (n, Hq, D), (m, Hkv, D), (m, Hkv, Dv)
    -> output (n, Hq, Dv) float32 and the log-sum-exp (n, Hq) float32."""
    group = qb.shape[1] // kb.shape[1]
    k = kb.float().repeat_interleave(group, dim=1).permute(1, 2, 0)  # (Hq, D, m)
    v = vb.float().repeat_interleave(group, dim=1).transpose(0, 1)  # (Hq, m, Dv)
    s = torch.matmul(qb.float().transpose(0, 1), k) * scale  # (Hq, n, m)
    lse = torch.logsumexp(s, dim=-1)  # (Hq, n)
    out = torch.matmul(torch.softmax(s, dim=-1), v)  # (Hq, n, Dv)
    return out.transpose(0, 1), lse.transpose(0, 1)


def cudnn_batch_prefill_with_kv_cache(q, k_cache, v_cache, scale, workspace_buffer=None, *, max_token_per_sequence,
                                      max_sequence_kv, actual_seq_lens_q=None, actual_seq_lens_kv=None,
                                      block_tables=None, causal, return_lse, q_scale=None, k_scale=None,
                                      v_scale=None, batch_offsets_q=None, batch_offsets_o=None, batch_offsets_k=None,
                                      batch_offsets_v=None, batch_offsets_stats=None,
                                      batch_offsets_units="elements", out=None, lse=None,
                                      is_cuda_graph_compatible=False, backend=None, o_data_type=None):
    """FlashInfer's ``cudnn_batch_prefill_with_kv_cache`` in torch (Note [The CPU prefill engine]):
    returns ``(out (Tq, Hq, Dv), lse (B, max_token_per_sequence, Hq) float32 or None)``."""
    _refuse_unsupported(q, k_cache, v_cache, block_tables=block_tables, causal=causal,
                        batch_offsets_units=batch_offsets_units, scales=(q_scale, k_scale, v_scale))
    if batch_offsets_stats is not None:
        raise NotImplementedError("batch_offsets_stats: the CPU engine writes the padded (B, S, H) stats only")
    lens_q = _lengths("actual_seq_lens_q", actual_seq_lens_q, q)
    lens_kv = _lengths("actual_seq_lens_kv", actual_seq_lens_kv, q)
    B = len(lens_q)
    if len(lens_kv) != B:
        raise ValueError(f"actual_seq_lens_q has {B} entries, actual_seq_lens_kv {len(lens_kv)}")
    if B > 1 and (batch_offsets_q is None or batch_offsets_o is None):
        raise ValueError("batch_offsets_q and batch_offsets_o are required when batch_size > 1")
    zeros = [0] * (B + 1)
    off_q = _offsets("batch_offsets_q", batch_offsets_q, B + 1) or zeros
    off_o = _offsets("batch_offsets_o", batch_offsets_o, B + 1) or zeros
    off_k = _offsets("batch_offsets_k", batch_offsets_k, B + 1) or zeros
    off_v = _offsets("batch_offsets_v", batch_offsets_v, B + 1) or zeros
    H, Dv = q.shape[1], v_cache.shape[2]
    if out is None:
        out = torch.empty(q.shape[0], H, Dv, dtype=o_data_type or q.dtype, device=q.device)
    if return_lse and lse is None:
        lse = torch.full((B, int(max_token_per_sequence), H), float("nan"), dtype=torch.float32, device=q.device)
    for b in range(B):
        n = max(0, min(lens_q[b], int(max_token_per_sequence)))
        m = max(0, min(lens_kv[b], int(max_sequence_kv)))
        if n == 0 or m == 0:
            continue
        ob, lb = _attend(_window("q", b, q, off_q[b], n), _window("k_cache", b, k_cache, off_k[b], m),
                         _window("v_cache", b, v_cache, off_v[b], m), float(scale))
        _window("out", b, out, off_o[b], n).copy_(ob.to(out.dtype))
        if return_lse:
            lse[b, :n] = lb
    return out, (lse if return_lse else None)
