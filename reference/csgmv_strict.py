"""Strict validation of a csgmv call's metadata (the ``csgmv.strict.*`` rows of the contract table).

Note [csgmv strict validation]
------------------------------
SGLang's csgmv kernels read the batch info on the device unchecked (Note [csgmv contracts] in
:mod:`reference.contracts_csgmv`).  With strict validation on (the default,
:mod:`reference.strict`) the oracle first checks, in this order, and raises the row's exact text:

1. the metadata tensors (``seg_indptr``, ``weight_indices``, ``lora_ranks``, ``scalings``,
   ``permutation``): 1-D, integer (int32 / int64; ``scalings`` floating point), on ``x``'s device;
2. the host ints: ``max_len`` a positive int, ``num_segments`` an int from 0 to the segments the
   device tensors hold (``seg_indptr`` one bound more than the segments processed);
3. the processed segments: ``seg_indptr`` from 0 or more and non-decreasing, no segment longer than
   ``max_len``, each slot one that ``weights`` (L), ``lora_ranks`` and ``scalings`` all hold, no
   negative rank;
4. the permutation: an entry per covered logical row, each a row of ``x`` (``[0, S)``);
5. the expand's slices: ``slice_offsets`` a 1-D integer tensor on ``x``'s device, non-decreasing,
   within ``[0, OUTPUT_DIM]``, ``max_slice_size`` at least the widest slice, ``slice_offsets_cpu``
   equal to them.

Tensor shapes: ``x`` (S, K) or (S, num_slices * R); ``weights`` (L, N, K) or (L, OUTPUT_DIM, R).
"""

from __future__ import annotations

import torch

from kernel_oracle.reference._helpers import describe_tensor
from kernel_oracle.reference.contracts import raise_contract

__all__ = ["check_batch_info", "check_slices", "processed_count"]

_INTS = (torch.int32, torch.int64)
_FIX = "build it with torch.tensor(values, dtype=torch.int32, device=x.device)"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(field: str, t: object, device: torch.device, *, floating: bool = False) -> None:
    kind = "floating-point" if floating else "int32 or int64"
    ok = (isinstance(t, torch.Tensor) and t.dim() == 1 and t.device == device
          and (t.is_floating_point() if floating else t.dtype in _INTS))
    if not ok:
        fix = ("build it with torch.tensor(values, dtype=torch.float32, device=x.device)" if floating else _FIX)
        raise_contract("csgmv.strict.metadata_tensor", field=f"batch_info.{field}",
                       expected=f"a 1-D {kind} tensor on {device}", got=describe_tensor(t), fix=fix)


def processed_count(batch_info) -> int:
    """How many segments a launch processes: eagerly ``num_segments``, under CUDA graph every device
    segment (``weight_indices.shape[0]``)."""
    return int(batch_info.weight_indices.shape[0]) if batch_info.use_cuda_graph else int(batch_info.num_segments)


def _check_counts(bi) -> int:
    if not _is_int(bi.max_len) or bi.max_len < 1:
        raise_contract("csgmv.strict.bad_count", field="max_len", value=repr(bi.max_len),
                       why="pass the chunk size, a positive int (the kernels' row tile)")
    segments = int(bi.weight_indices.shape[0])
    if not _is_int(bi.num_segments) or bi.num_segments < 0:
        raise_contract("csgmv.strict.bad_count", field="num_segments", value=repr(bi.num_segments),
                       why="pass the number of segments, an int of 0 or more")
    if not bi.use_cuda_graph and bi.num_segments > segments:
        raise_contract("csgmv.strict.bad_count", field="num_segments", value=repr(bi.num_segments),
                       why=f"weight_indices holds {segments} segments; pass num_segments <= {segments}")
    n = processed_count(bi)
    if bi.seg_indptr.numel() < n + 1:
        raise_contract("csgmv.strict.metadata_tensor", field="batch_info.seg_indptr",
                       expected=f"at least {n + 1} bounds (one more than the {n} segments processed)",
                       got=describe_tensor(bi.seg_indptr), fix="pass num_segments + 1 bounds")
    return n


def _check_segments(bi, n: int, slots: int) -> int:
    """The checks of step 3; returns the last covered logical row + 1."""
    indptr = [int(v) for v in bi.seg_indptr[:n + 1].tolist()]
    if indptr[0] < 0:
        raise_contract("csgmv.strict.seg_indptr_start", value=indptr[0])
    for b in range(n):
        if indptr[b + 1] < indptr[b]:
            raise_contract("csgmv.strict.seg_indptr_decreasing", index=b + 1, value=indptr[b + 1], prev_index=b,
                           prev=indptr[b], length=indptr[b + 1] - indptr[b])
    longest = max((indptr[b + 1] - indptr[b] for b in range(n)), default=0)
    if longest > bi.max_len:
        raise_contract("csgmv.strict.max_len_too_small", longest=longest, value=bi.max_len)
    for b, w in enumerate(int(v) for v in bi.weight_indices[:n].tolist()):
        if not 0 <= w < slots:
            raise_contract("csgmv.strict.slot_out_of_range", index=b, value=w, slots=slots)
    for i, r in enumerate(int(v) for v in bi.lora_ranks.tolist()):
        if r < 0:
            raise_contract("csgmv.strict.negative_rank", index=i, value=r)
    return indptr[n]


def check_batch_info(x: torch.Tensor, weights: torch.Tensor, batch_info) -> None:
    """Steps 1-4 of Note [csgmv strict validation] for ``x`` (S, *) and ``weights`` (L, *, *)."""
    bi, device = batch_info, x.device
    for field in ("seg_indptr", "weight_indices", "lora_ranks", "permutation"):
        _tensor(field, getattr(bi, field), device)
    _tensor("scalings", bi.scalings, device, floating=True)
    slots = min(int(weights.shape[0]), bi.lora_ranks.numel(), bi.scalings.numel())
    n = _check_counts(bi)
    end = _check_segments(bi, n, slots)
    perm = bi.permutation
    if perm.numel() < end:
        raise_contract("csgmv.strict.permutation_length", got=perm.numel(), last=end - 1)
    S = int(x.shape[0])
    start = int(bi.seg_indptr[0])
    for t, row in enumerate(perm[start:end].tolist(), start):
        if not 0 <= row < S:
            raise_contract("csgmv.strict.permutation_range", index=t, value=int(row), rows=S)


def check_slices(x: torch.Tensor, weights: torch.Tensor, slice_offsets, max_slice_size,
                 slice_offsets_cpu) -> list[int]:
    """Step 5 of Note [csgmv strict validation]; returns the offsets as ints."""
    device, columns = x.device, int(weights.shape[1])
    if not (isinstance(slice_offsets, torch.Tensor) and slice_offsets.dim() == 1 and slice_offsets.dtype in _INTS
            and slice_offsets.device == device):
        raise_contract("csgmv.strict.metadata_tensor", field="slice_offsets",
                       expected=f"a 1-D int32 or int64 tensor on {device}", got=describe_tensor(slice_offsets),
                       fix=_FIX)
    offsets = [int(v) for v in slice_offsets.tolist()]
    for i, value in enumerate(offsets):
        if not 0 <= value <= columns:
            raise_contract("csgmv.strict.slice_offsets_range", index=i, value=value, columns=columns)
        if i and value < offsets[i - 1]:
            raise_contract("csgmv.strict.slice_offsets_decreasing", index=i, value=value, prev_index=i - 1,
                           prev=offsets[i - 1], width=value - offsets[i - 1])
    widest = max((hi - lo for lo, hi in zip(offsets, offsets[1:])), default=0)
    if slice_offsets_cpu is not None:
        cpu = [int(v) for v in slice_offsets_cpu.tolist()]
        if cpu != offsets:
            raise_contract("csgmv.strict.offsets_cpu", cpu=cpu, offsets=offsets)
    elif not _is_int(max_slice_size) or widest > max_slice_size:
        raise_contract("csgmv.strict.max_slice_size", widest=widest, value=max_slice_size)
    return offsets
