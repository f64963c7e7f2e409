"""The csgmv family's metadata mutation kinds (Note [Mutations] in :mod:`harness.mutations`), which the ``csgmv``
record names (its ``mutations``).

Note [csgmv mutations]
----------------------
Each kind breaks one thing of a materialised csgmv call (``x`` (S, K) or (S, num_slices * R),
``weights`` (L, N, K) or (L, OUTPUT_DIM, R), the batch info, the expand's ``slice_offsets``
(num_slices + 1,)), found through the call's signature; ``index`` picks a segment / row / field
modulo the count, ``amount`` a magnitude.  A kind that cannot apply (an expand-only kind on a shrink,
no segment to break) leaves the call unchanged, and the oracle then expects a result.

* ``upstream``: the release's own checks: a non-contiguous ``x`` or ``weights`` (``csgmv.assert``),
  ``split_k`` below 1 (``csgmv.split_k``, shrink only);
* ``malformed``: one invariant the kernels read unchecked (the ``csgmv.strict.*`` rows).

:data:`UNCHECKED_BOUNDS` are the malformed kinds that make SGLang's kernels address memory outside a
tensor: a permutation row at or past ``x.shape[0]`` (or negative) is a row the kernels read *and write*
(heap corruption), a slot, a segment bound or a segment count past its tensor reads foreign metadata
and from it foreign rows.  That is an unchecked precondition of the kernels, not a defect: a target
without strict validation declines the feature ``csgmv.unchecked_bounds`` and is never sent them.
"""

from __future__ import annotations

from typing import Callable

import torch

from kernel_oracle.harness.mutations import MutationKinds
from kernel_oracle.harness.problems import Call, batch_info_of

__all__ = ["CSGMV_ERROR_INPUT_KINDS", "CSGMV_KINDS", "CSGMV_MUTATIONS", "UNCHECKED_BOUNDS", "UNCHECKED_BOUNDS_FEATURE",
           "csgmv_declined"]

UNCHECKED_BOUNDS_FEATURE = "csgmv.unchecked_bounds"


def _segments(call: Call) -> int:
    bi = batch_info_of(call)
    return int(bi.weight_indices.shape[0]) if bi.use_cuda_graph else int(bi.num_segments)


def _nonempty(call: Call) -> list[int]:
    bi = batch_info_of(call)
    n = _segments(call)
    lens = (bi.seg_indptr[1:n + 1] - bi.seg_indptr[:n]).tolist()
    return [b for b, length in enumerate(lens) if length > 0]


def _set(bi, name: str, index: int, value) -> None:
    t = getattr(bi, name).clone()
    t[index] = value
    setattr(bi, name, t)


def _covered(call: Call) -> tuple[int, int]:
    """The logical rows the processed segments cover: ``seg_indptr[0] .. seg_indptr[n]``."""
    bi = batch_info_of(call)
    return int(bi.seg_indptr[0]), int(bi.seg_indptr[_segments(call)])


# ---- upstream ----------------------------------------------------------------------------------------

def _not_contiguous(name: str):
    """``name`` with the same values in a column-major buffer (a transposed view): upstream's assert."""
    def m(call, index, amount):
        t = call.arg(name)
        call.set_arg(name, t.transpose(-1, -2).contiguous().transpose(-1, -2))
    return m


def _split_k_below_one(call, index, amount):
    if call.signature.op == "csgmv_shrink":
        call.kwargs["split_k"] = 1 - amount


# ---- malformed: segments and slots -------------------------------------------------------------------

def _slot_out_of_range(call, index, amount):
    if _segments(call):
        bi = batch_info_of(call)
        _set(bi, "weight_indices", index % _segments(call), int(call.arg("weights").shape[0]) + amount - 1)


def _negative_slot(call, index, amount):
    if _segments(call):
        _set(batch_info_of(call), "weight_indices", index % _segments(call), -amount)


def _max_len_too_small(call, index, amount):
    segs = _nonempty(call)
    bi = batch_info_of(call)
    n = _segments(call)
    longest = int((bi.seg_indptr[1:n + 1] - bi.seg_indptr[:n]).max()) if segs else 0
    if longest > 1:
        bi.max_len = max(1, longest - amount)


def _seg_indptr_decreasing(call, index, amount):
    """The end of a non-empty segment that starts past row 0 moved below its start, not below 0 (a segment
    of negative length; the next one then starts earlier but still within the permutation)."""
    bi = batch_info_of(call)
    segs = [b for b in _nonempty(call) if int(bi.seg_indptr[b]) >= 1]
    if segs:
        b = segs[index % len(segs)]
        _set(bi, "seg_indptr", b + 1, max(0, int(bi.seg_indptr[b]) - amount))


def _seg_indptr_negative_start(call, index, amount):
    if _segments(call):
        _set(batch_info_of(call), "seg_indptr", 0, -amount)


def _negative_rank(call, index, amount):
    bi = batch_info_of(call)
    _set(bi, "lora_ranks", index % bi.lora_ranks.numel(), -amount)


def _bad_num_segments(call, index, amount):
    """Eager ``num_segments`` past the segments ``weight_indices`` holds."""
    bi = batch_info_of(call)
    if not bi.use_cuda_graph:
        bi.num_segments = int(bi.weight_indices.shape[0]) + amount


def _bad_max_len(call, index, amount):
    bi = batch_info_of(call)
    bi.max_len = 0 if index % 2 == 0 else float(bi.max_len)  # not positive, or not an int


# ---- malformed: the permutation ----------------------------------------------------------------------

def _permutation_row(offset: Callable[[int, int], int]):
    """One covered logical row's physical row set to ``offset(S, amount)`` (S: x's rows)."""
    def m(call, index, amount):
        start, end = _covered(call)
        if end > start:
            _set(batch_info_of(call), "permutation", start + index % (end - start),
                 offset(int(call.arg("x").shape[0]), amount))
    return m


def _permutation_short(call, index, amount):
    bi = batch_info_of(call)
    start, end = _covered(call)
    if end > start:
        bi.permutation = bi.permutation[:max(0, end - amount)].clone()


def _drop_permutation(call, index, amount):
    batch_info_of(call).permutation = None


_DTYPES = (("seg_indptr", torch.float32), ("weight_indices", torch.float32), ("lora_ranks", torch.float32),
           ("scalings", torch.int32), ("permutation", torch.float32))


def _metadata_dtype(call, index, amount):
    bi = batch_info_of(call)
    name, dtype = _DTYPES[index % len(_DTYPES)]
    setattr(bi, name, getattr(bi, name).to(dtype))


def _metadata_device(call, index, amount):
    """A metadata tensor on the ``meta`` device (stands in for another GPU than the data's)."""
    bi = batch_info_of(call)
    name = _DTYPES[index % len(_DTYPES)][0]
    setattr(bi, name, getattr(bi, name).to("meta"))


# ---- malformed: the expand's slices ------------------------------------------------------------------

def _expand_only(edit: Callable[[Call, list, int, int], None]):
    def m(call, index, amount):
        if call.signature.op == "csgmv_expand":
            edit(call, [int(v) for v in call.arg("slice_offsets").tolist()], index, amount)
    return m


def _set_offsets(call: Call, offsets: list) -> None:
    old = call.arg("slice_offsets")
    call.set_arg("slice_offsets", torch.tensor(offsets, dtype=old.dtype, device=old.device))


def _offsets_decreasing(call, offsets, index, amount):
    """Offset ``i >= 2`` moved below its positive predecessor, not below 0 (slice ``i - 1`` of negative
    width); as many offsets as before, so x's width still matches."""
    if len(offsets) > 2:
        i = 2 + index % (len(offsets) - 2)
        if offsets[i - 1] > 0:
            offsets[i] = max(0, offsets[i - 1] - amount)
            _set_offsets(call, offsets)


def _offsets_past_output(call, offsets, index, amount):
    offsets[-1] = int(call.arg("weights").shape[1]) + amount
    _set_offsets(call, offsets)


def _max_slice_size_too_small(call, offsets, index, amount):
    widest = max(hi - lo for lo, hi in zip(offsets, offsets[1:]))
    if widest > 1 and call.kwargs.get("slice_offsets_cpu") is None:
        call.set_arg("max_slice_size", max(1, widest - amount))


def _offsets_cpu_mismatch(call, offsets, index, amount):
    """The CPU copy's last offset moved down (not below the one before it): 0.5.22+ builds its grid from the
    copy, so it covers fewer columns than the device offsets say; within the output either way."""
    cpu = call.kwargs.get("slice_offsets_cpu")
    if cpu is not None and cpu.numel() >= 2:
        cpu = cpu.clone()
        cpu[-1] = max(int(cpu[-2]), int(cpu[-1]) - amount)
        call.kwargs["slice_offsets_cpu"] = cpu


CSGMV_KINDS: dict[str, tuple[str, Callable]] = {
    # upstream: the release's bare asserts and its split_k check
    "x_not_contiguous": ("upstream", _not_contiguous("x")),
    "weights_not_contiguous": ("upstream", _not_contiguous("weights")),
    "split_k_below_one": ("upstream", _split_k_below_one),
    # malformed: one invariant the kernels read unchecked
    "slot_out_of_range": ("malformed", _slot_out_of_range),
    "negative_slot": ("malformed", _negative_slot),
    "max_len_too_small": ("malformed", _max_len_too_small),
    "seg_indptr_decreasing": ("malformed", _seg_indptr_decreasing),
    "seg_indptr_negative_start": ("malformed", _seg_indptr_negative_start),
    "negative_rank": ("malformed", _negative_rank),
    "bad_num_segments": ("malformed", _bad_num_segments),
    "bad_max_len": ("malformed", _bad_max_len),
    "permutation_out_of_range": ("malformed", _permutation_row(lambda rows, amount: rows + amount - 1)),
    "permutation_negative": ("malformed", _permutation_row(lambda rows, amount: -amount)),
    "permutation_short": ("malformed", _permutation_short),
    "drop_permutation": ("malformed", _drop_permutation),
    "metadata_dtype": ("malformed", _metadata_dtype),
    "slice_offsets_decreasing": ("malformed", _expand_only(_offsets_decreasing)),
    "slice_offsets_past_output": ("malformed", _expand_only(_offsets_past_output)),
    "max_slice_size_too_small": ("malformed", _expand_only(_max_slice_size_too_small)),
    "slice_offsets_cpu_mismatch": ("malformed", _expand_only(_offsets_cpu_mismatch)),
}
# kinds only error inputs use (not drawn)
CSGMV_ERROR_INPUT_KINDS: dict[str, tuple[str, Callable]] = {
    "metadata_device": ("malformed", _metadata_device),
}
CSGMV_MUTATIONS = MutationKinds(CSGMV_KINDS, CSGMV_ERROR_INPUT_KINDS)
# the malformed kinds that make the kernels address memory outside a tensor (Note [csgmv mutations])
UNCHECKED_BOUNDS = frozenset({"slot_out_of_range", "negative_slot", "seg_indptr_negative_start", "bad_num_segments",
                              "permutation_out_of_range", "permutation_negative", "permutation_short",
                              "slice_offsets_past_output"})


def csgmv_declined(problem, mutation, declines) -> tuple[str, ...]:
    """The features of ``declines`` (``fuzz.strategies_csgmv.CSGMV_FEATURES``) a csgmv case uses: what its
    strategy never draws for a target declining them (Note [csgmv strategy])."""
    kind = mutation.kind if mutation is not None else None
    uses = {"csgmv.stale_host_ints": problem.use_cuda_graph and problem.stale_host_ints is not None,
            "csgmv.output_view": problem.op == "csgmv_expand" and problem.base == "view",
            "csgmv.split_k": problem.split_k is not None or kind == "split_k_below_one",
            "csgmv.slice_offsets_cpu": bool(problem.cpu_offsets),
            UNCHECKED_BOUNDS_FEATURE: kind in UNCHECKED_BOUNDS}
    return tuple(f for f in declines if uses.get(f))
