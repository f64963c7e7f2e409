"""Segment routing for the kv_b LoRA steps: upstream contract, strict validation, row mapping.

Note [Routing]
--------------
Every LoRA step routes rows the same way (docs/semantics.md#kv_b-lora-steps), so routing is computed once, here, and
shared by the reference, the Triton kernels' wrappers and the fuzzer's expected outcomes:

1. upstream contract: neither ``max_len`` nor ``seg_lens`` -> the exact upstream ``ValueError``,
   before anything else (also before strict validation);
2. strict validation (optional) of every metadata field, raising from the contract table;
3. the mapping itself, vectorized (no Python loop over tokens or segments): for each processed
   segment ``b < n`` (``n = num_segments or bs``) with length > 0 and effective rank
   ``r = min(R, lora_ranks[w]) > 0``, its logical rows ``seg_indptr[b] + i`` map to physical rows
   through ``permutation``.

With strict validation off, inputs that upstream accepts but answers with unspecified values
(rows past ``max_len``, clamped permutation entries, unknown slots, repeated rows) are not rejected;
instead the rows they touch are listed in ``undefined_rows`` (or ``all_undefined`` is set) so that
a comparison covers only the region that upstream defines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from kernel_oracle.reference._helpers import check_metadata_tensor, describe_layout, describe_tensor, overlap_problem
from kernel_oracle.reference.contracts import raise_contract
from kernel_oracle.reference.strict import resolve_strict

__all__ = ["LoRARouting", "SlotGroup", "max_segment_len", "num_segments", "route_lora_batch", "validate_lora_batch"]


def num_segments(batch_info) -> int:
    """The segments a launch processes: ``num_segments or bs``; under ``use_cuda_graph`` every one of
    the ``weight_indices.shape[0]`` segments, because the host ints are capture-time values that may be
    stale (smaller than the replayed batch) and must not limit it (docs/semantics.md#cuda-graph-host-ints)."""
    n = int(batch_info.num_segments or batch_info.bs)
    wi = getattr(batch_info, "weight_indices", None)
    if getattr(batch_info, "use_cuda_graph", False) and isinstance(wi, torch.Tensor) and wi.dim() == 1:
        n = max(n, int(wi.shape[0]))
    return n


def max_segment_len(batch_info) -> int:
    """Upstream's longest-segment length; raises the upstream contract if it cannot be known."""
    max_len = getattr(batch_info, "max_len", None)
    if max_len is not None:
        try:
            return int(max_len)
        except (TypeError, ValueError, OverflowError) as exc:  # upstream's int() fails the same way
            raise type(exc)(f"Expected batch_info.max_len to be an int or None but got max_len={max_len!r}; "
                            "pass the longest segment length") from None
    seg_lens = getattr(batch_info, "seg_lens", None)
    if seg_lens is not None:
        if not isinstance(seg_lens, torch.Tensor):  # upstream's seg_lens.max() fails the same way
            raise AttributeError(f"Expected batch_info.seg_lens to be an int32 tensor but got seg_lens={seg_lens!r} "
                                 f"({type(seg_lens).__name__}), which has no max(); pass "
                                 "torch.tensor(seg_lens, dtype=torch.int32) or give max_len")
        return int(seg_lens.max().item()) if seg_lens.numel() else 0
    raise_contract("lora.missing_max_len")


@dataclass(frozen=True)
class SlotGroup:
    """Routed rows that share one slot: ``index`` selects them from ``LoRARouting.rows``."""

    slot: int
    rank: int
    scaling: float
    index: torch.Tensor  # int64 (k,), positions into LoRARouting.rows


@dataclass(frozen=True)
class LoRARouting:
    """Which physical rows each processed segment touches, on the CPU.

    ``rows``/``segment``/``slot``/``position`` are int64 ``(N,)`` over routed rows only (segments
    skipped for zero length or rank 0 contribute nothing).
    """

    num_rows: int
    num_segments: int
    rows: torch.Tensor
    segment: torch.Tensor
    slot: torch.Tensor
    position: torch.Tensor
    slot_rank: dict[int, int]
    slot_scaling: dict[int, float]
    undefined_rows: torch.Tensor  # int64 (M,): rows whose values upstream leaves unspecified
    all_undefined: bool = False

    def groups(self) -> Iterator[SlotGroup]:
        for w in sorted(self.slot_rank):
            index = torch.nonzero(self.slot == w).flatten()
            if index.numel():
                yield SlotGroup(w, self.slot_rank[w], self.slot_scaling[w], index)


def _cpu_long(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.int64).reshape(-1)


def _check_metadata(batch_info, n: int, device: torch.device, num_rows: int, num_slots: int) -> None:
    """Strict checks of types, dtypes, sizes and devices of every metadata field."""
    for field in ("bs", "num_segments"):
        value = getattr(batch_info, field, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise_contract("lora.strict.bad_count", field=field, value=repr(value),
                           why="pass a non-negative Python int")
    max_len = getattr(batch_info, "max_len", None)
    if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 0):
        raise_contract("lora.strict.bad_count", field="max_len", value=repr(max_len),
                       why="pass a non-negative Python int or None")
    launched = n
    if getattr(batch_info, "use_cuda_graph", False):
        launched = max(n, int(batch_info.weight_indices.shape[0]) if isinstance(batch_info.weight_indices, torch.Tensor) else n)
    cid = "lora.strict.metadata_tensor"
    check_metadata_tensor(cid, "seg_indptr", batch_info.seg_indptr, dtypes=(torch.int32,), device=device,
                          min_numel=launched + 1)
    check_metadata_tensor(cid, "weight_indices", batch_info.weight_indices, dtypes=(torch.int32,),
                          device=device, min_numel=n)
    check_metadata_tensor(cid, "lora_ranks", batch_info.lora_ranks, dtypes=(torch.int32,), device=device,
                          exact_numel=num_slots)
    check_metadata_tensor(cid, "scalings", batch_info.scalings, dtypes=(torch.float32,), device=device,
                          exact_numel=num_slots)
    if getattr(batch_info, "seg_lens", None) is not None:
        check_metadata_tensor(cid, "seg_lens", batch_info.seg_lens, dtypes=(torch.int32,), device=device,
                              min_numel=n)
    if getattr(batch_info, "permutation", None) is not None:
        check_metadata_tensor(cid, "permutation", batch_info.permutation, dtypes=(torch.int64,),
                              device=device, exact_numel=num_rows)


def _check_values(batch_info, n: int, indptr: torch.Tensor, num_rows: int, num_slots: int, max_len: int) -> None:
    """Strict checks of metadata values; ``indptr`` is the CPU int64 copy of ``seg_indptr[:n+1]``."""
    if n == 0:
        return
    if indptr[0] < 0:
        raise_contract("lora.strict.seg_indptr_start", value=int(indptr[0]))
    lens = indptr[1:] - indptr[:-1]
    bad = torch.nonzero(lens < 0).flatten()
    if bad.numel():
        b = int(bad[0])
        raise_contract("lora.strict.seg_indptr_decreasing", index=b + 1, value=int(indptr[b + 1]),
                       prev_index=b, prev=int(indptr[b]), length=int(lens[b]))
    if indptr[-1] > num_rows:
        b = int(torch.nonzero(indptr > num_rows).flatten()[0])
        what = "permutation entries" if batch_info.permutation is not None else "token rows of the input"
        raise_contract("lora.strict.seg_indptr_range", index=b, value=int(indptr[b]), rows=num_rows, what=what)
    longest = int(lens.max())
    seg_lens = getattr(batch_info, "seg_lens", None)
    if seg_lens is not None and getattr(batch_info, "max_len", None) is None:
        # seg_lens may disagree with seg_indptr (docs/semantics.md#fields-that-may-disagree): upstream reads it only
        # for the tile count when max_len is None, which must then cover the longest segment
        given = _cpu_long(seg_lens)[:n]
        if int(given.max()) < longest:
            b = int(torch.argmax(lens))
            raise_contract("lora.strict.seg_lens_mismatch", index=b, value=int(given[b]), next_index=b + 1,
                           expected=int(lens[b]), longest=int(given.max()))
    if max_len < longest:
        raise_contract("lora.strict.max_len_too_small", value=max_len, index=int(torch.argmax(lens)),
                       longest=longest)
    slots = _cpu_long(batch_info.weight_indices)[:n]
    bad = torch.nonzero((slots < 0) | (slots >= num_slots)).flatten()
    if bad.numel():
        b = int(bad[0])
        raise_contract("lora.strict.slot_out_of_range", index=b, value=int(slots[b]), num_slots=num_slots,
                       last=num_slots - 1)
    ranks = _cpu_long(batch_info.lora_ranks)
    bad = torch.nonzero(ranks < 0).flatten()
    if bad.numel():
        raise_contract("lora.strict.negative_rank", index=int(bad[0]), value=int(ranks[int(bad[0])]))
    perm = getattr(batch_info, "permutation", None)
    if perm is not None:
        p = _cpu_long(perm)
        bad = torch.nonzero((p < 0) | (p >= num_rows)).flatten()
        if bad.numel():
            i = int(bad[0])
            raise_contract("lora.strict.permutation_range", index=i, value=int(p[i]), rows=num_rows)
        first_seen = torch.full((num_rows,), -1, dtype=torch.int64)
        # scatter in reverse so first_seen holds the first occurrence of each row
        order = torch.arange(p.numel() - 1, -1, -1)
        first_seen[p[order]] = order
        dup = torch.nonzero(first_seen[p] != torch.arange(p.numel())).flatten()
        if dup.numel():
            i = int(dup[0])
            raise_contract("lora.strict.permutation_duplicate", index=i, value=int(p[i]), first=int(first_seen[p[i]]))


def validate_lora_batch(batch_info, *, num_rows: int, num_slots: int, device: torch.device) -> int:
    """Strict validation of ``batch_info`` alone (no routing); returns the longest-segment length.

    The upstream contract (missing ``max_len``/``seg_lens``) is checked first, then the metadata's
    types, dtypes, sizes and devices, then its values (which copies the metadata to the host: a
    strict call synchronises; ``strict=False`` callers skip this function).
    """
    max_len = max_segment_len(batch_info)  # upstream contract first
    n = num_segments(batch_info)
    _check_metadata(batch_info, n, device, num_rows, num_slots)
    indptr = _cpu_long(batch_info.seg_indptr)[: n + 1]
    _check_values(batch_info, n, indptr, num_rows, num_slots, max_len)
    return max_len


def _physical_rows(batch_info, logical: torch.Tensor, num_rows: int) -> tuple:
    """``(physical, all_undefined, clamped, undefined)`` of the routed ``logical`` rows: each one's
    physical token row (through ``permutation`` when given), whether the reads go past the permutation
    or below row 0 (every row is then unknowable), the rows upstream clamps to the last row, and the
    rows whose values that leaves unspecified."""
    undefined: list[torch.Tensor] = []
    all_undefined = False
    perm = getattr(batch_info, "permutation", None)
    if perm is not None:
        p = _cpu_long(perm)
        if (logical >= p.numel()).any() or (logical < 0).any():
            all_undefined = True  # reads past the permutation: the physical row is unknowable
            physical = logical.clamp(0, max(p.numel() - 1, 0))
            physical = p[physical] if p.numel() else physical
        else:
            physical = p[logical]
    else:
        physical = logical
    if (physical < 0).any():
        all_undefined = True
    clamped = physical >= num_rows
    if clamped.any():  # upstream clamps to the last row: that row gets an unspecified mix
        undefined.append(torch.tensor([num_rows - 1]))
        physical = physical.clamp(max=num_rows - 1)
    return physical, all_undefined, clamped, undefined


def route_lora_batch(
    batch_info,
    *,
    num_rows: int,
    num_slots: int,
    max_rank: int,
    device: torch.device,
    strict: Optional[bool] = None,
) -> LoRARouting:
    """Resolve the routing of ``batch_info`` for inputs with ``num_rows`` token rows.

    ``num_slots``: the weight buffers' ``L``; ``max_rank``: their ``R``; ``device``: the data's device.
    """
    strict = resolve_strict(strict)
    max_len = max_segment_len(batch_info)  # upstream contract first
    n = num_segments(batch_info)
    if strict:
        validate_lora_batch(batch_info, num_rows=num_rows, num_slots=num_slots, device=device)
    indptr = _cpu_long(batch_info.seg_indptr)[: n + 1]

    empty = torch.zeros(0, dtype=torch.int64)
    if n == 0:
        return LoRARouting(num_rows, 0, empty, empty, empty, empty, {}, {}, empty)

    lens = (indptr[1:] - indptr[:-1]).clamp(min=0)  # upstream: a negative length processes nothing
    slots = _cpu_long(batch_info.weight_indices)[:n]
    ranks_all = _cpu_long(batch_info.lora_ranks)
    scal_all = batch_info.scalings.detach().to("cpu", torch.float64).reshape(-1)
    usable = min(num_slots, ranks_all.numel(), scal_all.numel())
    slot_ok = (slots >= 0) & (slots < usable)
    eff_rank = torch.zeros(n, dtype=torch.int64)
    eff_rank[slot_ok] = ranks_all[slots[slot_ok]].clamp(max=max_rank)

    seg_of_row = torch.repeat_interleave(torch.arange(n), lens)
    starts_packed = torch.cumsum(lens, 0) - lens
    position = torch.arange(seg_of_row.numel()) - starts_packed[seg_of_row]
    logical = indptr[:-1][seg_of_row] + position

    # rows past max_len: upstream's grid does not cover them (at tile granularity) -> unspecified
    dropped = position >= max_len
    physical, all_undefined, clamped, undefined = _physical_rows(batch_info, logical, num_rows)
    bad_slot = ~slot_ok[seg_of_row]
    neg_rank = eff_rank[seg_of_row] < 0
    active = (eff_rank[seg_of_row] != 0) & ~dropped & ~bad_slot & ~neg_rank & ~clamped
    # rows past max_len (of a slot that is on) and rows of unknown slots or negative ranks:
    # upstream may or may not touch them, so their values are unspecified
    for maybe in (dropped & (eff_rank[seg_of_row] != 0), bad_slot | neg_rank):
        if maybe.any():
            undefined.append(physical[maybe].clamp(0, max(num_rows - 1, 0)))
    rows = physical[active]
    if rows.numel() and torch.unique(rows).numel() != rows.numel():  # repeated rows: write race
        uniq, counts = torch.unique(rows, return_counts=True)
        undefined.append(uniq[counts > 1])
    slot_rank = {}
    slot_scaling = {}
    for w in torch.unique(slots[slot_ok]).tolist():
        slot_rank[w] = int(min(max_rank, int(ranks_all[w])))
        slot_scaling[w] = float(scal_all[w])
    return LoRARouting(
        num_rows=num_rows,
        num_segments=n,
        rows=rows,
        segment=seg_of_row[active],
        slot=slots[seg_of_row[active]],
        position=position[active],
        slot_rank=slot_rank,
        slot_scaling=slot_scaling,
        undefined_rows=(torch.unique(torch.cat(undefined)) if undefined else empty),
        all_undefined=all_undefined,
    )


def check_shape(field: str, tensor: torch.Tensor, expected: tuple, why: str) -> None:
    """Strict shape check; ``None`` entries in ``expected`` match any size."""
    got = tuple(tensor.shape)
    if len(got) != len(expected) or any(e is not None and e != g for e, g in zip(expected, got)):
        shown = tuple("*" if e is None else e for e in expected)
        raise_contract("lora.strict.shape_mismatch", field=field, got=got, expected=shown, why=why)


def check_data_tensor(field: str, tensor: object, device: torch.device) -> None:
    """Strict check that a data argument is a floating tensor on the data's device."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        raise_contract("lora.strict.tensor_attr", field=field, expected="a floating-point torch.Tensor",
                       got=describe_tensor(tensor), fix="pass fp16, bf16, fp32 or fp64 data")
    if tensor.device != device:
        raise_contract("lora.strict.tensor_attr", field=field, expected=f"on {device} (the activations' device)",
                       got=describe_tensor(tensor), fix=f"pass {field}.to('{device}')")


def check_in_place_layout(field: str, tensor: torch.Tensor) -> None:
    """Strict check that an output updated in place has no elements sharing memory: with stride 0
    (an ``expand``) or overlapping strides, two rows' updates land on one element and the result
    depends on the kernel's write order.  (Inputs may overlap: a kernel only reads them.)"""
    why = overlap_problem(tensor)
    if why is not None:
        raise_contract("lora.strict.tensor_attr", field=field,
                       expected="a tensor whose elements do not share memory (it is updated in place)",
                       got=describe_layout(tensor),
                       fix=f"{why}; pass a tensor that owns its memory, e.g. {field}.clone(), and use the returned one")
