"""LoRA batch-info type and a builder from segment lengths.

``LoRABatchInfo`` carries the same fields as SGLang's ``sglang.srt.lora.utils.LoRABatchInfo``, so
objects of either class (or any object with these attributes) can be passed to every API of the
suite: the APIs duck-type, they never ``isinstance``-check.

Shapes (``n`` segments, ``L`` slots, ``S`` token rows):

* ``seg_indptr``      int32 ``(n+1,)`` (or longer in CUDA-graph mode)
* ``weight_indices``  int32 ``(n,)``   slot of each segment
* ``lora_ranks``      int32 ``(L,)``   rank of each slot (0 = slot off)
* ``scalings``        float32 ``(L,)``
* ``seg_lens``        int32 ``(n,)`` or None
* ``permutation``     int64 ``(S,)`` or None: logical row -> physical token
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

__all__ = ["SEG_LENS_DRIFTS", "LoRABatchInfo", "make_lora_batch_info"]

# how seg_lens may disagree with seg_indptr in a valid batch (docs/semantics.md#fields-that-may-disagree): upstream
# reads seg_indptr for the bounds and seg_lens only as the tile count when max_len is None
#   rolled:  a stale order of the right lengths (same sum, same maximum: valid with or without max_len)
#   longer:  every length one more (the maximum covers the longest segment: valid with or without max_len)
#   shorter: every length one less (valid only beside max_len, which then gives the tile count)
SEG_LENS_DRIFTS = ("rolled", "longer", "shorter")


def _eager_counts(values: Sequence[int], n: int) -> tuple[int, int]:
    """Check ``eager_counts`` (see :func:`make_lora_batch_info`) and return them as ints."""
    vals = tuple(values)
    if len(vals) != 2 or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in vals):
        raise ValueError(f"Expected eager_counts=(bs, num_segments) as two non-negative ints but got "
                         f"eager_counts={vals!r}")
    bs, num = vals
    if (num or bs) != n:
        raise ValueError(f"eager_counts={vals!r} process num_segments or bs = {num or bs} segments, but the batch has "
                         f"{n}; pass num_segments={n} (any bs), or num_segments=0 and bs={n}")
    return bs, num


def _drifted(lens: list[int], drift: Optional[str], with_max_len: bool) -> list[int]:
    """``seg_lens`` as :data:`SEG_LENS_DRIFTS` ``drift`` leaves them (None: the true lengths)."""
    if drift is None or not lens:
        return lens
    if drift == "rolled":
        return lens[-1:] + lens[:-1]
    if drift == "longer":
        return [x + 1 for x in lens]
    if drift == "shorter":
        if not with_max_len:
            raise ValueError("seg_lens_drift='shorter' needs max_len (with_max_len=True): without it max(seg_lens) is "
                             "the tile count and rows of the longest segment would be dropped")
        return [max(x - 1, 0) for x in lens]
    raise ValueError(f"seg_lens_drift={drift!r} is unknown; the only valid values are None, {list(SEG_LENS_DRIFTS)}")


def _checked_segments(seg_lens, weight_indices, lora_ranks) -> tuple[list[int], list[int]]:
    """``seg_lens`` and ``weight_indices`` as int lists, checked: one slot per segment, lengths >= 0,
    every value within the int32 metadata tensors."""
    seg_lens = [int(x) for x in seg_lens]
    weight_indices = [int(x) for x in weight_indices]
    if len(seg_lens) != len(weight_indices):
        raise ValueError(
            f"Expected one slot per segment but got len(seg_lens)={len(seg_lens)} and "
            f"len(weight_indices)={len(weight_indices)}; pass one weight index per segment"
        )
    if any(x < 0 for x in seg_lens):
        raise ValueError(f"Expected non-negative segment lengths but got seg_lens={seg_lens}")
    _check_int32("seg_lens", seg_lens)
    _check_int32("weight_indices", weight_indices)
    _check_int32("lora_ranks", [int(r) for r in lora_ranks])
    if sum(seg_lens) > _INT32_MAX:
        raise ValueError(f"seg_lens add up to {sum(seg_lens)} rows, beyond what the int32 seg_indptr holds "
                         f"({_INT32_MAX}); split the batch")
    return seg_lens, weight_indices


def _segments(seg_lens: list[int], weight_indices: list[int], padded: int, num_slots: int,
              stale_tail) -> tuple[list[int], list[int], list[int]]:
    """(lengths, slots, seg_indptr) of ``padded`` segments: the real ones, then zero-length padding on slot
    0 (CUDA graph), or with ``stale_tail`` the leftovers of a larger earlier batch, one row each on slots
    0, 1, ... (eager: never read, upstream processes ``num_segments or bs`` segments; CUDA graph: read,
    over padding rows)."""
    extra = padded - len(seg_lens)
    lens = seg_lens + [1 if stale_tail else 0] * extra
    slots = weight_indices + ([i % max(num_slots, 1) for i in range(extra)] if stale_tail else [0] * extra)
    indptr = [0]
    for length in lens:
        indptr.append(indptr[-1] + length)
    return lens, slots, indptr


def _stale(values: Sequence[int], pad_to: Optional[int], padded: int, longest: int) -> tuple[int, int, int]:
    """Check ``stale_host_ints`` (see :func:`make_lora_batch_info`) and return them as ints."""
    if pad_to is None:
        raise ValueError(f"stale_host_ints={tuple(values)!r} needs CUDA-graph mode (host ints are stale only "
                         f"at graph replay); pass cuda_graph_pad_to as well")
    vals = tuple(values)
    if len(vals) != 3 or any(not isinstance(v, int) or isinstance(v, bool) for v in vals):
        raise ValueError(f"Expected stale_host_ints=(bs, num_segments, max_len) as three ints but got "
                         f"stale_host_ints={vals!r}")
    bs, num, max_len = vals
    for name, v in (("bs", bs), ("num_segments", num)):
        if not 0 <= v <= padded:
            raise ValueError(f"stale_host_ints {name}={v} is outside 0..{padded} (the padded segment count); "
                             f"pass a capture-time value no larger than the graph's segments")
    if max_len < longest:
        raise ValueError(f"stale_host_ints max_len={max_len} is smaller than the longest segment ({longest}); "
                         f"the capture-time max_len is an upper bound: pass max_len >= {longest}")
    return bs, num, max_len


@dataclass
class LoRABatchInfo:
    """Mirror of SGLang's ``LoRABatchInfo``: every field any release 0.5.12 - 0.5.23 has, with its name
    and default (``oracle_tests/reference/test_batch_info_fields.py`` reads each release's class)."""

    use_cuda_graph: bool
    bs: int
    num_segments: int
    seg_indptr: torch.Tensor
    weight_indices: torch.Tensor
    lora_ranks: torch.Tensor
    scalings: torch.Tensor
    max_len: Optional[int]
    seg_lens: Optional[torch.Tensor]
    permutation: Optional[torch.Tensor] = None  # a default from 0.5.23 (earlier releases: required)
    expected_tokens: Optional[int] = None
    has_active_lora: bool = False
    req_seg_indptr: Optional[torch.Tensor] = None
    req_weight_indices: Optional[torch.Tensor] = None
    moe_lora_info: object = None
    is_prefill: bool = False  # 0.5.23: the forward is a prefill (the triton_v2 path picks its plan by it)


_INT32_MAX = 2**31 - 1


def _check_int32(field: str, values: Sequence[int]) -> None:
    """The metadata tensors are int32 (as SGLang's): name the entry that does not fit."""
    for i, x in enumerate(values):
        if not -_INT32_MAX - 1 <= x <= _INT32_MAX:
            raise ValueError(f"{field}[{i}]={x} does not fit the int32 metadata tensor (at most {_INT32_MAX}); "
                             f"pass {field} within int32")


def make_lora_batch_info(
    seg_lens: Sequence[int],
    weight_indices: Sequence[int],
    lora_ranks: Sequence[int],
    scalings: Sequence[float],
    *,
    permutation: Optional[Sequence[int] | torch.Tensor] = None,
    cuda_graph_pad_to: Optional[int] = None,
    with_max_len: bool = True,
    with_seg_lens: bool = True,
    stale_host_ints: Optional[Sequence[int]] = None,
    eager_counts: Optional[Sequence[int]] = None,
    max_len_slack: int = 0,
    seg_lens_drift: Optional[str] = None,
    is_prefill: bool = False,
    graph_tail: bool = False,
    device: torch.device | str = "cpu",
) -> LoRABatchInfo:
    """Build a well-formed batch info from per-segment lengths.

    ``permutation``: logical row -> physical token, a permutation of ``range(sum(seg_lens))``
    (pass ``True``-ish tensors or lists; ``None`` for identity routing).

    ``cuda_graph_pad_to``: CUDA-graph mode; ``weight_indices`` / ``seg_indptr`` / ``seg_lens`` are
    padded with zero-length segments (slot 0) up to this many segments, as SGLang does when it
    replays a captured graph for a smaller batch.  ``bs`` and ``num_segments`` stay the real count.

    ``stale_host_ints``: ``(bs, num_segments, max_len)``, CUDA-graph mode only: the host ints as a
    graph captured for another batch left them (docs/semantics.md#cuda-graph-host-ints): ``bs`` and ``num_segments`` at
    most the padded count (typically smaller than the replayed batch: they must not limit it),
    ``max_len`` an upper bound at least the longest segment (ignored when ``with_max_len=False``).
    Only device tensors describe the replayed batch.  SGLang 0.5.12 launched ``bs`` programs and
    guarded with ``num_segments`` here, skipping segments (fixed by PR #28371).

    Fields that may disagree in a valid eager batch (docs/semantics.md#fields-that-may-disagree):
    ``eager_counts``: ``(bs, num_segments)`` with ``num_segments or bs`` the real segment count (more or
    fewer requests than segments, or ``num_segments=0``); when either exceeds it, the metadata tensors
    hold that many segments, the ones past the real count stale leftovers of an earlier batch (one row
    each, after the routed rows, on slots 0, 1, ...) that upstream never reads.  ``max_len_slack``:
    ``max_len`` that much above the longest segment.  ``seg_lens_drift`` (:data:`SEG_LENS_DRIFTS`):
    ``seg_lens`` that disagree with ``seg_indptr`` within the contract.  ``graph_tail`` (CUDA graph): the padded
    tail holds an earlier, larger batch's segments, one row each after the live rows (``LoRAProblem.tail_rows``).
    """
    seg_lens, weight_indices = _checked_segments(seg_lens, weight_indices, lora_ranks)
    n = len(seg_lens)
    padded = n
    bs = num = n
    if eager_counts is not None:
        if cuda_graph_pad_to is not None:
            raise ValueError("eager_counts describe eager mode; under CUDA graph pass stale_host_ints instead")
        bs, num = _eager_counts(eager_counts, n)
        padded = max(n, bs, num)
    if isinstance(max_len_slack, bool) or not isinstance(max_len_slack, int) or max_len_slack < 0:
        raise ValueError(f"Expected max_len_slack to be a non-negative int but got max_len_slack={max_len_slack!r}")
    if (cuda_graph_pad_to is not None and cuda_graph_pad_to < n) or (graph_tail and cuda_graph_pad_to is None):
        raise ValueError("graph_tail=True describes a replayed CUDA graph; pass cuda_graph_pad_to as well"
                         if cuda_graph_pad_to is None else f"cuda_graph_pad_to={cuda_graph_pad_to} is smaller than the "
                         f"{n} segments; pass cuda_graph_pad_to >= {n}")
    padded = cuda_graph_pad_to if cuda_graph_pad_to is not None else padded
    lens, slots, indptr = _segments(seg_lens, weight_indices, padded, len(lora_ranks), eager_counts or graph_tail)
    max_len = max(seg_lens, default=0) + max_len_slack
    given_lens = _drifted(seg_lens, seg_lens_drift, with_max_len) + lens[n:]
    if stale_host_ints is not None:
        bs, num, max_len = _stale(stale_host_ints, cuda_graph_pad_to, padded, max(seg_lens, default=0))
    perm = None if permutation is None else torch.as_tensor(permutation, dtype=torch.int64, device=device).clone()
    return LoRABatchInfo(
        use_cuda_graph=cuda_graph_pad_to is not None,
        bs=bs,
        num_segments=num,
        seg_indptr=torch.tensor(indptr, dtype=torch.int32, device=device),
        weight_indices=torch.tensor(slots, dtype=torch.int32, device=device),
        lora_ranks=torch.tensor([int(r) for r in lora_ranks], dtype=torch.int32, device=device),
        scalings=torch.tensor([float(s) for s in scalings], dtype=torch.float32, device=device),
        max_len=(max_len if with_max_len else None),
        seg_lens=(torch.tensor(given_lens, dtype=torch.int32, device=device) if with_seg_lens else None),
        permutation=perm,
        expected_tokens=indptr[n],
        has_active_lora=True,
        is_prefill=bool(is_prefill),
    )
