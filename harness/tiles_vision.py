"""The tile model of our vision kernel (Note [Tile models] in :mod:`kernel_oracle.harness.tiles`), which the
``vision`` record names (its ``tile_models``).

``ours-vision``: the interpreter's config, else ``default_config`` for the dtype and head dim (``interpreted``,
``tma``: the device's); dimensions ``queries`` (``block_m`` query rows a program) and ``keys`` (its loop over
``block_n`` keys), over the longest sequence.
"""

from __future__ import annotations

from kernel_oracle.kernels.vision import INTERPRETER_CONFIG, default_config, head_dim_split

from kernel_oracle.harness.tile_coverage import TiledDim
from kernel_oracle.harness.tiles import TileModel

__all__ = ["VISION_TILE_MODELS", "ours_vision_config", "ours_vision_model"]

_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def ours_vision_model(*, interpreted: bool, tma: bool = False) -> dict:
    """The model of our vision kernel under the Triton interpreter (``interpreted``) or compiled on a GPU (``tma``:
    compute capability 9 and newer, where it reads through descriptors)."""
    return {"model": "ours-vision", "interpreted": interpreted, "tma": tma}


def ours_vision_config(model: dict, dtype: str, D: int):
    """The :class:`~kernel_oracle.kernels.vision.KernelConfig` our vision kernel launches for ``dtype``
    and head dim ``D`` on the model's device."""
    if model.get("interpreted", True):
        return INTERPRETER_CONFIG
    tiles = sum(head_dim_split(D, False))
    return default_config(tiles, tiles, _ELEM_BYTES[dtype], bool(model.get("tma")), head_dim_split(D, True)[1] > 0,
                          interpreted=False)


def _dims(model: dict, problem) -> list:
    cfg = ours_vision_config(model, problem.dtype, problem.D)
    longest = max(problem.lengths, default=0)
    return [TiledDim("vision", "queries", longest, cfg.block_m), TiledDim("vision", "keys", longest, cfg.block_n)]


def _hints(model: dict, op: str) -> dict:
    if model.get("interpreted", True):
        cfgs = [INTERPRETER_CONFIG]
    else:  # every dtype, head dims on both sides of the configs' thresholds (64) and split ones (72, 80)
        cfgs = [ours_vision_config(model, dt, d) for dt in _ELEM_BYTES for d in (16, 64, 72, 80, 128)]
    return {"queries": tuple(sorted({c.block_m for c in cfgs})), "keys": tuple(sorted({c.block_n for c in cfgs}))}


VISION_TILE_MODELS = {"ours-vision": TileModel(_dims, _hints, lambda model, name: ours_vision_model(interpreted=False,
                                                                                                    tma=True))}
