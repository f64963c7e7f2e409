"""The two compiled families of each kv_b LoRA kernel, and the parameters no kernel specializes on (Note
[Specialization] in :mod:`kernels.lora._kernels`)."""

from __future__ import annotations

import triton

__all__ = ["COUNTS", "DATA", "METADATA", "two_families"]

# Note [Specialization]: runtime ints Triton must not specialize on (they change from batch to batch)
COUNTS = ("n_launch", "tiles_per_seg", "num_rows", "search_steps", "n_cblocks")
# metadata pointers, read one element at a time: their 16-byte alignment (views at an offset) is of no use
METADATA = ("seg_indptr", "weight_indices", "lora_ranks", "scalings", "perm")
DATA = ("x_ptr", "a_ptr", "b_ptr", "out_ptr", "base_ptr")


def two_families(dns: tuple):
    """``triton.jit`` twice (Note [Specialization]): the returned kernel is the aligned family, launched
    only with ``ALIGN > 1`` and every data pointer 16-byte aligned (so its pointers specialize one way);
    its ``.generic`` twin, launched with ``ALIGN == 1``, specializes no pointer on alignment at all."""
    def deco(fn):
        aligned = triton.jit(fn, do_not_specialize=dns, do_not_specialize_on_alignment=METADATA)
        aligned.generic = triton.jit(fn, do_not_specialize=dns, do_not_specialize_on_alignment=METADATA + DATA)
        return aligned
    return deco
