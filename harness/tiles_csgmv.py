"""The tile model of SGLang's chunked SGMV LoRA kernels (Note [csgmv tile model]), which the ``csgmv`` record names
(its ``tile_models``).

Note [csgmv tile model]
-----------------------
A release's csgmv files pick their blocks per launch: ``BLOCK_M`` is the chunk size ``batch_info.max_len``;
``BLOCK_N`` / ``BLOCK_K`` come from fixed values in the launch code (0.5.10: shrink 16 x 256, expand 64 x 16) or,
from 0.5.11, from ``lora_tuning_config.py``: a tuned table for the GPU's name, the layer's width ``K`` (the
shrink's input, the expand's output), the buffer rank ``R`` and the slice count ``S`` (``csgmv_configs/
triton_<version>/lora_{kernel},K=..,R=..,S=..,device=...json``, keyed by chunk size: the exact chunk, else the
closest; the running Triton's folder first, else the newest), else its ``DEFAULT_*_CONFIG``.  The adapter reads
the defaults and every tuned table from the release (:mod:`kernel_oracle.fuzz.targets.sglang_tiles`); the model
is data::

    {"model": "csgmv", "device_name": "NVIDIA H200", "triton": "3.5.1",
     "shrink": {"BLOCK_N": 16, "BLOCK_K": 256}, "expand": {"BLOCK_N": 64, "BLOCK_K": 16},
     "tuned": [{"kernel": "shrink", "K": 1024, "R": 64, "S": 2, "device": "NVIDIA_H200",
                "folder": "triton_3_5_1", "configs": {"16": {"BLOCK_N": 64, "BLOCK_K": 64, ...}}}],
     "split_kernel": true, "split_switch": false, "deterministic": false}

The split-K shrink (0.5.22+, ``split_kernel``) cuts the K loop into ``split_k`` parts of ``ceil(K / (BLOCK_K *
split_k))`` blocks each, as many of them non-empty as K reaches; ``split_k`` is the call's, else 16 (K 12288) or 8
(K 4096) for bf16 rank-32 adapters at blocks (16, 16, 256) when the switch is on, 1 under deterministic inference.

Tiled dimensions: ``rows`` (a slot's rows, cut into chunks of ``BLOCK_M``: the extent is the most rows of one
slot), shrink ``N=slices*R`` (``BLOCK_N``) and ``K=K`` (``BLOCK_K``, with the split), expand ``N=slice`` (the widest
slice, ``BLOCK_N``) and ``K=rank`` (``min(R, rank)`` of the largest routed rank, ``BLOCK_K``).
"""

from __future__ import annotations

from kernel_oracle.harness.tile_coverage import TiledDim, slot_rows
from kernel_oracle.harness.tiles import TileModel

__all__ = ["CSGMV_TILE_MODELS", "csgmv_blocks", "csgmv_dims", "csgmv_hints", "csgmv_split"]


def _tuned(model: dict, kernel: str, K: int, R: int, S: int):
    device = str(model.get("device_name") or "").replace(" ", "_")
    rows = [t for t in model.get("tuned") or () if (t["kernel"], t["K"], t["R"], t["S"], t["device"])
            == (kernel, K, R, S, device)]
    if not rows:
        return None
    own = "triton_" + str(model.get("triton") or "").replace(".", "_")
    mine = [t for t in rows if t["folder"] == own]
    return (mine or sorted(rows, key=lambda t: t["folder"], reverse=True))[0]["configs"]


def csgmv_blocks(model: dict, kernel: str, K: int, R: int, S: int, chunk: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_K) of ``kernel`` (``shrink`` / ``expand``) at width ``K``, rank ``R``, ``S`` slices and
    chunk size ``chunk`` (Note [csgmv tile model])."""
    configs = _tuned(model, kernel, K, R, S)
    if configs:
        key = str(chunk) if str(chunk) in configs else min(configs, key=lambda c: abs(int(c) - chunk))
        cfg = configs[key]
    else:
        cfg = model[kernel]
    return int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])


def csgmv_split(model: dict, problem, blocks: tuple[int, int]) -> int:
    """The shrink's ``split_k`` for ``problem`` (1: not split; Note [csgmv tile model])."""
    split = problem.split_k
    if split is None and model.get("split_switch") and problem.R == 32 and problem.K in (4096, 12288) \
            and problem.dtype == "bfloat16" and (problem.max_len, *blocks) == (16, 16, 256):
        split = 16 if problem.K == 12288 else 8
    if split is None or model.get("deterministic"):
        return 1
    return max(int(split), 1)


def csgmv_dims(model: dict, problem) -> list:
    """The tiled dimensions of a :class:`~kernel_oracle.harness.problem_csgmv.CsgmvProblem`."""
    op, S = problem.op, problem.num_slices
    rows = TiledDim(op, "rows", slot_rows(problem.seg_lens, problem.weight_indices), problem.max_len)
    if op == "csgmv_shrink":
        bn, bk = csgmv_blocks(model, "shrink", problem.K, problem.R, S, problem.max_len)
        parts = None
        if model.get("split_kernel"):
            split = csgmv_split(model, problem, (bn, bk))
            per = -(-problem.K // (bk * split)) * bk
            parts = -(-problem.K // per)
        return [rows, TiledDim(op, "N=slices*R", S * problem.R, bn), TiledDim(op, "K=K", problem.K, bk, parts)]
    bn, bk = csgmv_blocks(model, "expand", problem.output_dim, problem.R, S, problem.max_len)
    routed = {w for n, w in zip(problem.seg_lens, problem.weight_indices) if n}
    rank = min(problem.R, max((problem.lora_ranks[w] for w in routed), default=0))
    return [rows, TiledDim(op, "N=slice", problem.max_slice_size, bn), TiledDim(op, "K=rank", rank, bk)]


def csgmv_hints(model: dict, op: str) -> dict:
    """dimension -> the blocks the release may tile it with in ``op`` on the model's device (its defaults and the
    device's tuned tables)."""
    kernel = "shrink" if op == "csgmv_shrink" else "expand"
    device = str(model.get("device_name") or "").replace(" ", "_")
    configs = [model[kernel], *(c for t in model.get("tuned") or () if (t["kernel"], t["device"]) == (kernel, device)
                                for c in t["configs"].values())]
    bn = tuple(sorted({int(c["BLOCK_N"]) for c in configs}))
    bk = tuple(sorted({int(c["BLOCK_K"]) for c in configs}))
    return {"N=slices*R": bn, "K=K": bk} if kernel == "shrink" else {"N=slice": bn, "K=rank": bk}


# on a GPU of another name, a release's tuned tables for that name
CSGMV_TILE_MODELS = {"csgmv": TileModel(csgmv_dims, csgmv_hints, lambda model, name: {**model, "device_name": name})}
