"""Our LoRA kernels' warm-up cases and their compiled variants (Note [Warm-up] and Note [Variant warm-up] in
:mod:`harness.warmup`), which the ``lora`` record names (its ``warm_up`` and ``variants``)."""

from __future__ import annotations

import itertools
from typing import Sequence

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_lora import LoRAProblem

__all__ = ["lora_variant_cases", "lora_warm_up_cases"]

# LoRA batches: (seg_lens, weight_indices, lora_ranks, extra problem fields), most common first
_LORA_BATCHES = (
    ((300, 17, 129), (0, 1, 0), (16, 8), {}),  # prefill, ragged at tile edges
    ((1,) * 64, tuple(i % 4 for i in range(64)), (16, 16, 8, 0), {}),  # decode
    ((33, 64), (1, 0), (64, 64), {"R": 64, "permute": True}),  # permuted rows, rank 64
    ((1,) * 24, tuple(i % 2 for i in range(24)), (16, 16), {"cuda_graph_pad_to": 32}),  # graph replay
)
_LORA_DIMS = dict(H=16, qk=128, vd=128, C=512, R=16)


def lora_warm_up_cases(ops: Sequence[str], dtypes: Sequence[str]) -> list[Case]:
    """The fixed warm-up cases of the LoRA ``ops`` in ``dtypes``: every op and dtype of the first batch, then
    the next batch."""
    out: list[Case] = []
    for seg_lens, slots, ranks, extra in _LORA_BATCHES:
        for dtype in dtypes:
            for op in ops:
                fields = {**_LORA_DIMS, **extra}
                scalings = tuple(1.0 - 0.25 * i for i in range(len(ranks)))
                out.append(Case(LoRAProblem(op=op, seg_lens=seg_lens, weight_indices=slots, lora_ranks=ranks,
                                            scalings=scalings, dtype=dtype, seed=1, **fields)))
    return out


# Note [Variant warm-up]: what selects a compiled kernel of ours (Note [Specialization] in kernels/lora),
# most common in a GPU campaign first (a launch recorder over 2,000 cases of the "gpu" preset on the CPU:
# token-major with few segments, then segment-major; rank blocks 64 and 32; generic layouts 2 to 1 over
# aligned ones).  One case each: paths x rank blocks x layouts x dtypes x base dtypes x ops.
# (segment lengths, slots, ops or None for all, what it selects).  Token-major launches over 3 or more
# slots can take the flat grid (Note [Flat slot grid]: only where it halves the programs, which one or two
# slots never do), a variant of its own; the fused q side's tile height depends on the rows per slot
# (WIDE_BT in kernels.lora.BLOCKS), so its other heights get cases of their own.
_VARIANT_PATHS = (
    ((1,) * 8, 2, None, "token-major, one compare over 64 segment ends"),
    ((256,), 2, None, "segment-major"),
    # one slot never takes the flat grid; 50 rows keep the fused q side's tiles short (below WIDE_BT)
    ((1,) * 50 + (0,) * 50, 1, None, "token-major, one compare over 256 segment ends"),
    ((1,) * 300, 2, None, "token-major, binary search (wide fused-q tiles: 150 rows per slot)"),
    ((3,) * 60, 4, None, "token-major, one compare over 64 ends, the flat grid"),
    ((1,) * 200, 4, None, "token-major, one compare over 256 ends, the flat grid"),
    ((5,) * 60, 4, ("q_side_fused",), "the flat grid, one compare over 64 ends, wide fused-q tiles"),
    ((1,) * 256, 4, ("q_side_fused",), "the flat grid, one compare over 256 ends, wide fused-q tiles"),
    ((5,) * 60, 1, ("q_side_fused",), "one compare over 64 ends, wide fused-q tiles (one slot: per-slot grid)"),
    ((1,) * 200, 1, ("q_side_fused",), "one compare over 256 ends, wide fused-q tiles (one slot: per-slot grid)"),
    ((1,) * 300, 8, ("q_side_fused",), "binary search, fused-q tiles of 37 rows per slot"),
)
_VARIANT_RANKS = (32, 64, 128)  # BLOCK_R buckets (kernels.lora._launch.MIN_BLOCK_R and up)
# the rank block of a buffer rank past 128 (the fuzzer's tile edge 129 of the "gpu" preset's ranks, about one
# case in 300): every other dimension again, after all of the above
_RARE_RANKS = (256,)
_VARIANT_LAYOUTS = (dict(H=2, qk=63, vd=47, C=129),  # sizes off 8 elements: the generic family
                    dict(H=2, qk=64, vd=48, C=128))  # everything 16-byte aligned: the aligned family
_BASE_OPS = ("step_b_q", "step_b_v", "q_side_fused", "v_side_fused")  # ops with a base_output


def lora_variant_cases(ops: Sequence[str], dtypes: Sequence[str]) -> list[Case]:
    """One LoRA case per compiled variant of our LoRA kernels that a campaign meets (Note [Variant
    warm-up]): path x rank block x layout family x permutation x dtype x base dtype (the same, or fp32)
    x op, most common first, so a time limit cuts the rarest.  2,896 cases for every op and dtype."""
    lora_ops = list(ops)
    out: list[Case] = []
    for rank_blocks in (_VARIANT_RANKS, _RARE_RANKS):
        for seg_lens, n_slots, only, _ in _VARIANT_PATHS:
            slots = tuple(i % n_slots for i in range(len(seg_lens)))
            for R in rank_blocks:
                ranks = tuple(R if w % 2 == 0 else R // 2 for w in range(n_slots))
                scalings = tuple(1.0 if w % 2 == 0 else 0.5 for w in range(n_slots))
                for dims, permute, dtype, op in itertools.product(_VARIANT_LAYOUTS, (False, True), dtypes, lora_ops):
                    if only is not None and op not in only:
                        continue
                    bases = (None, "float32") if op in _BASE_OPS and dtype != "float32" else (None,)
                    out.extend(Case(LoRAProblem(op=op, seg_lens=seg_lens, weight_indices=slots, lora_ranks=ranks,
                                                scalings=scalings, R=R, permute=permute, dtype=dtype, base_dtype=base,
                                                seed=1, **dims)) for base in bases)
    return out
