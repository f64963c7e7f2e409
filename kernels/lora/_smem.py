"""Shared-memory budget of the LoRA kernels: an estimate per launch configuration, and the choice of
block sizes and pipeline stages that fits the device.

Note [Shared memory]
--------------------
Measured on the H200 (triton 3.6): ``step_a_v`` in fp32 at rank 128 with the default blocks of
``BLOCKS`` (64 rows x BLOCK_K 128 x BLOCK_R 128) and Triton's default 3 stages asks for 262144
bytes of shared memory where the device has 232448 per block (``OutOfResources``): launched as they
are, a crash of our kernel on a valid input.  Triton stages every ``tl.dot`` operand in shared memory; a loop whose
loads feed a dot is software-pipelined with ``num_stages - 1`` buffers of each loaded tile, and a
tile changed in registers after its load (TF32 rounding, the interpreter's upcast) is stored again
for the dot.  :func:`estimate_bytes` counts, per phase of a kernel (a K loop, or one product):

    buffers * sum(loaded tiles, data bytes) + sum(dot operand tiles, 4 bytes if transformed)
    + output tile * 4 (the accumulator's layout conversion before the store)

with ``buffers = max(num_stages - 1, 1)``, and takes the largest phase (the fused kernels have two
loops; Triton's allocator gives a finished loop's buffers to the next, by liveness).  For the crash
above it gives 327680 >= 262144 (the measured figure: 2 buffers of both tiles plus the re-staged
weight tile), so it is conservative there.
:func:`fit_config` keeps the benchmark winners when they fit, else lowers ``num_stages`` (to 2,
then 1), then halves the inner blocks (``BLOCK_K``, ``BLOCK_C``, ``BLOCK_V``, down to 16) and
``BH``; it never changes ``BT``, which fixes the grid of the plan.  The launcher
(:mod:`kernels.lora._launch`) still catches ``OutOfResources`` and steps down the same ladder, so an
estimate that is too low costs one failed compile, never a crash.
"""

from __future__ import annotations

import functools
from typing import Iterator, Optional

import torch

__all__ = ["DEFAULT_STAGES", "estimate_bytes", "fit_config", "ladder", "smem_limit"]

# Triton's default num_stages on NVIDIA GPUs (what BLOCKS was measured with)
DEFAULT_STAGES = 3
_MIN_BLOCK = 16  # tl.dot's smallest tile side
_INNER = ("BLOCK_K", "BLOCK_C", "BLOCK_V")


def _phases(op: str, b: dict, block_r: int) -> list[tuple[bool, list[tuple[int, int]], tuple[int, int]]]:
    """(pipelined loop?, dot operand tiles (rows, cols), output tile) of each phase of ``op``."""
    bt, br = b["BT"], block_r
    m = bt * b.get("BH", 1)
    if op == "step_a_q":
        return [(True, [(bt, b["BLOCK_K"]), (b["BLOCK_K"], br)], (bt, br))]
    if op == "step_b_q":
        return [(False, [(m, br), (br, b["BLOCK_C"])], (m, b["BLOCK_C"]))]
    if op == "step_a_v":
        return [(True, [(m, b["BLOCK_K"]), (b["BLOCK_K"], br)], (m, br))]
    if op == "step_b_v":
        return [(False, [(bt, br), (br, b["BLOCK_V"])], (bt, b["BLOCK_V"]))]
    if op in ("q_side_fused", "v_side_fused"):
        n = b["BLOCK_C"] if op == "q_side_fused" else b["BLOCK_V"]
        return [(True, [(bt, b["BLOCK_K"]), (b["BLOCK_K"], br)], (bt, br)),
                (True, [(bt, br), (br, n)], (bt, n))]
    raise ValueError(f"op={op!r} is unknown; the only valid values are step_a_q, step_b_q, step_a_v, step_b_v, "
                     "q_side_fused, v_side_fused")


def estimate_bytes(op: str, blocks: dict, *, block_r: int, num_stages: int, elem_bytes: int,
                   transformed: bool) -> int:
    """Upper estimate of the shared memory (bytes) of one program of ``op`` (Note [Shared memory]).

    ``blocks``: BLOCKS-style dict (BT, BH, BLOCK_K/C/V); ``elem_bytes``: the largest element size of
    the loaded operands; ``transformed``: operand tiles are changed in registers before the dot
    (TF32 rounding of fp32 on a GPU, or the upcast of mixed dtypes).
    """
    buffers = max(num_stages - 1, 1)
    largest = 0
    for loop, tiles, out in _phases(op, blocks, block_r):
        elems = sum(r * c for r, c in tiles)
        phase = (buffers if loop else 1) * elems * elem_bytes + (elems * 4 if transformed else 0) + out[0] * out[1] * 4
        largest = max(largest, phase)
    return largest


def ladder(blocks: dict, num_stages: int = DEFAULT_STAGES) -> Iterator[tuple[dict, int]]:
    """Configurations from ``blocks`` downwards: fewer stages first, then halved inner blocks, then BH."""
    b = dict(blocks)
    stages = num_stages
    yield dict(b), stages
    while True:
        if stages > 1:
            stages -= 1
        else:
            key = next((k for k in _INNER if b.get(k) is not None and b[k] > _MIN_BLOCK), None)
            if key is None and b.get("BH", 1) > 1:
                key = "BH"
            if key is None:
                return
            b[key] //= 2
        yield dict(b), stages


def fit_config(op: str, blocks: dict, *, block_r: int, elem_bytes: int, transformed: bool,
               limit: Optional[int], num_stages: int = DEFAULT_STAGES) -> tuple[dict, int]:
    """The first configuration of :func:`ladder` whose estimate is within ``limit`` bytes
    (``limit=None``: no limit known, e.g. the interpreter: ``blocks`` as they are); if none fits,
    the smallest one."""
    last = (dict(blocks), num_stages)
    for cfg, stages in ladder(blocks, num_stages):
        last = (cfg, stages)
        if limit is None or estimate_bytes(op, cfg, block_r=block_r, num_stages=stages, elem_bytes=elem_bytes,
                                           transformed=transformed) <= limit:
            return cfg, stages
    return last


@functools.lru_cache(maxsize=None)
def _device_limit(index: int) -> int:
    props = torch.cuda.get_device_properties(index)
    limit = getattr(props, "shared_memory_per_block_optin", None)
    if not limit:
        import triton

        limit = triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return int(limit)


def smem_limit(device: torch.device | str) -> Optional[int]:
    """Shared memory one block may opt in to on ``device`` (bytes); None off CUDA (the interpreter)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return _device_limit(device.index if device.index is not None else torch.cuda.current_device())
