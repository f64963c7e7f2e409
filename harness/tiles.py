"""Tile models: the block structure of the code under test, as data (Note [Tile coverage] in
:mod:`kernel_oracle.harness.tile_coverage`).

Note [Tile models]
------------------
A target describes the blocks of its code per family (``Target.tiles``: family -> model): a dict with a
``"model"`` name and the facts that model needs, all plain data, so it travels from the worker that loaded the
code to the campaign that draws the cases, and into the record.  A family whose blocks are not known says why
(``{"model": None, "reason": ...}``: the pure-torch reference has no tiles; cuDNN and FlashAttention keep theirs
inside the library).  Two functions read a model:

* :func:`tiled_dims` ``(model, problem)``: the case's :class:`~kernel_oracle.harness.tile_coverage.TiledDim` s
  (what the coverage table counts);
* :func:`tile_hints` ``(model, op)``: dimension -> the block sizes the code may use for it in ``op`` (what the
  strategies draw sizes around: :func:`kernel_oracle.fuzz.strategies.tiled_sizes`).

===============  =================================================================================
model            code (where its blocks come from)
===============  =================================================================================
``ours``         our LoRA kernels: their launch plan (Note [LoRA tile models] in :mod:`.tiles_lora`)
``blocks``       SGLang's kv_b files and its ``triton_v2`` path: the blocks their launch code passes
``csgmv``        SGLang's csgmv files: fixed blocks, tuned tables, the split-K rule (:mod:`.tiles_csgmv`)
``ours-vision``  our vision kernel: the interpreter's config, else ``default_config`` for the dtype and head
                 dim (``interpreted``, ``tma``: the device's); dimensions ``queries`` (``block_m`` query rows a
                 program) and ``keys`` (its loop over ``block_n`` keys), over the longest sequence
===============  =================================================================================
"""

from __future__ import annotations

from kernel_oracle.kernels.vision import INTERPRETER_CONFIG, default_config, head_dim_split

from kernel_oracle.harness.tile_coverage import TiledDim
from kernel_oracle.harness.tiles_csgmv import csgmv_dims, csgmv_hints
from kernel_oracle.harness.tiles_lora import blocks_lora_dims, blocks_lora_hints, ours_lora_dims, ours_lora_hints

__all__ = ["known", "ours_models", "ours_vision_config", "tile_hints", "tiled_dims", "unknown_model"]

_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def unknown_model(reason: str) -> dict:
    """The model of a family whose block structure is not known: ``reason`` says why."""
    return {"model": None, "reason": reason}


def ours_models(*, interpreted: bool, tma: bool = False) -> dict:
    """family -> the tile model of our kernels: under the Triton interpreter (``interpreted``) or compiled on a GPU
    (``tma``: compute capability 9 and newer, where the vision kernel reads through descriptors)."""
    return {"lora": {"model": "ours"}, "vision": {"model": "ours-vision", "interpreted": interpreted, "tma": tma}}


def known(model) -> bool:
    """Whether ``model`` describes blocks (not None, not :func:`unknown_model`)."""
    return isinstance(model, dict) and model.get("model") in _MODELS


def ours_vision_config(model: dict, dtype: str, D: int):
    """The :class:`~kernel_oracle.kernels.vision.KernelConfig` our vision kernel launches for ``dtype``
    and head dim ``D`` on the model's device."""
    if model.get("interpreted", True):
        return INTERPRETER_CONFIG
    tiles = sum(head_dim_split(D, False))
    return default_config(tiles, tiles, _ELEM_BYTES[dtype], bool(model.get("tma")), head_dim_split(D, True)[1] > 0,
                          interpreted=False)


def _vision_dims(model: dict, problem) -> list:
    cfg = ours_vision_config(model, problem.dtype, problem.D)
    longest = max(problem.lengths, default=0)
    return [TiledDim("vision", "queries", longest, cfg.block_m), TiledDim("vision", "keys", longest, cfg.block_n)]


def _vision_hints(model: dict, op: str) -> dict:
    if model.get("interpreted", True):
        cfgs = [INTERPRETER_CONFIG]
    else:  # every dtype, head dims on both sides of the configs' thresholds (64) and split ones (72, 80)
        cfgs = [ours_vision_config(model, dt, d) for dt in _ELEM_BYTES for d in (16, 64, 72, 80, 128)]
    return {"queries": tuple(sorted({c.block_m for c in cfgs})), "keys": tuple(sorted({c.block_n for c in cfgs}))}


_MODELS = {"ours": (ours_lora_dims, ours_lora_hints), "blocks": (blocks_lora_dims, blocks_lora_hints),
           "csgmv": (csgmv_dims, csgmv_hints), "ours-vision": (_vision_dims, _vision_hints)}


def tiled_dims(model, problem) -> list:
    """The tiled dimensions of ``problem`` under ``model`` (empty where the model is not known)."""
    if not known(model):
        return []
    return _MODELS[model["model"]][0](model, problem)


def tile_hints(model, op: str) -> dict:
    """dimension -> the blocks ``model``'s code may tile it with in ``op`` (empty where not known)."""
    if not known(model):
        return {}
    return _MODELS[model["model"]][1](model, op)
