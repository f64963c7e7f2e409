"""The repeated call: a vision tower's layers after the first, in a few microseconds of host time.

Note [Repeated call]
--------------------
Every layer of a vision tower calls ``flashinfer_cudnn_attention`` with the same metadata objects
and new activations of the same layout.  When a call repeats the last one's launch (its cache key
equals the last key, Note [Launch cache] in :mod:`kernels.vision.attention`) and that launch has a
direct launcher (Note [Direct launch] in :mod:`kernels.vision._direct`), :class:`RepeatedCall`
remembers the call, and the next one is checked against it field by field instead of building and
comparing the cache key (2.2-3.6 us of the 10 us budget on the H200's hosts,
docs/benchmarks/vision.md).  Only repeats are remembered, so calls that alternate between metadata
pay nothing for it.

It matches exactly the calls whose cache key would equal the remembered one, by the same facts, only
cheaper to read:

* the metadata: the same ``forward_metadata`` object holding the same ``sequence_lengths``,
  ``packed_indptrs`` and ``flashinfer_max_seqlen`` objects, or (no ``forward_metadata``) the same
  ``cu_seqlens``, ``sequence_lengths`` and ``max_seqlen`` keywords; each tensor's address, shape,
  strides and version counter as remembered (an in-place edit misses); an int ``max_seqlen`` equal;
* no other keyword (``strict``, ``fp32_precision``, ``config`` take the keyed path), the ambient
  strict setting and ``softmax_scale`` as remembered;
* q, k and v of the remembered shapes, strides, dtypes and devices (4-D inputs stay 4-D: the
  direct launcher takes addresses, and a contiguous 4-D output has the 3-D one's layout).

A match allocates the output as the remembered call returned it (NaN-filled under
``poisoned_output``) and launches directly; a direct launcher that declines (an unaligned address,
another current device, a launch hook) makes the call take the keyed path, as does any mismatch.
Every other keyed call forgets it, and so does clearing the cache, so it is always the most
recently used cache entry's.  It holds the metadata objects (as the cache entry does) and no
activations.
"""

from __future__ import annotations

from typing import Optional

import torch

from kernel_oracle.reference.strict import resolve_strict

_NAN = float("nan")


def _state(t: torch.Tensor) -> tuple:
    return (t._version, t.data_ptr(), t.shape, t.stride())


def _layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    return (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
            v.shape, v.stride(), v.dtype, v.device)


class RepeatedCall:
    """One remembered call (Note [Repeated call]); ``__call__`` returns the output, or None to take the keyed path."""

    __slots__ = ("md", "sl", "pk", "mx", "mx_state", "meta", "scale", "strict", "layout", "out_shape",
                 "out_dtype", "out_device", "like_q", "direct", "stats")

    def __init__(self, direct, q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs: dict,
                 out: torch.Tensor, stats: dict):
        if forward_metadata is not None:
            self.md = forward_metadata
            sl, pk = forward_metadata.sequence_lengths, forward_metadata.packed_indptrs
            mx = forward_metadata.flashinfer_max_seqlen
        else:
            self.md = None
            sl, pk, mx = kwargs["sequence_lengths"], cu_seqlens, kwargs["max_seqlen"]
        self.sl, self.pk, self.mx = sl, pk, mx
        self.mx_state = _state(mx) if isinstance(mx, torch.Tensor) else None
        self.meta = _state(sl) + _state(pk)
        self.scale = softmax_scale
        self.strict = resolve_strict(None)
        self.layout = _layout(q, k, v)
        self.out_shape, self.out_dtype, self.out_device = out.shape, out.dtype, out.device
        # empty_like(q) is the cheapest allocation, where it gives the output's shape, dtype and (dense) layout
        self.like_q = q.is_contiguous() and out.shape == q.shape and out.dtype == q.dtype
        self.direct = direct
        self.stats = stats

    @classmethod
    def remember(cls, direct, q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs: dict,
                 out: torch.Tensor, stats: dict) -> Optional["RepeatedCall"]:
        """The record of a keyed call that launched ``out`` through ``direct``, or None where the call is not
        of a form this shortcut matches (other keywords, metadata not in tensors, a strided output)."""
        if not direct or not out.is_contiguous() or not isinstance(q, torch.Tensor):
            return None
        if forward_metadata is not None:
            if kwargs or getattr(forward_metadata, "packed_indptrs", None) is None:
                return None
            tensors = (forward_metadata.sequence_lengths, forward_metadata.packed_indptrs)
            mx = forward_metadata.flashinfer_max_seqlen
        else:
            if set(kwargs) != {"sequence_lengths", "max_seqlen"}:
                return None
            tensors, mx = (kwargs["sequence_lengths"], cu_seqlens), kwargs["max_seqlen"]
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            return None
        if not (isinstance(mx, torch.Tensor) or type(mx) is int):
            return None
        if softmax_scale is not None and type(softmax_scale) not in (int, float):
            return None
        return cls(direct, q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs, out, stats)

    def __call__(self, q, k, v, cu_seqlens, softmax_scale, forward_metadata, kwargs: dict,
                 poison: bool) -> Optional[torch.Tensor]:
        md = self.md
        if forward_metadata is not md:
            return None
        if md is not None:
            if kwargs:
                return None
            sl, pk, mx = md.sequence_lengths, md.packed_indptrs, md.flashinfer_max_seqlen
        else:
            if len(kwargs) != 2:
                return None
            sl, pk, mx = kwargs.get("sequence_lengths"), cu_seqlens, kwargs.get("max_seqlen")
        if sl is not self.sl or pk is not self.pk:
            return None
        if self.mx_state is None:
            if type(mx) is not int or mx != self.mx:
                return None
        elif mx is not self.mx or _state(mx) != self.mx_state:
            return None
        # written out, not through _state / _layout: this is the whole of a warm call's checking
        if (sl._version, sl.data_ptr(), sl.shape, sl.stride(),
                pk._version, pk.data_ptr(), pk.shape, pk.stride()) != self.meta:
            return None
        scale = self.scale
        if scale is None:
            if softmax_scale is not None:
                return None
        elif type(softmax_scale) not in (int, float) or softmax_scale != scale:
            return None
        if resolve_strict(None) != self.strict:
            return None
        if (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                v.shape, v.stride(), v.dtype, v.device) != self.layout:
            return None
        if poison:
            out = torch.full(self.out_shape, _NAN, dtype=self.out_dtype, device=self.out_device)
        elif self.like_q:
            out = torch.empty_like(q)
        else:
            out = torch.empty(self.out_shape, dtype=self.out_dtype, device=self.out_device)
        if not self.direct(q, k, v, out):
            return None
        self.stats["hits"] += 1
        return out
