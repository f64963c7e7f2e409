"""The shared memory one launch of SGLang's csgmv shrink asks for, from the tiles the release picks.

Note [csgmv shrink shared memory]
---------------------------------
``_chunked_lora_shrink_kernel`` loops over ``K`` in ``BLOCK_K`` steps, loading an ``x`` tile of
``BLOCK_M x BLOCK_K`` (``BLOCK_M = batch_info.max_len``, the chunk size) and a weight tile of
``BLOCK_K x BLOCK_N`` each step and feeding both to ``tl.dot``.  Triton software-pipelines those loads
through shared-memory buffers, and the loop's buffers are the launch's whole figure at these shapes:

    need = buffers * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * element size

``buffers`` is 1 when the loop has one step (``K <= BLOCK_K``: nothing to pipeline); otherwise
``num_stages`` on sm_90 with ``BLOCK_M >= 64`` (the warp-group MMA) and ``max(num_stages - 1, 1)``
elsewhere (``mma.sync``: sm_80 - sm_89, or fewer than 64 rows).  ``num_stages`` is the release's tuned
config's, else Triton's NVIDIA default of 3.  The tensors are taken to be 16-byte aligned, as torch allocates
them and a launch specializes them (unaligned, Triton may not pipeline 2-byte loads at all).  Compiled for each capability on a CPU (Triton 3.9,
``oracle_tests/fuzz/test_csgmv_shared_memory.py``) the kernel asks exactly this at 16 - 128 rows, 1 - 4 stages
and one or more steps; on the H100 (Triton 3.6) the fp32 64-row launch at the default tiles (16 x 256)
asked 245,760 B, this figure, against 232,448 B a block: docs/csgmv.md.  Other capabilities (sm_100 adds
barriers) are not modelled and raise ``ValueError``.

The tiles are the release's own: :func:`shrink_tiles` runs the release's entry point with its kernels
replaced by recorders (:func:`recorded_launches`), so 0.5.10's fixed blocks and 0.5.11+'s tuned or default
config for the device name are read as the release computes them, and nothing is launched.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = ["DEFAULT_STAGES", "SHRINK_KERNELS", "ShrinkTiles", "recorded_launches", "shrink_tiles"]

# Triton's default num_stages on NVIDIA GPUs (triton.backends.nvidia.compiler.CUDAOptions)
DEFAULT_STAGES = 3
# the kernels a release's shrink entry point may launch (the split-K pair: 0.5.22+)
SHRINK_KERNELS = ("_chunked_lora_shrink_kernel", "_chunked_lora_shrink_split_k_kernel", "_reduce_shrink_split_k")
_WARP_GROUP_ROWS = 64  # sm_90 takes the warp-group MMA from 64 rows


@dataclass(frozen=True)
class ShrinkTiles:
    """One launch of ``_chunked_lora_shrink_kernel``: its tiles, ``K``, pipeline stages and element size."""

    block_m: int
    block_n: int
    block_k: int
    k: int
    num_stages: int
    elem_bytes: int

    def buffers(self, capability: tuple[int, int]) -> int:
        """How many copies of each loaded tile Triton keeps in shared memory (the Note)."""
        if capability[0] != 8 and tuple(capability) != (9, 0):
            raise ValueError(f"capability={tuple(capability)!r}: the csgmv shrink's shared memory is modelled for "
                             "sm_80 - sm_89 and sm_90 only (Note [csgmv shrink shared memory])")
        if -(-self.k // self.block_k) <= 1:
            return 1
        if tuple(capability) == (9, 0) and self.block_m >= _WARP_GROUP_ROWS:
            return self.num_stages
        return max(self.num_stages - 1, 1)

    def shared_memory(self, capability: tuple[int, int]) -> int:
        """Bytes of shared memory the launch asks for on a device of compute ``capability`` (the Note)."""
        tiles = self.block_m * self.block_k + self.block_k * self.block_n
        return self.buffers(capability) * tiles * self.elem_bytes


@contextmanager
def recorded_launches(module_globals: dict, names=SHRINK_KERNELS) -> Iterator[list[tuple[str, dict]]]:
    """While open, the Triton kernels ``names`` of a loaded release module (its ``__globals__``) record each
    launch as ``(name, keyword arguments)`` in the list it yields instead of running; restored on exit."""
    seen: list[tuple[str, dict]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append((self.name, kwargs))

    saved = {name: module_globals[name] for name in names if name in module_globals}
    module_globals.update({name: Recorder(name) for name in saved})
    try:
        yield seen
    finally:
        module_globals.update(saved)


def shrink_tiles(shrink: Callable, x, weights, batch_info, num_slices: int) -> ShrinkTiles:
    """The tiles ``shrink`` (a release's ``chunked_sgmv_lora_shrink_forward``, loaded standalone) launches its
    kernel with for this call, read by running it with its kernels recorded (nothing runs on the device).
    Raises ``LookupError`` when it launches something other than ``_chunked_lora_shrink_kernel`` once."""
    with recorded_launches(shrink.__globals__) as seen:
        shrink(x, weights, batch_info, num_slices)
    if [name for name, _ in seen] != [SHRINK_KERNELS[0]]:
        raise LookupError(f"the shrink launched {[name for name, _ in seen]}, not {SHRINK_KERNELS[0]} once")
    kw = seen[0][1]
    return ShrinkTiles(block_m=int(kw["BLOCK_M"]), block_n=int(kw["BLOCK_N"]), block_k=int(kw["BLOCK_K"]),
                       k=int(kw["K"]), num_stages=int(kw.get("num_stages", DEFAULT_STAGES)),
                       elem_bytes=kw["x"].element_size())
