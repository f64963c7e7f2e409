"""Which path, grid and blocks a kv_b LoRA call launches: host integers and the options in force only.

Note [Path choice]
------------------
A segment-major launch has ``n_launch * ceil(max_len / BT)`` tiles of ``BT`` rows; when that is more than
twice the rows the input holds (``S``, an upper bound of the routed rows), most tile rows would idle --
decode batches of one-token segments fill 1/BT of each tile -- and the token-major path, whose grid is
``ceil(S / BT)`` tiles of consecutive logical rows, is used instead (``LoRAOptions.route`` forces either).
Token-major with slot-sorted tiles over ``L <= FLAT_SLOTS_MAX`` slots launches the flat grid,
``ceil(S / BT) + L - 1`` tiles with no slot axis (Note [Flat slot grid] in :mod:`kernels.lora._kernels`):
still host integers only (``L`` is the weight buffer's ``shape[0]``), so a call with ``strict=False`` can be
captured in a CUDA graph (Note [No host synchronisation] in :mod:`kernels.lora._launch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

import triton

from kernel_oracle.kernels.options import LoRAOptions, current_options
from kernel_oracle.reference.lora_routing import num_segments

from ._smem import DEFAULT_STAGES

__all__ = ["BLOCKS", "FLAT_SLOTS_MAX", "FLAT_SLOTS_MIN_BLOCK", "Plan", "SEG_TILE_BUCKETS", "SEG_TILE_ELEMS_MAX",
           "TOKEN_MAJOR_WASTE", "block_entry", "plan", "slot_block", "token_major_blocks"]


def _read_only(table: dict) -> Mapping:
    return MappingProxyType({k: _read_only(v) if isinstance(v, dict) else v for k, v in table.items()})


# The default blocks per kernel and path (tokens BT, heads BH, inner blocks, num_warps, the fused kernels'
# switches): the winners of ``python -m kernel_oracle.benchmarks.bench_lora --sweep`` (prefill-8x2048, "seg") and
# ``--decode-ab`` (decode-bs64 and decode-bs256 graph replay, "tok") on the H200, figures in docs/BENCHMARKS.md.
# Read-only: a caller launches others with LoRAOptions.blocks (Note [LoRA block entries] in kernels.options).
#   PREFETCH: the first base and weight blocks loaded before step A (decode is a chain of loads, not bytes);
#   PREFETCH_ALL (q, Note [Whole-row prefetch]): the first four base and A blocks before step A, on one stage:
#     faster on 32-row decode tiles, slower on 64-row ones, which WIDE turns back off;
#   WIDE_BT / WIDE: token-major tiles as tall as WIDE_BT, with the WIDE overrides, where every slot has that many
#     rows (token_major_blocks): fuller tiles at decode-bs256, while decode-bs64 keeps 32-row ones;
#   C_SPLIT: kv_lora_rank columns per program (None: all of them, step A computed once per tile);
#   HEADS_FIRST: consecutive programs take one row tile's heads (their base rows are adjacent in memory); with it
#     the q side's segment-major tiles are 64 rows on 8 warps and step A runs in 64-column blocks of qk_nope;
#   PDL, META_FIRST: Notes [Programmatic dependent launch] and [Slot metadata first] in kernels.lora._kernels;
#   EARLY_BLOCKS: the overrides LoRAOptions.early_reads launches with (Note [Early reads]): 16-row q tiles.
BLOCKS = _read_only({
    "step_a_q": {"seg": dict(BT=128, BLOCK_K=64, num_warps=8), "tok": dict(BT=64, BLOCK_K=128, num_warps=4)},
    "step_b_q": {"seg": dict(BT=16, BH=4, BLOCK_C=128, num_warps=4),
                 "tok": dict(BT=4, BH=16, BLOCK_C=256, num_warps=4)},
    "step_a_v": {"seg": dict(BT=16, BH=4, BLOCK_K=128, num_warps=4),
                 "tok": dict(BT=4, BH=16, BLOCK_K=128, num_warps=4)},
    "step_b_v": {"seg": dict(BT=64, BLOCK_V=128, num_warps=4), "tok": dict(BT=64, BLOCK_V=128, num_warps=8)},
    "q_side_fused": {"seg": dict(BT=64, BLOCK_K=64, BLOCK_C=128, C_SPLIT=None, num_warps=8, HEADS_FIRST=True,
                                 PDL=True),
                     "tok": dict(BT=32, BLOCK_K=128, BLOCK_C=128, C_SPLIT=None, num_warps=4, PREFETCH=True,
                                 HEADS_FIRST=True, PREFETCH_ALL=True, num_stages=1, WIDE_BT=64,
                                 WIDE=dict(PREFETCH_ALL=False, num_stages=DEFAULT_STAGES), META_FIRST=True, PDL=True,
                                 EARLY_BLOCKS=dict(BT=16))},
    "v_side_fused": {"seg": dict(BT=64, BLOCK_K=64, BLOCK_V=128, num_warps=4, HEADS_FIRST=True, PDL=True),
                     "tok": dict(BT=64, BLOCK_K=128, BLOCK_V=128, num_warps=4, PREFETCH=True, HEADS_FIRST=True,
                                 META_FIRST=True, PDL=True, EARLY_BLOCKS={})},
})

# a segment-major launch is replaced by the token-major one when its tiles hold more than this many
# times the input's rows (i.e. when more than half of the tile rows would idle)
TOKEN_MAJOR_WASTE = 2
# token-major launches over at most 256 segments find a row's segment by one vectorized compare against
# all segment ends (one load); more segments use a binary search (log2(n) dependent loads).  The
# compare's width is the smallest bucket holding every launched segment (Note [Specialization] in
# kernels.lora._kernels), and the (token rows x segments) tile in registers is capped too.
SEG_TILE_BUCKETS = (64, 256)
SEG_TILE_ELEMS_MAX = 16384
# slot-sorted launches over at most FLAT_SLOTS_MAX slots may take the flat grid (Note [Flat slot grid]), whose
# programs count every slot's rows in a (SEG_TILE x NSLOT) tile, NSLOT = slot_block(L); where they take it is
# LoRAOptions.flat_slots_min_saving (2: only where the slot-sorted grid would launch twice the programs, since
# each flat program's count costs more than it saves when few programs go; bench_lora --decode-ab compares them)
FLAT_SLOTS_MIN_BLOCK = 8
FLAT_SLOTS_MAX = 32


def slot_block(num_slots: int) -> int:
    """``NSLOT`` of a flat launch over ``num_slots`` slots: a power of two, at least
    :data:`FLAT_SLOTS_MIN_BLOCK`, so that the usual slot counts (up to 8) share one compiled kernel."""
    return max(FLAT_SLOTS_MIN_BLOCK, triton.next_power_of_2(num_slots))


@dataclass(frozen=True)
class Plan:
    """Launch geometry of one call (host integers only)."""

    token_major: bool
    n_launch: int  # segments the kernel may touch (CUDA-graph mode: the padded count)
    row_tiles: int  # grid axis 0
    tiles_per_seg: int
    search_steps: int  # the binary search's steps (SEG_TILE == 0); a flat grid's slot count (Note [Flat slot grid])
    seg_tile: int  # token-major: >0 finds segments by one vectorized compare over this many ends
    blocks: Mapping
    slot_block: int = 0  # >0: the flat grid (Note [Flat slot grid]), NSLOT; grid axis 2 has no slot factor
    sorted_rows: bool = False  # token-major tiles of one slot's rows in segment order (Note [Slot-sorted tiles])


def block_entry(op: str, path: str, options: LoRAOptions) -> Mapping:
    """The blocks ``op`` launches with on ``path``: ``options.blocks``' entry, else :data:`BLOCKS`'."""
    entry = options.block_entry(op, path)
    return BLOCKS[op][path] if entry is None else entry


def token_major_blocks(op: str, num_rows: int, num_slots: int, options: Optional[LoRAOptions] = None) -> dict:
    """The token-major blocks of ``op`` (:func:`block_entry`) as launched on ``num_rows`` rows over ``num_slots``
    slots: under ``options.early_reads`` its ``EARLY_BLOCKS`` overrides applied and ``EARLY`` set; then ``BT``
    raised to ``WIDE_BT``, and the ``WIDE`` overrides applied, where there are at least that many rows per slot
    (the three keys themselves dropped).  ``options``: the LoRA options in force when None."""
    lora = current_options().lora if options is None else options
    blocks = dict(block_entry(op, "tok", lora))
    early_blocks = blocks.pop("EARLY_BLOCKS", None)
    if lora.early_reads and early_blocks is not None:
        blocks.update(early_blocks, EARLY=True)
    wide = blocks.pop("WIDE_BT", None)
    wide_blocks = blocks.pop("WIDE", {})
    if wide and num_slots > 0 and num_rows >= wide * num_slots:
        blocks.update(BT=wide, **wide_blocks)
    return blocks


def plan(op: str, batch_info, num_rows: int, max_len: int, *, num_slots: int = 0,
         options: Optional[LoRAOptions] = None) -> Plan:
    """Pick the path and grid of ``op`` for this batch (Note [Path choice]) under ``options`` (the LoRA options
    in force when None).  ``num_slots``: the weight buffer's slots (``shape[0]``), which a flat grid's bound
    needs."""
    lora = current_options().lora if options is None else options
    n = num_segments(batch_info)
    n_launch = n
    if getattr(batch_info, "use_cuda_graph", False):
        # the captured launch covers every padded segment; padding has zero length
        n_launch = max(n, int(batch_info.weight_indices.shape[0]))
    seg_blocks = block_entry(op, "seg", lora)
    tiles_per_seg = triton.cdiv(max(max_len, 0), seg_blocks["BT"])
    seg_rows = n_launch * tiles_per_seg * seg_blocks["BT"]
    force = lora.route
    token_major = seg_rows > TOKEN_MAJOR_WASTE * num_rows if force == "auto" else force == "tok"
    if token_major:
        tok_blocks = token_major_blocks(op, num_rows, num_slots, lora)
        bt = tok_blocks["BT"]
        seg_tile = next((b for b in SEG_TILE_BUCKETS if n_launch <= b and bt * b <= SEG_TILE_ELEMS_MAX), 0)
        tiles = triton.cdiv(num_rows, bt)
        sorted_rows = lora.slot_sorted and seg_tile > 0
        # flat: sum_w ceil(n_w/BT) <= ceil(S/BT) + L - 1 tiles in all (Note [Flat slot grid]), launched when
        # that is at most 1/flat_slots_min_saving of the slot-sorted grid's ceil(S/BT) per slot
        flat = (sorted_rows and lora.flat_slots and 1 <= num_slots <= FLAT_SLOTS_MAX
                and tiles * num_slots >= lora.flat_slots_min_saving * (tiles + num_slots - 1))
        extra = num_slots - 1 if flat else 0
        steps = num_slots if flat else max(n_launch, 1).bit_length() + 1
        return Plan(True, n_launch, tiles + extra, 1, steps, seg_tile, tok_blocks, slot_block(num_slots) if flat else 0,
                    sorted_rows)
    return Plan(False, n_launch, n_launch * tiles_per_seg, max(tiles_per_seg, 1), 0, 0, seg_blocks)
