"""Vision-attention metadata for the ``flashinfer_cudnn`` contract: type, builder, resolution.

Note [Packed indptrs]
---------------------
SGLang's ``flashinfer_cudnn`` backend receives ``3*(B+1)`` **element** offsets
``[qk_indptr(B+1), v_indptr(B+1), o_indptr(B+1)]``: each counted from its tensor's data pointer, a
token offset times that tensor's token stride.  Batches are padded to buckets (8, 16, 32, 64, then
multiples of 8) with zero-length entries, and ``max_seqlen`` is bucketed upward (4K..128K, then
multiples of 128K) so that cuDNN graphs can be cached.

:func:`resolve_flashinfer_cudnn` applies SGLang's resolution order and its six upstream messages
(contract table, ``origin="upstream"``), then the extra arguments (Note [Window and sinks] in
:mod:`reference.vision_arguments`), then our strict checks, and returns a :class:`VisionPlan` of token
ranges that both the reference and our kernel consume.

Note [Grouped-query attention]
------------------------------
k and v may have ``H_kv`` heads with ``H % H_kv == 0`` (GQA; MQA is ``H_kv == 1``): query head ``h``
attends key/value head ``h // (H // H_kv)``.  Sequence ``b`` covers the same tokens of q and k: its
token offset is ``qk_indptr[b]`` divided by *q's* token stride, and k's elements are found from that
token with k's own strides (v and the output keep their own indptrs, each divided by its own token
stride).  SGLang hands cuDNN ``batch_offsets_k = batch_offsets_q``, element offsets in q's units; with
a k of another width those name other keys, which this resolution makes visible instead of inheriting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from kernel_oracle.reference._helpers import (check_metadata_tensor, describe_layout, describe_tensor, overlap_problem,
                                              scale_as_float)
from kernel_oracle.reference.contracts import raise_contract
from kernel_oracle.reference.strict import resolve_strict
from kernel_oracle.reference.vision_arguments import NO_WINDOW, resolve_arguments

__all__ = [
    "BATCH_BUCKETS",
    "MAX_SEQLEN_BUCKETS",
    "VisionAttentionMetadata",
    "VisionPlan",
    "bucket_batch_size",
    "bucket_max_seqlen",
    "check_attention_operands",
    "prepare_flashinfer_cudnn_metadata",
    "prepare_flashinfer_cudnn_vision_attention_metadata",
    "resolve_flashinfer_cudnn",
    "select_metadata",
]

# batch sizes are padded up to one of these (then to a multiple of the first)
BATCH_BUCKETS = (8, 16, 32, 64)
# max_seqlen is bucketed up to one of these (then to a multiple of the last)
MAX_SEQLEN_BUCKETS = (4096, 8192, 16384, 32768, 65536, 131072)


def bucket_batch_size(batch_size: int) -> int:
    for b in BATCH_BUCKETS:
        if b >= batch_size:
            return b
    return -(-batch_size // BATCH_BUCKETS[0]) * BATCH_BUCKETS[0]


def bucket_max_seqlen(real_max: int) -> int:
    if real_max <= 0:
        return MAX_SEQLEN_BUCKETS[0]
    for s in MAX_SEQLEN_BUCKETS:
        if s >= real_max:
            return s
    return -(-real_max // MAX_SEQLEN_BUCKETS[-1]) * MAX_SEQLEN_BUCKETS[-1]


@dataclass
class VisionAttentionMetadata:
    """Same fields as SGLang's ``VisionAttentionMetadata`` (duck-typed everywhere).

    ``cu_seqlens`` int32 (B+1,) token offsets; ``seq_lens`` int32 (B,); ``max_seqlen`` int;
    ``packed_indptrs`` int32 (3*(B_pad+1),) element offsets; ``sequence_lengths`` int32 (B_pad,) or
    (B_pad,1,1,1); ``flashinfer_max_seqlen`` the bucketed int.
    """

    cu_seqlens: Optional[torch.Tensor] = None
    seq_lens: Optional[torch.Tensor] = None
    max_seqlen: Optional[int] = None
    packed_indptrs: Optional[torch.Tensor] = None
    sequence_lengths: Optional[torch.Tensor] = None
    flashinfer_max_seqlen: Optional[int] = None


def prepare_flashinfer_cudnn_metadata(
    cu_seqlens: Sequence[int] | torch.Tensor,
    device: torch.device | str,
    *,
    elem_per_token: int,
    v_elem_per_token: Optional[int] = None,
    o_elem_per_token: Optional[int] = None,
    v_elem_offset: int = 0,
    o_elem_offset: int = 0,
    sequence_lengths_4d: bool = False,
) -> VisionAttentionMetadata:
    """Build the backend metadata from token offsets ``cu_seqlens`` (B+1,), as SGLang does.

    ``elem_per_token``: q/k token stride in elements (``H*D`` when contiguous).  v and o default to
    the same layout; give ``v_elem_per_token`` / ``v_elem_offset`` when v is a strided view (e.g.
    inside an interleaved qkv buffer: stride ``3*H*D``, offset ``2*H*D`` from ... its own pointer is
    used, so the offset is usually 0), and ``o_*`` for an output layout that differs.
    """
    if isinstance(elem_per_token, bool) or not isinstance(elem_per_token, int) or elem_per_token <= 0:
        raise ValueError(f"Expected elem_per_token to be a positive int but got elem_per_token={elem_per_token!r}")
    tok = torch.as_tensor(cu_seqlens).detach().to("cpu", torch.int64).reshape(-1)
    if tok.numel() == 0:
        raise ValueError("Expected cu_seqlens with at least one entry (B+1 token offsets) but got an empty one")
    lens = tok[1:] - tok[:-1]
    if (lens < 0).any():
        raise ValueError(f"Expected non-decreasing cu_seqlens but got cu_seqlens={tok.tolist()}")
    B = int(lens.numel())
    B_pad = bucket_batch_size(B)
    tok_pad = torch.cat([tok, tok[-1:].expand(B_pad - B)])
    lens_pad = torch.cat([lens, torch.zeros(B_pad - B, dtype=torch.int64)])
    v_ept = elem_per_token if v_elem_per_token is None else v_elem_per_token
    o_ept = elem_per_token if o_elem_per_token is None else o_elem_per_token
    packed = torch.cat([tok_pad * elem_per_token, v_elem_offset + tok_pad * v_ept, o_elem_offset + tok_pad * o_ept])
    if packed.numel() and int(packed.max()) >= 2**31:
        raise ValueError(f"element offsets reach {int(packed.max())}, beyond int32; split the batch")
    real_max = int(lens.max()) if B else 0
    seq = lens_pad.to(torch.int32)
    if sequence_lengths_4d:
        seq = seq.view(B_pad, 1, 1, 1)
    return VisionAttentionMetadata(
        cu_seqlens=tok.to(device=device, dtype=torch.int32),
        seq_lens=lens.to(device=device, dtype=torch.int32),
        max_seqlen=real_max,
        packed_indptrs=packed.to(device=device, dtype=torch.int32),
        sequence_lengths=seq.to(device=device),
        flashinfer_max_seqlen=bucket_max_seqlen(real_max),
    )


def prepare_flashinfer_cudnn_vision_attention_metadata(cu_seqlens: torch.Tensor, device: torch.device | str, *,
                                                       elem_per_token: int) -> VisionAttentionMetadata:
    """SGLang's metadata helper (``sglang/srt/layers/attention/vision.py``, 0.5.17 on), our implementation:
    one element stride for q, v and o, ``sequence_lengths`` as ``(B_pad,1,1,1)``.  The stand-in for a
    target's own helper (``Target.metadata_helper``) where it offers none."""
    return prepare_flashinfer_cudnn_metadata(cu_seqlens, device, elem_per_token=elem_per_token,
                                             sequence_lengths_4d=True)


@dataclass(frozen=True)
class VisionPlan:
    """A resolved call: 3-D tensors and per-sequence token starts (CPU int64, ``(B,)`` each).

    ``q`` (T,H,D), ``k`` (T,H_kv,D), ``v`` (Tv,H_kv,Dv) (Note [Grouped-query attention]); output
    (T,H,Dv) is written at ``o_start``.  ``undefined`` lists sequences whose output upstream leaves
    unspecified (non-strict mode only), and ``all_undefined`` marks calls whose writes can land anywhere.
    ``window`` (left, right, -1 for no limit) and ``sinks`` ((H,) or None): Note [Window and sinks] in
    :mod:`reference.vision_arguments`.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    lengths: torch.Tensor
    qk_start: torch.Tensor
    v_start: torch.Tensor
    o_start: torch.Tensor
    max_seqlen: int
    scale: float
    reshape_batch: Optional[int]
    out_stride: int
    undefined: tuple[int, ...] = field(default_factory=tuple)
    all_undefined: bool = False
    window: tuple[int, int] = NO_WINDOW
    sinks: Optional[torch.Tensor] = None

    @property
    def num_sequences(self) -> int:
        return int(self.lengths.numel())

    @property
    def kv_group(self) -> int:
        """Query heads per key/value head, ``H // H_kv`` (Note [Grouped-query attention])."""
        return self.q.shape[1] // max(self.k.shape[1], 1)

    @property
    def has_window(self) -> bool:
        return self.window[0] >= 0 or self.window[1] >= 0


def _max_seqlen_int(max_seqlen) -> int:
    """Step 4: ``max_seqlen`` as a Python int.  Upstream calls ``int()`` (after ``.item()`` on a
    tensor); what that rejects is rejected here with the same exception type, naming the field."""
    value = max_seqlen
    if isinstance(max_seqlen, torch.Tensor):
        if max_seqlen.numel() != 1:
            raise RuntimeError(f"Expected max_seqlen to be an int or a 0-d/1-element tensor but got max_seqlen="
                               f"{describe_tensor(max_seqlen)}; pass the bucketed longest length "
                               "(prepare_flashinfer_cudnn_metadata's flashinfer_max_seqlen)")
        value = max_seqlen.detach().cpu().reshape(()).item()
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError) as exc:
        shown = describe_tensor(max_seqlen) if isinstance(max_seqlen, torch.Tensor) else repr(max_seqlen)
        raise type(exc)(f"Expected max_seqlen to be an int or a 0-d/1-element tensor but got max_seqlen={shown}; "
                        "pass the bucketed longest length (prepare_flashinfer_cudnn_metadata's "
                        "flashinfer_max_seqlen)") from None


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _host_int64(sequence_lengths: torch.Tensor, packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both flattened as CPU int64; one device->host copy (one sync) when both are integer tensors
    on the same accelerator, instead of one each.  Values are the same either way."""
    seq = sequence_lengths.detach().reshape(-1)
    flat = packed.detach().reshape(-1)
    if (seq.device == flat.device and seq.device.type != "cpu" and seq.dtype in _INT_DTYPES
            and flat.dtype in _INT_DTYPES):
        both = torch.cat([seq.to(torch.int64), flat.to(torch.int64)]).to("cpu")
        return both[: seq.numel()], both[seq.numel():]
    return seq.to("cpu", torch.int64), flat.to("cpu", torch.int64)


def select_metadata(cu_seqlens, forward_metadata, kwargs) -> tuple[object, object, int]:
    """Steps 1-4 of SGLang's resolution: (sequence_lengths, packed indptrs, max_seqlen as an int),
    from ``forward_metadata`` when it carries packed indptrs, else from ``cu_seqlens`` and kwargs."""
    if forward_metadata is not None and getattr(forward_metadata, "packed_indptrs", None) is not None:
        sequence_lengths = forward_metadata.sequence_lengths
        packed = forward_metadata.packed_indptrs
        max_seqlen = forward_metadata.flashinfer_max_seqlen
    else:
        if "sequence_lengths" not in kwargs:
            raise_contract("vision.missing_sequence_lengths")
        if "max_seqlen" not in kwargs:
            raise_contract("vision.missing_max_seqlen")
        sequence_lengths = kwargs["sequence_lengths"]
        packed = cu_seqlens
        max_seqlen = kwargs["max_seqlen"]
    # 4: max_seqlen becomes a Python int (int or 0-d / 1-element tensor, CPU or GPU)
    return sequence_lengths, packed, _max_seqlen_int(max_seqlen)


def resolve_flashinfer_cudnn(q, k, v, cu_seqlens, softmax_scale=None, forward_metadata=None, *,
                             strict: Optional[bool] = None, **kwargs) -> VisionPlan:
    """SGLang's resolution order (docs/semantics.md#error-contracts-and-their-order), then strict validation, as a plan."""
    strict = resolve_strict(strict)
    sequence_lengths, packed, max_seqlen = select_metadata(cu_seqlens, forward_metadata, kwargs)
    reshape_batch = None
    if q.dim() == 4:
        reshape_batch = q.shape[0]
        q, k, v = (x.flatten(0, 1) for x in (q, k, v))
    # 5-6
    if not isinstance(packed, torch.Tensor):
        raise_contract("vision.indptrs_not_tensor")
    if not isinstance(sequence_lengths, torch.Tensor):
        raise_contract("vision.sequence_lengths_not_tensor")
    lengths, flat = _host_int64(sequence_lengths, packed)
    B = int(lengths.numel())
    # 7
    expected = 3 * (B + 1)
    if int(flat.numel()) != expected:
        raise_contract("vision.indptr_numel_mismatch", got=int(flat.numel()), expected=expected)
    qk_ind, v_ind, o_ind = flat[: B + 1], flat[B + 1: 2 * B + 2], flat[2 * B + 2:]
    if strict and (not isinstance(q, torch.Tensor) or q.dim() != 3):
        # upstream would crash on q.shape[2] below; say what is wrong instead
        raise_contract("vision.strict.shape_mismatch", field="q", got=tuple(getattr(q, "shape", ())),
                       expected=("T", "H", "D"), why="q is (tokens, heads, head_dim) or (b, s, heads, head_dim)")
    # 8: upstream checks q only, with q's logical token width (heads * head_dim)
    token_width_q = int(q.shape[1] * q.shape[2])
    if ((qk_ind[:-1] + lengths * token_width_q) > int(q.numel())).any():
        raise_contract("vision.offset_out_of_bounds")

    head_dim = q.shape[2]
    default_scale = head_dim ** -0.5
    scale = default_scale if softmax_scale is None else scale_as_float("softmax_scale", softmax_scale, default_scale)
    extras = resolve_arguments(q, kwargs, strict)  # window_size, s_aux, attention_mask (Note [Window and sinks])
    out_stride = int(q.shape[1] * v.shape[2])
    if strict:
        _strict_checks(q, k, v, sequence_lengths, packed, lengths, max_seqlen, qk_ind, v_ind, o_ind, out_stride)
    undefined, all_undefined = _anomalies(q, k, v, lengths, max_seqlen, qk_ind, v_ind, o_ind, out_stride)
    all_undefined = all_undefined or extras.malformed
    strides = {"q": q.stride(0), "v": v.stride(0), "o": out_stride}
    return VisionPlan(
        q=q, k=k, v=v,
        lengths=lengths.clamp(min=0),
        qk_start=qk_ind[:-1] // max(strides["q"], 1),
        v_start=v_ind[:-1] // max(strides["v"], 1),
        o_start=o_ind[:-1] // max(strides["o"], 1),
        max_seqlen=max_seqlen, scale=scale, reshape_batch=reshape_batch, out_stride=out_stride,
        undefined=undefined, all_undefined=all_undefined, window=extras.window, sinks=extras.sinks,
    )


def check_attention_operands(q, k, v) -> None:
    """k and v in q's dtype and device; k (T,H_kv,D) with q's tokens and head dim and H_kv dividing q's
    H; v (T',H_kv,Dv) (Note [Grouped-query attention]).  Shared by the strict checks and by kernels that
    cannot run on mismatched operands even with strict validation off."""
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != q.dtype or t.device != q.device:
            raise_contract("vision.strict.metadata_tensor", field=name, expected=f"a {q.dtype} tensor on {q.device} like q",
                           got=describe_tensor(t), fix=f"pass {name} in q's dtype and device")
    if q.dim() != 3 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        heads = k.shape[1] if k.dim() == 3 else "H_kv"
        raise_contract("vision.strict.shape_mismatch", field="k", got=tuple(k.shape),
                       expected=(*q.shape[:1], heads, *q.shape[2:]),
                       why="k is (tokens, key/value heads, head_dim) with q's tokens and head_dim")
    if v.dim() != 3:
        raise_contract("vision.strict.shape_mismatch", field="v", got=tuple(v.shape),
                       expected=("*", k.shape[1], "*"), why="v is (tokens, key/value heads, v_head_dim)")
    _check_kv_heads(q, k, v)


def _check_kv_heads(q, k, v) -> None:
    """3-D q (T,H,D), k and v: k's H_kv heads divide q's H, and v has k's heads (Note [Grouped-query
    attention]).  Checked with strict validation off too: no head mapping exists otherwise."""
    H, H_kv = q.shape[1], k.shape[1]
    if (H_kv == 0 and H != 0) or (H_kv and H % H_kv):
        raise_contract("vision.strict.kv_heads", got=H_kv, heads=H)
    if v.shape[1] != H_kv:
        raise_contract("vision.strict.kv_heads_match", got=v.shape[1], kv=H_kv)


def check_token_layout(name: str, t: torch.Tensor) -> None:
    """Strict: ``t`` (T,H,D) has tokens as its outermost dimension and no elements that share
    memory.  Packed indptrs count element offsets in whole tokens (token offset x token stride),
    so a layout whose tokens overlap (stride 0) or interleave with its heads (a transposed view)
    has no meaningful element offsets; upstream would read whatever lies there."""
    why = overlap_problem(t)
    if why is None and t.shape[0] > 1:
        extent = 1 + sum(s * (n - 1) for n, s in zip(t.shape[1:], t.stride()[1:]))
        if t.stride(0) < extent:
            why = (f"one token spans {extent} elements but the token stride is {t.stride(0)}, so tokens are not "
                   "the outermost dimension (a transposed view?) and element offsets of tokens are meaningless")
    if why is not None:
        raise_contract("vision.strict.operand_layout", field=name, got=describe_layout(t), why=why)


def _strict_checks(q, k, v, sequence_lengths, packed, lengths, max_seqlen, qk_ind, v_ind, o_ind, out_stride):
    cid = "vision.strict.metadata_tensor"
    ints = (torch.int32, torch.int64)
    check_metadata_tensor(cid, "packed_indptrs", packed, dtypes=ints, device=None)
    check_metadata_tensor(cid, "sequence_lengths", sequence_lengths, dtypes=ints, device=None,
                          allow_shape=((), (1, 1, 1)))
    if not q.is_floating_point():  # before k and v, which are compared with q
        raise_contract(cid, field="q", expected="a floating-point tensor (float16, bfloat16, float32 or float64)",
                       got=describe_tensor(q),
                       fix="pass q, k and v as floating-point tensors, e.g. q.to(torch.float16)")
    check_attention_operands(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_token_layout(name, t)
    bad = torch.nonzero(lengths < 0).flatten()
    if bad.numel():
        raise_contract("vision.strict.negative_length", index=int(bad[0]), value=int(lengths[int(bad[0])]))
    if lengths.numel() and max_seqlen < int(lengths.max()):
        i = int(torch.argmax(lengths))
        raise_contract("vision.strict.max_seqlen_too_small", value=max_seqlen, index=i, longest=int(lengths[i]))
    real = lengths > 0
    # k's tokens are q's (Note [Grouped-query attention]): its offsets are counted in q's token stride
    for fld, ind, tensor, t, stride in (("qk_indptr", qk_ind, "q", q, q.stride(0)),
                                        ("qk_indptr", qk_ind, "k", k, q.stride(0)),
                                        ("v_indptr", v_ind, "v", v, v.stride(0)),
                                        ("o_indptr", o_ind, "the output", None, out_stride)):
        tokens = t.shape[0] if t is not None else q.shape[0]
        starts = ind[:-1]
        mis = torch.nonzero(real & ((starts % stride) != 0)).flatten()
        if mis.numel():
            i = int(mis[0])
            raise_contract("vision.strict.misaligned_offset", field=fld, index=i, value=int(starts[i]),
                           tensor=tensor, stride=stride)
        tok = starts // stride
        over = torch.nonzero(real & ((tok < 0) | (tok + lengths > tokens))).flatten()
        if over.numel():
            i = int(over[0])
            raise_contract("vision.strict.offset_range", field=fld, index=i, value=int(starts[i]),
                           length=int(lengths[i]), start=int(tok[i]), tokens=tokens, tensor=tensor)
    o_tok = o_ind[:-1] // out_stride
    idx = torch.nonzero(real).flatten()
    if idx.numel() > 1:
        order = idx[torch.argsort(o_tok[idx])]
        ends = o_tok[order] + lengths[order]
        clash = torch.nonzero(o_tok[order][1:] < ends[:-1]).flatten()
        if clash.numel():
            a, b = int(order[int(clash[0])]), int(order[int(clash[0]) + 1])
            raise_contract("vision.strict.output_overlap", index=b, start=int(o_tok[b]),
                           end=int(o_tok[b] + lengths[b] - 1), other=a, other_start=int(o_tok[a]),
                           other_end=int(o_tok[a] + lengths[a] - 1))


def _anomalies(q, k, v, lengths, max_seqlen, qk_ind, v_ind, o_ind, out_stride):
    """Sequences whose output upstream leaves unspecified (what strict mode would reject)."""
    undefined: set[int] = set()
    all_undefined = False
    real = lengths > 0
    for b in torch.nonzero(real & (lengths > max_seqlen)).flatten().tolist():
        undefined.add(b)
    for ind, t, stride in ((qk_ind, q, q.stride(0)), (qk_ind, k, q.stride(0)), (v_ind, v, v.stride(0))):
        starts = ind[:-1]
        tok = starts // max(stride, 1)
        bad = real & (((starts % max(stride, 1)) != 0) | (tok < 0) | (tok + lengths > t.shape[0]))
        undefined.update(torch.nonzero(bad).flatten().tolist())
    starts = o_ind[:-1]
    tok = starts // out_stride
    if (real & (((starts % out_stride) != 0) | (tok < 0) | (tok + lengths > q.shape[0]))).any():
        all_undefined = True
    else:
        # per-token count of sequences writing it (a difference array, no per-sequence loop: this
        # runs on every kernel call), then the sequences that share any output token
        idx = torch.nonzero(real).flatten()
        start, end = tok[idx], tok[idx] + lengths[idx]
        diff = torch.zeros(q.shape[0] + 1, dtype=torch.int64)
        diff.index_add_(0, start, torch.ones_like(start))
        diff.index_add_(0, end, -torch.ones_like(end))
        shared = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(torch.cumsum(diff, 0)[:-1] > 1, 0)])
        undefined.update(idx[(shared[end] - shared[start]) > 0].tolist())
    return tuple(sorted(undefined)), all_undefined
