"""The kv_b LoRA family's metadata mutation kinds (Note [Mutations] in :mod:`harness.mutations`), which the
``lora`` record names (its ``mutations``): each breaks one thing of a materialised LoRA step's batch info,
found through the call's signature."""

from __future__ import annotations

from typing import Callable

import torch

from kernel_oracle.harness.mutations import DATA_KINDS, MutationKinds
from kernel_oracle.harness.problems import Call, batch_info_of

__all__ = ["LORA_KINDS", "LORA_MUTATIONS"]


_bi = batch_info_of


def _n(bi) -> int:
    return int(bi.num_segments or bi.bs)


def _set_item(bi, name: str, index: int, value) -> None:
    t = getattr(bi, name).clone()
    t[index] = value
    setattr(bi, name, t)


def _rows(call: Call) -> int:
    """Token rows of the step's input (its first parameter)."""
    return int(call.args[0].shape[0])


def _lora_nonempty(bi) -> list[int]:
    lens = (bi.seg_indptr[1:_n(bi) + 1] - bi.seg_indptr[:_n(bi)]).tolist()
    return [b for b, n in enumerate(lens) if n > 0]


def _l_drop(field: str):
    def m(call, index, amount):
        setattr(_bi(call), field, None)
    return m


def _l_drop_max_len(call, index, amount):
    """Partial metadata stays valid: ``seg_lens`` that drifted shorter beside ``max_len`` (valid there) are
    raised to the segments' own lengths, as the tile count is now ``max(seg_lens)``."""
    bi = _bi(call)
    bi.max_len = None
    lens = bi.seg_lens
    if isinstance(lens, torch.Tensor) and lens.numel():
        k = min(lens.numel(), bi.seg_indptr.numel() - 1)
        own = (bi.seg_indptr[1:k + 1] - bi.seg_indptr[:k]).to(lens.dtype)
        if k and int(lens.max()) < int(own.max()):
            bi.seg_lens = torch.cat([torch.maximum(lens[:k], own), lens[k:]])


def _l_drop_lengths(call, index, amount):
    bi = _bi(call)
    bi.max_len = None
    bi.seg_lens = None


def _l_drop_lengths_bad_slot(call, index, amount):  # upstream must win over strict
    bi = _bi(call)
    if _n(bi):
        _set_item(bi, "weight_indices", index % _n(bi), int(bi.lora_ranks.numel()) + amount - 1)
    _l_drop_lengths(call, index, amount)


def _l_slot_out_of_range(call, index, amount):
    bi = _bi(call)
    if _n(bi):
        _set_item(bi, "weight_indices", index % _n(bi), int(bi.lora_ranks.numel()) + amount - 1)


def _l_negative_slot(call, index, amount):
    bi = _bi(call)
    if _n(bi):
        _set_item(bi, "weight_indices", index % _n(bi), -amount)


def _l_max_len_too_small(call, index, amount):
    bi = _bi(call)
    longest = int((bi.seg_indptr[1:_n(bi) + 1] - bi.seg_indptr[:_n(bi)]).max()) if _n(bi) else 0
    if longest > 0:
        bi.max_len = max(0, longest - amount)


def _l_seg_indptr_decreasing(call, index, amount):
    bi = _bi(call)
    segs = _lora_nonempty(bi)
    if segs:
        b = segs[index % len(segs)]
        _set_item(bi, "seg_indptr", b + 1, int(bi.seg_indptr[b]) - amount)


def _l_seg_lens_mismatch(call, index, amount):
    """seg_lens shorter than the longest segment with max_len None: the tile count then drops rows (a
    seg_lens that disagrees with seg_indptr but covers every segment is valid: docs/semantics.md#fields-that-may-disagree)."""
    bi = _bi(call)
    n = _n(bi)
    if not n:
        return
    lens = bi.seg_indptr[1:n + 1].to(torch.int64) - bi.seg_indptr[:n].to(torch.int64)
    longest = int(lens.max())
    if longest > 0:
        given = lens.clamp(min=0, max=max(longest - amount, 0)).to(torch.int32)
        tail = bi.seg_lens[n:] if bi.seg_lens is not None else given[:0]
        bi.seg_lens = torch.cat([given, tail.to(given.device)])
        bi.max_len = None


def _l_seg_indptr_past_rows(call, index, amount):
    bi = _bi(call)
    n = _n(bi)
    if n:
        _set_item(bi, "seg_indptr", n, _rows(call) + amount)
        if bi.seg_lens is not None:
            bi.seg_lens = None  # keep one invariant broken: the range, not the lengths
        bi.max_len = None if bi.max_len is None else int(bi.max_len) + amount + _rows(call)


def _l_seg_indptr_negative_start(call, index, amount):
    bi = _bi(call)
    if _n(bi):
        _set_item(bi, "seg_indptr", 0, -amount)
        bi.seg_lens = None
        if bi.max_len is not None:
            bi.max_len = int(bi.max_len) + amount


def _l_permutation_duplicate(call, index, amount):
    bi = _bi(call)
    p = bi.permutation
    if p is not None and p.numel() >= 2:
        i = index % p.numel()
        j = (i + amount) % p.numel()
        if j == i:
            j = (i + 1) % p.numel()
        _set_item(bi, "permutation", j, int(p[i]))


def _l_permutation_out_of_range(call, index, amount):
    bi = _bi(call)
    p = bi.permutation
    if p is not None and p.numel():
        _set_item(bi, "permutation", index % p.numel(), _rows(call) + amount - 1)


def _l_negative_rank(call, index, amount):
    bi = _bi(call)
    _set_item(bi, "lora_ranks", index % bi.lora_ranks.numel(), -amount)


_LORA_DTYPE_FIELDS = (("weight_indices", torch.int64), ("seg_indptr", torch.int64), ("lora_ranks", torch.int64),
                      ("scalings", torch.float16), ("permutation", torch.int32), ("seg_lens", torch.int64))


def _l_metadata_dtype(call, index, amount):
    bi = _bi(call)
    name, dtype = _LORA_DTYPE_FIELDS[index % len(_LORA_DTYPE_FIELDS)]
    t = getattr(bi, name)
    if t is not None:
        setattr(bi, name, t.to(dtype))


def _l_short_metadata(call, index, amount):
    bi = _bi(call)
    name = ("weight_indices", "scalings", "lora_ranks")[index % 3]
    t = getattr(bi, name)
    if t.numel():
        setattr(bi, name, t[:-1].clone())


def _l_bad_count(call, index, amount):
    bi = _bi(call)
    bi.max_len = -amount if index % 2 == 0 else float(bi.max_len or 0)  # negative or not an int


LORA_KINDS: dict[str, tuple[str, Callable]] = {
    # partial metadata (may stay valid)
    "drop_max_len": ("partial", _l_drop_max_len),
    "drop_seg_lens": ("partial", _l_drop("seg_lens")),
    "drop_permutation": ("partial", _l_drop("permutation")),
    # upstream contract: neither max_len nor seg_lens (alone, and beating a strict error)
    "drop_max_len_and_seg_lens": ("upstream", _l_drop_lengths),
    "drop_lengths_and_bad_slot": ("upstream", _l_drop_lengths_bad_slot),
    # malformed: one invariant that upstream does not check
    "slot_out_of_range": ("malformed", _l_slot_out_of_range),
    "negative_slot": ("malformed", _l_negative_slot),
    "max_len_too_small": ("malformed", _l_max_len_too_small),
    "seg_indptr_decreasing": ("malformed", _l_seg_indptr_decreasing),
    "seg_lens_mismatch": ("malformed", _l_seg_lens_mismatch),
    "seg_indptr_past_rows": ("malformed", _l_seg_indptr_past_rows),
    "seg_indptr_negative_start": ("malformed", _l_seg_indptr_negative_start),
    "permutation_duplicate": ("malformed", _l_permutation_duplicate),
    "permutation_out_of_range": ("malformed", _l_permutation_out_of_range),
    "negative_rank": ("malformed", _l_negative_rank),
    "metadata_dtype": ("malformed", _l_metadata_dtype),
    "short_metadata": ("malformed", _l_short_metadata),
    "bad_max_len": ("malformed", _l_bad_count),
}


# ---- kinds only error inputs use (not drawn by the fuzzer) ---------------------------------------

def _l_bad_num_segments(call, index, amount):
    bi = _bi(call)
    bi.num_segments = float(bi.num_segments)  # not an int


def _l_metadata_changed(change):
    """A metadata tensor (``index`` picks it) changed: on the ``meta`` device (stands in for another GPU
    than the data's), or 2-D."""
    def m(call, index, amount):
        bi = _bi(call)
        name = _LORA_DTYPE_FIELDS[index % len(_LORA_DTYPE_FIELDS)][0]
        if getattr(bi, name) is not None:
            setattr(bi, name, change(getattr(bi, name)))
    return m


LORA_MUTATIONS = MutationKinds(LORA_KINDS, {
    "bad_num_segments": ("malformed", _l_bad_num_segments),
    "metadata_device": ("malformed", _l_metadata_changed(lambda t: t.to("meta"))),
    "metadata_rank": ("malformed", _l_metadata_changed(lambda t: t.reshape(1, -1))),
    **DATA_KINDS,
})
