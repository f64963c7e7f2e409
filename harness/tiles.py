"""Tile models: the block structure of the code under test, as data (Note [Tile coverage] in
:mod:`kernel_oracle.harness.tile_coverage`).

Note [Tile models]
------------------
A target describes the blocks of its code per family (``Target.tiles``: family -> model): a dict with a
``"model"`` name and the facts that model needs, all plain data, so it travels from the worker that loaded the
code to the campaign that draws the cases, and into the record.  A family whose blocks are not known says why
(``{"model": None, "reason": ...}``: the pure-torch reference has no tiles; cuDNN and FlashAttention keep theirs
inside the library).  Each model name is a :class:`TileModel` of the family whose code it describes, which its
record names (``Family.tile_models``: name -> model); three functions read one:

* :func:`tiled_dims` ``(model, problem)``: the case's :class:`~kernel_oracle.harness.tile_coverage.TiledDim` s
  (what the coverage table counts);
* :func:`tile_hints` ``(model, op)``: dimension -> the block sizes the code may use for it in ``op`` (what the
  strategies draw sizes around: :func:`kernel_oracle.fuzz.strategies.tiled_sizes`);
* :func:`on_gpu` ``(model, device_name)``: the model as the same code describes itself compiled on a Hopper GPU
  of that name (Note [Coverage from the draws] in :mod:`kernel_oracle.fuzz.coverage`).

===============  =================================================================================
model            code (where its blocks come from)
===============  =================================================================================
``ours``         our LoRA kernels: their launch plan (Note [LoRA tile models] in :mod:`.tiles_lora`)
``blocks``       SGLang's kv_b files and its ``triton_v2`` path: the blocks their launch code passes
``csgmv``        SGLang's csgmv files: fixed blocks, tuned tables, the split-K rule (:mod:`.tiles_csgmv`)
``ours-vision``  our vision kernel: the interpreter's config, else ``default_config`` for the dtype and head
                 dim (:mod:`.tiles_vision`)
===============  =================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from kernel_oracle.harness.family import families, registry_generation

__all__ = ["TileModel", "known", "on_gpu", "tile_hints", "tiled_dims", "unknown_model"]


@dataclass(frozen=True)
class TileModel:
    """One model: ``dims(model, problem)`` -> the problem's tiled dimensions, ``hints(model, op)`` -> dimension ->
    block sizes; ``on_gpu(model, device_name)`` -> the model on a Hopper GPU of that name (None: the same model)."""

    dims: Callable[[dict, object], list]
    hints: Callable[[dict, str], dict]
    on_gpu: Optional[Callable[[dict, str], dict]] = None


_CACHE: dict = {}  # registry generation -> model name -> TileModel


def _models() -> dict:
    """model name -> its :class:`TileModel`, every registered family's (its record's ``tile_models``)."""
    generation = registry_generation()
    if generation not in _CACHE:
        _CACHE.clear()
        _CACHE[generation] = {name: model for family in families()
                              for name, model in (family.resolve("tile_models") or {}).items()}
    return _CACHE[generation]


def unknown_model(reason: str) -> dict:
    """The model of a family whose block structure is not known: ``reason`` says why."""
    return {"model": None, "reason": reason}


def known(model) -> bool:
    """Whether ``model`` describes blocks (not None, not :func:`unknown_model`)."""
    return isinstance(model, dict) and model.get("model") in _models()


def tiled_dims(model, problem) -> list:
    """The tiled dimensions of ``problem`` under ``model`` (empty where the model is not known)."""
    if not known(model):
        return []
    return _models()[model["model"]].dims(model, problem)


def tile_hints(model, op: str) -> dict:
    """dimension -> the blocks ``model``'s code may tile it with in ``op`` (empty where not known)."""
    if not known(model):
        return {}
    return _models()[model["model"]].hints(model, op)


def on_gpu(model, device_name: str):
    """``model`` as its code describes itself compiled on a Hopper GPU named ``device_name`` (itself where its
    blocks do not depend on the device, or it is not known)."""
    projection = _models()[model["model"]].on_gpu if known(model) else None
    return model if projection is None else projection(model, device_name)
