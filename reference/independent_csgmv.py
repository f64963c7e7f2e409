"""A second float64 oracle of the csgmv shrink and expand, written differently from :mod:`reference.csgmv`.

Note [Independent csgmv]
------------------------
:mod:`reference.csgmv` gathers each segment's rows and multiplies them as one matrix.  This formulation
shares none of its code: it walks the batch one *logical row* at a time (a loop over tokens, never a
row list), reads the metadata with plain Python indexing, and computes each token's output as a
matrix-vector product of that token's slot:

* shrink: ``out[p, :n] = weights[w, :n] @ x[p]`` with ``n = min(N, rank * num_slices)``;
* expand: for each slice ``i`` with columns ``lo .. hi`` and ``r = min(R, rank)``:
  ``out[p, lo:hi] += scaling * (weights[w, lo:hi, :r] @ x[p, i*r:(i+1)*r])``.

Segments are the first ``num_segments`` eagerly and every device segment under CUDA graph (the host
ints are capture-time values); a rank-0 slot writes nothing; a physical row reached twice is a race
(undefined).  Shapes: shrink ``x`` (S, K), ``weights`` (L, N, K) -> (S, N); expand ``x`` (S,
num_slices * R), ``weights`` (L, OUTPUT_DIM, R), ``base_output`` (S, OUTPUT_DIM) or None.  It expects
well-formed metadata (what strict validation accepts) and returns ``(value, defined)``, both of the
output's shape.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["csgmv_independent", "logical_rows"]

_F64 = torch.float64


def logical_rows(batch_info) -> list[tuple[int, int]]:
    """``(physical row, slot)`` of every logical row a launch covers, in logical order, one token at a time."""
    graph = bool(batch_info.use_cuda_graph)
    slots = batch_info.weight_indices.tolist()
    count = len(slots) if graph else int(batch_info.num_segments)
    bounds, perm = batch_info.seg_indptr.tolist(), batch_info.permutation.tolist()
    out = []
    for segment in range(count):
        t = bounds[segment]
        while t < bounds[segment + 1]:
            out.append((int(perm[t]), int(slots[segment])))
            t += 1
    return out


def _walk(batch_info, S: int):
    """``(physical row, slot)`` of the rows whose slot has a positive rank, and the bool (S,) mask of the
    rows reached more than once."""
    ranks = batch_info.lora_ranks.tolist()
    seen = torch.zeros(S, dtype=torch.int64)
    rows = []
    for p, w in logical_rows(batch_info):
        if int(ranks[w]) > 0:
            seen[p] += 1
            rows.append((p, w))
    return rows, seen > 1


def _shrink(x, weights, batch_info, num_slices: int):
    S, N = x.shape[0], weights.shape[1]
    x64, w64 = x.detach().to("cpu", _F64), weights.detach().to("cpu", _F64)
    value = torch.zeros(S, N, dtype=_F64)
    defined = torch.zeros(S, N, dtype=torch.bool)
    rows, twice = _walk(batch_info, S)
    ranks = batch_info.lora_ranks.tolist()
    for p, w in rows:
        n = min(N, int(ranks[w]) * num_slices)
        value[p, :n] = torch.mv(w64[w, :n], x64[p])
        defined[p, :n] = True
    defined[twice] = False
    return value, defined


def _expand(x, weights, batch_info, slice_offsets, base_output):
    S, R = x.shape[0], weights.shape[2]
    x64, w64 = x.detach().to("cpu", _F64), weights.detach().to("cpu", _F64)
    if base_output is None:
        value = torch.zeros(S, weights.shape[1], dtype=_F64)
    else:
        value = base_output.detach().to("cpu", _F64).clone()
    offsets = [int(v) for v in slice_offsets.tolist()]
    rows, twice = _walk(batch_info, S)
    ranks, scalings = batch_info.lora_ranks.tolist(), batch_info.scalings.tolist()
    for p, w in rows:
        r, scale = min(R, int(ranks[w])), float(scalings[w])
        for i in range(len(offsets) - 1):
            lo, hi = offsets[i], offsets[i + 1]
            value[p, lo:hi] += scale * torch.mv(w64[w, lo:hi, :r], x64[p, i * r:(i + 1) * r])
    defined = torch.ones(value.shape, dtype=torch.bool)
    defined[twice] = False
    return value, defined


def csgmv_independent(op: str, args: tuple, kwargs: Optional[dict] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected output of csgmv ``op`` (``"csgmv_shrink"`` / ``"csgmv_expand"``) called with SGLang's
    positional ``args`` (keywords: ``split_k`` and ``slice_offsets_cpu`` change no value); inputs untouched."""
    if op == "csgmv_shrink":
        x, weights, batch_info, num_slices = args
        return _shrink(x, weights, batch_info, int(num_slices))
    if op == "csgmv_expand":
        x, weights, batch_info, slice_offsets, _max_slice_size, base_output = args
        return _expand(x, weights, batch_info, slice_offsets, base_output)
    raise ValueError(f"op={op!r} is unknown; the only valid values are csgmv_shrink, csgmv_expand")
