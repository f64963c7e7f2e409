"""Tile models of the kv_b LoRA codes (Note [Tile coverage] in :mod:`kernel_oracle.harness.tile_coverage`), which
the ``lora`` record names (its ``tile_models``).

Note [LoRA tile models]
-----------------------
A LoRA problem's tiled dimensions are named ``rows``, ``heads`` and ``<role>=<size>``: the role is ``K`` (a
reduction loop inside a program) or ``N`` (output columns across programs or a loop of output blocks), the size
the problem's field it runs over (``qk``, ``vd``, ``C``, ``R``).  Two models:

* ``ours``: our Triton kernels (:mod:`kernel_oracle.kernels.lora`).  Which path a call takes, and so its blocks,
  is :func:`kernel_oracle.kernels.lora.plan` of the call's host integers under the default options (``early_reads``:
  those of ``triton@lora_early_reads=on``), with
  :data:`~kernel_oracle.kernels.lora.BLOCKS`' entry of that path.  Rows: a segment-major tile holds one
  segment's rows (the extent is the longest segment), a token-major one consecutive logical rows (all ``S``), or
  one slot's rows when its tiles are slot-sorted (the most rows of one slot).  The rank is one block sized to
  ``R`` (``BLOCK_R``), never tiled.  On a GPU the shared-memory fit may launch smaller blocks than the table
  (Note [Shared memory] in :mod:`kernel_oracle.kernels.lora._smem`): more blocks, never fewer.
* ``blocks``: a third-party code whose blocks were read from its own launch code (the adapter reads them,
  :mod:`kernel_oracle.fuzz.targets.sglang_tiles`): ``{"model": "blocks", "rows": "segment" | "slot", "ops":
  {op: {dim: block, "split:<dim>": parts}}}``, or ``"by_phase"`` ``{"decode": ops, "prefill": ops}`` for a
  code whose plan depends on ``is_prefill`` (SGLang's ``triton_v2`` path).  ``rows: "segment"``: a program
  tiles one segment (SGLang's kv_b files: the grid covers ``max_len``); ``"slot"``: the rows of one slot (and
  head) are one group, padded to the block (the v2 route).
"""

from __future__ import annotations

from kernel_oracle.kernels.lora import BLOCKS, plan, token_major_blocks
from kernel_oracle.kernels.options import LoRAOptions
from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.lora_routing import max_segment_len, num_segments

from kernel_oracle.harness.tile_coverage import TiledDim, slot_rows
from kernel_oracle.harness.tiles import TileModel

__all__ = ["LORA_TILE_MODELS", "OURS_DIMS", "blocks_lora_dims", "blocks_lora_hints", "ours_lora_dims",
           "ours_lora_hints", "ours_lora_model"]

# op -> (dimension, the BLOCKS key of its block) of our kernels (kernels/lora/_split.py, _fused.py); rows: BT
OURS_DIMS = {
    "step_a_q": (("K=qk", "BLOCK_K"),),
    "step_b_q": (("heads", "BH"), ("N=C", "BLOCK_C")),
    "step_a_v": (("heads", "BH"), ("K=C", "BLOCK_K")),
    "step_b_v": (("N=vd", "BLOCK_V"),),
    "q_side_fused": (("K=qk", "BLOCK_K"), ("N=C", "BLOCK_C")),
    "v_side_fused": (("K=C", "BLOCK_K"), ("N=vd", "BLOCK_V")),
}


def _size(problem, dim: str) -> int:
    """The extent of ``dim`` (``heads`` or ``<role>=<field>``) in ``problem``."""
    return problem.H if dim == "heads" else int(getattr(problem, dim.partition("=")[2]))


def _processed(problem) -> tuple:
    """(batch info without data, the lengths of the segments a launch processes)."""
    bi = make_lora_batch_info(problem.seg_lens, problem.weight_indices, problem.lora_ranks, problem.scalings,
                              cuda_graph_pad_to=problem.cuda_graph_pad_to, with_max_len=problem.with_max_len,
                              with_seg_lens=problem.with_seg_lens, stale_host_ints=problem.stale_host_ints,
                              eager_counts=problem.eager_counts, max_len_slack=problem.max_len_slack,
                              seg_lens_drift=problem.seg_lens_drift, is_prefill=problem.is_prefill)
    return bi, list(problem.seg_lens[:num_segments(bi)])


def ours_lora_dims(model: dict, problem) -> list:
    """Our kernels' tiled dimensions of ``problem`` (Note [LoRA tile models]: ``ours``)."""
    op = problem.op
    bi, lens = _processed(problem)
    try:
        max_len = max_segment_len(bi)
    except (ValueError, TypeError):
        max_len = max(lens, default=0)
    p = plan(op, bi, problem.S, max_len, num_slots=problem.L, options=_options(model))
    if not p.token_major:
        rows = max(lens, default=0)
    else:
        rows = slot_rows(lens, problem.weight_indices) if p.sorted_rows else problem.S
    dims = [TiledDim(op, "rows", rows, int(p.blocks["BT"]))]
    return dims + [TiledDim(op, dim, _size(problem, dim), int(p.blocks[key])) for dim, key in OURS_DIMS[op]]


def _options(model: dict) -> LoRAOptions:
    """The launch options the model's kernels run under: the defaults, or ``early_reads`` (its blocks)."""
    return LoRAOptions(early_reads=bool(model.get("early_reads", False)))


def ours_lora_hints(model: dict, op: str) -> dict:
    """dimension -> every block our kernels may tile it with in ``op`` (both paths, the wide token tiles)."""
    entries = [BLOCKS[op]["seg"], *(token_major_blocks(op, rows, 1, _options(model)) for rows in (1, 1 << 20))]
    hints = {"rows": tuple(sorted({int(e["BT"]) for e in entries}))}
    for dim, key in OURS_DIMS[op]:
        hints[dim] = tuple(sorted({int(e[key]) for e in entries if key in e}))
    return hints


def _op_blocks(model: dict, problem) -> dict:
    ops = model["by_phase"]["prefill" if problem.is_prefill else "decode"] if "by_phase" in model else model["ops"]
    return ops.get(problem.op) or {}


def blocks_lora_dims(model: dict, problem) -> list:
    """A third-party code's tiled dimensions of ``problem`` from the blocks read from it (Note [LoRA tile
    models]: ``blocks``)."""
    op = problem.op
    blocks = _op_blocks(model, problem)
    _, lens = _processed(problem)
    out = []
    for dim, block in blocks.items():
        if dim.startswith("split:"):
            continue
        if dim == "rows":
            extent = slot_rows(lens, problem.weight_indices) if model.get("rows") == "slot" else max(lens, default=0)
        else:
            extent = _size(problem, dim)
        split = blocks.get(f"split:{dim}")
        parts = None
        if split is not None:  # a reduction cut into `split` equal parts, as many of them non-empty as it reaches
            per = -(-extent // int(split)) if extent else 0
            parts = -(-extent // per) if per else 0
        out.append(TiledDim(op, dim, extent, int(block), parts))
    return out


def blocks_lora_hints(model: dict, op: str) -> dict:
    """dimension -> the blocks a third-party code tiles it with in ``op`` (every phase)."""
    tables = list(model["by_phase"].values()) if "by_phase" in model else [model["ops"]]
    hints: dict = {}
    for ops in tables:
        for dim, block in (ops.get(op) or {}).items():
            if not dim.startswith("split:") and int(block) > 0:
                hints[dim] = tuple(sorted({*hints.get(dim, ()), int(block)}))
    return hints


def ours_lora_model() -> dict:
    """The model of our LoRA kernels (the same blocks interpreted and compiled: the launch plan's)."""
    return {"model": "ours"}


LORA_TILE_MODELS = {"ours": TileModel(ours_lora_dims, ours_lora_hints, lambda model, name: ours_lora_model()),
                    "blocks": TileModel(blocks_lora_dims, blocks_lora_hints)}
