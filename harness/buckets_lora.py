"""The row structure of a LoRA call's output (Note [Buckets] in :mod:`harness.buckets`: a mismatch's region),
which the ``lora`` record names (its ``row_structure``): each routed row's segment, position and slot, read
from the batch's routing."""

from __future__ import annotations

from typing import Optional

import torch

from kernel_oracle.reference.lora_routing import route_lora_batch

from kernel_oracle.harness.buckets import RowStructure
from kernel_oracle.harness.problems import batch_info_of

__all__ = ["lora_rows"]


def lora_rows(case, call, S: int) -> Optional[RowStructure]:
    """The structure of the ``S`` output rows of a LoRA ``call``; None when its metadata is too malformed to
    route.  Rows read poison past their rank (``poison_beyond_rank``) in the slots of a rank below ``R``."""
    problem = case.problem
    bi = batch_info_of(call)
    try:
        route = route_lora_batch(bi, num_rows=S, num_slots=int(bi.lora_ranks.numel()), max_rank=10**9,
                                 device=torch.device("cpu"), strict=False)
    except Exception:  # noqa: BLE001 - malformed metadata: no structure to name
        return None
    seg, pos, slot = [-1] * S, [0] * S, [-1] * S
    ranks = [int(r) for r in bi.lora_ranks.detach().cpu()]
    indptr = [int(x) for x in bi.seg_indptr.detach().cpu()[: route.num_segments + 1]]
    for row, s, p, w in zip(route.rows.tolist(), route.segment.tolist(), route.position.tolist(),
                            route.slot.tolist()):
        seg[row], pos[row], slot[row] = s, p, w
    R = getattr(problem, "R", None)
    beyond = frozenset(w for w, r in enumerate(ranks) if 0 < r < R) \
        if getattr(problem, "poison_beyond_rank", None) and R is not None else frozenset()
    return RowStructure(seg, pos, slot, [indptr[i + 1] - indptr[i] for i in range(len(indptr) - 1)],
                        cuda_graph=getattr(problem, "cuda_graph_pad_to", None) is not None, beyond_rank_slots=beyond)
