"""Host-side choices of a vision launch: the block config, the head-dim tiles, the stride alignment,
whether descriptors can be used, the exact fp32 level.

Pure functions of shapes, strides, dtypes and the launch options (:class:`kernels.options.VisionOptions`):
:func:`kernels.vision.attention.plan_attention` and :func:`kernels.vision._kernel.attention_arguments`
call them; nothing here reads the environment or launches anything.

Note [Alignment]
----------------
Triton specialises an integer argument on divisibility by 16 only.  A head stride of 72 elements
(head dim 72) is 144 bytes, 16-byte aligned, but not a multiple of 16 elements, so Triton could not
prove row alignment and fell back to narrow loads (less than half the throughput of head dim 80 on
the H200).  The wrapper divides token and head strides by the largest power of two (up to 16 bytes of
elements) dividing them all and the kernel multiplies by that constexpr, so the alignment is visible
to the compiler.  Those divided strides are then ``do_not_specialize`` (``ALIGN``, a constexpr,
carries the alignment): a new shape does not compile a new kernel for each stride's class; the
innermost strides (1 when contiguous) stay specialized.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton

from ..interpreter import interpreting

# triton.jit picks the interpreter at decoration time: read the switch once, like the kernels do
INTERPRETING = interpreting()

__all__ = ["INTERPRETING", "KernelConfig", "default_config", "descriptor_loads_ok", "exact_level", "has_tma",
           "head_dim_split", "stride_alignment"]


def _prev_pow2(x: int) -> int:
    return 1 << (x.bit_length() - 1)


def head_dim_split(d: int, split: bool) -> tuple[int, int]:
    """(A, B): power-of-two tile widths with A + B >= d, A >= 16, B == 0 or B >= 16.

    ``split=False``: one tile, ``d`` padded to a power of two; ``True``: a power-of-two part and a
    power-of-two tail where that saves padded work (Note [Head-dim split] in :mod:`kernels.vision._kernel`).
    """
    if d <= 0:
        raise ValueError(f"Expected a positive head dim but got d={d}")
    if not split:
        return max(16, triton.next_power_of_2(d)), 0
    a = max(16, _prev_pow2(d))
    rest = d - a
    if rest <= 0:
        return a, 0
    b = max(16, triton.next_power_of_2(rest))
    if a + b >= triton.next_power_of_2(d):  # the split saves nothing: one padded tile
        return triton.next_power_of_2(d), 0
    return a, b


class KernelConfig(NamedTuple):
    """A launch's blocks and compile options: ``block_m`` queries by ``block_n`` keys per program,
    ``num_warps``, ``num_stages``; ``tma`` reads the key and value blocks through tensor descriptors
    where the layout allows it (Note [Descriptor loads] in :mod:`kernels.vision._kernel`); ``maxnreg``
    (0: none) caps the registers per thread (a launch option on a GPU)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    maxnreg: int = 0


# The interpreter fails with more than one autotune config and costs ~20-35 ms per program: one
# small fixed config there.
INTERPRETER_CONFIG = KernelConfig(16, 16, 1, 1)


def default_config(d_tiles: int, dv_tiles: int, elem_bytes: int, tma: bool = False,
                   splits: bool = False, *, interpreted: bool = INTERPRETING) -> KernelConfig:
    """The config a launch gets unless the caller passes one: the fastest of ``bench_vision --sweep`` on the
    H200 for each kind of shape (tables in docs/BENCHMARKS.md).  ``d_tiles``/``dv_tiles``: the padded head
    dims; ``tma``: the device has tensor memory access (compute capability 9 and newer); ``splits``: a
    head dim is cut into two tiles when split (not a power of two); ``interpreted``: the config of the Triton
    interpreter (default: this process's mode), e.g. False for a GPU's blocks planned on the CPU."""
    if interpreted:
        return INTERPRETER_CONFIG
    if elem_bytes == 4:  # fp32, the accuracy mode (Note [Exact fp32]): small blocks
        return KernelConfig(64, 32, 4, 2)
    if max(d_tiles, dv_tiles) <= 64:  # small head dims: 64 x 64 blocks, pointer loads (descriptors are slower)
        return KernelConfig(64, 64, 4, 3)
    if tma and splits:  # a split head dim through descriptors: two programs per SM (Note [Descriptor loads])
        return KernelConfig(128, 64, 8, 3, tma=True)
    if tma:  # one tile per head dim through descriptors: 128 x 128 blocks (Note [Descriptor loads])
        return KernelConfig(128, 128, 8, 3, tma=True)
    return KernelConfig(128, 64, 8, 3)  # without descriptors 128 x 64 blocks beat 128 x 128


def has_tma(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA device with tensor memory access (compute capability 9 and newer)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def stride_alignment(*tensors) -> int:
    """Largest power of two, up to 16 bytes' worth of elements, dividing every token and head stride
    (Note [Alignment])."""
    align = max(1, 16 // tensors[0].element_size())
    while align > 1 and any(t.stride(i) % align for t in tensors for i in (0, 1)):
        align //= 2
    return align


def descriptor_loads_ok(q, k, v, out, align: int) -> bool:
    """Whether keys and values can be read through tensor descriptors (Note [Descriptor loads]): unit
    innermost strides, every token and head stride and the data pointers a multiple of 16 bytes."""
    return (align * q.element_size() == 16 and k.stride(2) == 1 and v.stride(2) == 1
            and k.data_ptr() % 16 == 0 and v.data_ptr() % 16 == 0)


def exact_level(dtype: torch.dtype, precision: str, level: int) -> int:
    """The EXACT constexpr of a launch: ``level`` (``VisionOptions.fp32_exact``) for fp32 inputs with
    exact ("ieee") products, else 0 (Note [Exact fp32])."""
    if dtype != torch.float32 or precision != "ieee":
        return 0
    return level
