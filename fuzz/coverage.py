"""The tile coverage of a campaign's cases: counted as they run, or measured from the draws alone.

Note [Coverage from the draws]
------------------------------
A campaign counts each case it executes into its record's coverage table (Note [Tile coverage] in
:mod:`kernel_oracle.harness.tile_coverage`) with the target's own tile model of the family
(:func:`tile_model_of`).  While no case fails, what a time-boxed campaign draws is known beforehand (Note [The
campaign's own stream] in :mod:`kernel_oracle.fuzz.stream`), so the same table can be computed without running
a kernel: :func:`draw_coverage` draws a campaign's runs for a target's description and counts them.  A GPU
campaign's table is computed on the CPU from the target's description on that GPU (:func:`on_gpu`: our kernels
compiled, blocks read for that device's name), so the shares at ``--limits gpu`` can be checked without a GPU.
"""

from __future__ import annotations

from typing import Optional

from kernel_oracle.harness.tile_coverage import CoverageTable
from kernel_oracle.harness.tiles import known, on_gpu as model_on_gpu, tiled_dims, unknown_model

from .stream import TIME_CHUNK_EXAMPLES, CampaignStream

__all__ = ["GPU_NAME", "count_case", "draw_coverage", "on_gpu", "tile_model_of"]

# the device a GPU campaign's blocks are projected for by default: the lead's H100 (no tuned csgmv table names it)
GPU_NAME = "NVIDIA H100 80GB HBM3"


def tile_model_of(info: dict, family: str, target: str, table: Optional[CoverageTable] = None) -> dict:
    """The tile model of ``family`` in a target's description (``Target.to_record()``), or why there is none
    (noted in ``table`` when given)."""
    model = (info.get("tiles") or {}).get(family)
    if model is None:
        model = unknown_model(f"{target} does not describe the blocks of its code")
    if table is not None and not known(model):
        table.note_unknown(target, family, str(model.get("reason") or "no tile model"))
    return model


def count_case(table: CoverageTable, target: str, model: Optional[dict], case) -> None:
    """Count one executed case into ``table`` (nothing where ``model`` is not known)."""
    if known(model):
        table.add(target, tiled_dims(model, case.problem))


def on_gpu(info: dict, device_name: str = GPU_NAME) -> dict:
    """``info`` (a target's description on the CPU) as that target describes itself on a Hopper GPU named
    ``device_name``: our kernels compiled (the GPU's block configs), a release's csgmv tuned tables for that name,
    every dtype taken (the interpreter's bf16 exclusion gone)."""
    tiles = {family: model_on_gpu(model, device_name) for family, model in (info.get("tiles") or {}).items()}
    return {**info, "tiles": tiles, "excluded_dtypes": {}}


def draw_coverage(info: dict, family: str, *, limits: str, cases: int, seed: int = 0,
                  table: Optional[CoverageTable] = None) -> CoverageTable:
    """The coverage table of the first ``cases`` cases a time-boxed campaign of ``family`` on the target
    ``info`` describes would run with ``seed`` at ``limits`` while none fails (each distinct case once, as the
    campaign runs it; Note [Coverage from the draws]); no kernel runs.  Added to ``table`` when given."""
    table = CoverageTable() if table is None else table
    target = str(info.get("name") or "target")
    model = tile_model_of(info, family, target, table)
    if not known(model):
        return table
    stream = CampaignStream(seed=seed, limits=limits, upstream_contracts_only=False)
    seen: set = set()  # a campaign runs a repeated case once
    for case in stream.cases(info, family, range(1, -(-cases // TIME_CHUNK_EXAMPLES) + 1)):
        if len(seen) >= cases:
            break
        if case.to_json() not in seen:
            seen.add(case.to_json())
            count_case(table, target, model, case)
    return table
