"""The valid part of a malformed LoRA case (Note [Malformed consequences] in :mod:`harness.malformed`), which the
``lora`` record names (its ``valid_part``): the kinds that break one segment's metadata, the rows the intact
segments define, and the valid problems next to a malformed one (Note [One defect through malformed input] in
:mod:`harness.through_malformed`)."""

from __future__ import annotations

import dataclasses
from typing import Iterator

import torch

from kernel_oracle.reference.lora_routing import route_lora_batch

from kernel_oracle.harness.malformed import ValidPart
from kernel_oracle.harness.problems import batch_info_of

__all__ = ["LORA_VALID_PART", "SEGMENT_KINDS", "broken_segments", "valid_neighbours"]

# the kinds that break one segment's weight index or bounds, leaving the other segments a valid part
SEGMENT_KINDS = ("slot_out_of_range", "negative_slot", "seg_indptr_decreasing", "seg_indptr_past_rows",
                 "seg_indptr_negative_start")


def broken_segments(call, clean_call) -> set:
    """The segments whose weight index or ``seg_indptr`` bounds differ between the malformed ``call``
    and its valid part ``clean_call`` (the same problem without the mutation)."""
    good, bad = batch_info_of(clean_call), batch_info_of(call)
    gi, bi_ = good.seg_indptr.cpu().tolist(), bad.seg_indptr.cpu().tolist()
    gw, bw = good.weight_indices.cpu().tolist(), bad.weight_indices.cpu().tolist()
    # every segment the metadata describes, not the host count: num_segments may be 0 with bs routing
    # (docs/semantics.md#fields-that-may-disagree), and the routing takes whichever of them upstream reads
    n = min(len(gw), len(bw), len(gi) - 1, len(bi_) - 1)
    return {s for s in range(n) if gw[s] != bw[s] or gi[s] != bi_[s] or gi[s + 1] != bi_[s + 1]}


def _valid_rows(call, clean_call) -> torch.Tensor:
    """The bool mask over the output's rows the intact segments define (``clean_call``: the call without its
    segment-breaking mutation)."""
    good, bad = batch_info_of(clean_call), batch_info_of(call)
    rows = int(clean_call.args[0].shape[0])
    route = route_lora_batch(good, num_rows=rows, num_slots=int(good.lora_ranks.numel()), max_rank=10**9,
                             device=torch.device("cpu"), strict=False)
    bi_ = bad.seg_indptr.cpu().tolist()
    broken = broken_segments(call, clean_call)
    mask = torch.zeros(rows, dtype=torch.bool)
    keep = torch.tensor([int(s) not in broken for s in route.segment.cpu().tolist()], dtype=torch.bool)
    mask[route.rows.cpu()[keep]] = True
    perm = getattr(bad, "permutation", None)
    perm = perm.cpu().long() if perm is not None else None
    logical = int(perm.numel()) if perm is not None else rows
    for s in broken:  # a broken segment's mutated bounds: a kernel may write there, through the permutation
        lo, hi = max(0, min(bi_[s], bi_[s + 1])), min(logical, max(bi_[s], bi_[s + 1]))
        if hi > lo:
            phys = perm[lo:hi] if perm is not None else torch.arange(lo, hi)
            mask[phys[(phys >= 0) & (phys < rows)]] = False
    return mask


def valid_neighbours(problem, call, clean_call) -> Iterator:
    """Valid problems next to ``problem`` (a LoRA problem whose malformed ``call`` broke the segments that differ
    from its ``clean_call``): the problem itself, then per broken segment the problem with that segment on each
    other slot and the problem without it."""
    broken = broken_segments(call, clean_call)
    yield problem
    for b in sorted(broken):
        if b >= len(problem.seg_lens):
            continue
        for w in range(len(problem.lora_ranks)):
            if w != problem.weight_indices[b]:
                yield dataclasses.replace(problem, weight_indices=tuple(
                    w if i == b else x for i, x in enumerate(problem.weight_indices)))
        if len(problem.seg_lens) > 1:
            keep = [i for i in range(len(problem.seg_lens)) if i != b]
            # the host counts described the segments there were: the real ones now
            yield dataclasses.replace(problem, seg_lens=tuple(problem.seg_lens[i] for i in keep),
                                      weight_indices=tuple(problem.weight_indices[i] for i in keep),
                                      eager_counts=None, stale_host_ints=None)


LORA_VALID_PART = ValidPart(frozenset(SEGMENT_KINDS), _valid_rows, valid_neighbours)
