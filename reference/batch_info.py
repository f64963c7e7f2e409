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

__all__ = ["LoRABatchInfo", "make_lora_batch_info"]


@dataclass
class LoRABatchInfo:
    """Mirror of SGLang's ``LoRABatchInfo`` (same field names, order and defaults)."""

    use_cuda_graph: bool
    bs: int
    num_segments: int
    seg_indptr: torch.Tensor
    weight_indices: torch.Tensor
    lora_ranks: torch.Tensor
    scalings: torch.Tensor
    max_len: Optional[int]
    seg_lens: Optional[torch.Tensor]
    permutation: Optional[torch.Tensor]
    expected_tokens: Optional[int] = None
    has_active_lora: bool = False
    req_seg_indptr: Optional[torch.Tensor] = None
    req_weight_indices: Optional[torch.Tensor] = None
    moe_lora_info: object = None


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
    device: torch.device | str = "cpu",
) -> LoRABatchInfo:
    """Build a well-formed batch info from per-segment lengths.

    ``permutation``: logical row -> physical token, a permutation of ``range(sum(seg_lens))``
    (pass ``True``-ish tensors or lists; ``None`` for identity routing).

    ``cuda_graph_pad_to``: CUDA-graph mode; ``weight_indices`` / ``seg_indptr`` / ``seg_lens`` are
    padded with zero-length segments (slot 0) up to this many segments, as SGLang does when it
    replays a captured graph for a smaller batch.  ``bs`` and ``num_segments`` stay the real count.
    """
    seg_lens = [int(x) for x in seg_lens]
    weight_indices = [int(x) for x in weight_indices]
    if len(seg_lens) != len(weight_indices):
        raise ValueError(
            f"Expected one slot per segment but got len(seg_lens)={len(seg_lens)} and "
            f"len(weight_indices)={len(weight_indices)}; pass one weight index per segment"
        )
    if any(x < 0 for x in seg_lens):
        raise ValueError(f"Expected non-negative segment lengths but got seg_lens={seg_lens}")
    n = len(seg_lens)
    padded = n
    if cuda_graph_pad_to is not None:
        if cuda_graph_pad_to < n:
            raise ValueError(
                f"cuda_graph_pad_to={cuda_graph_pad_to} is smaller than the {n} segments; "
                f"pass cuda_graph_pad_to >= {n}"
            )
        padded = cuda_graph_pad_to
    lens = seg_lens + [0] * (padded - n)
    slots = weight_indices + [0] * (padded - n)
    indptr = [0]
    for length in lens:
        indptr.append(indptr[-1] + length)
    if permutation is not None:
        perm = torch.as_tensor(permutation, dtype=torch.int64, device=device).clone()
    else:
        perm = None
    return LoRABatchInfo(
        use_cuda_graph=cuda_graph_pad_to is not None,
        bs=n,
        num_segments=n,
        seg_indptr=torch.tensor(indptr, dtype=torch.int32, device=device),
        weight_indices=torch.tensor(slots, dtype=torch.int32, device=device),
        lora_ranks=torch.tensor([int(r) for r in lora_ranks], dtype=torch.int32, device=device),
        scalings=torch.tensor([float(s) for s in scalings], dtype=torch.float32, device=device),
        max_len=(max(seg_lens, default=0) if with_max_len else None),
        seg_lens=(torch.tensor(lens, dtype=torch.int32, device=device) if with_seg_lens else None),
        permutation=perm,
        expected_tokens=indptr[-1],
        has_active_lora=True,
    )
