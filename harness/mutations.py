"""Metadata mutations as plain data: partial metadata, upstream-contract breakers, malformed metadata.

Note [Mutations]
----------------
A :class:`Mutation` is a small frozen record ``(kind, index, amount)`` applied to a materialised
:class:`~harness.problems.Call`, so a case stays plain data that Hypothesis can shrink and a
finding can store as JSON.  It is the one way the suite breaks a call: the fuzzer's cases, the
error inputs of :class:`harness.opinfo.ErrorInput` (which carry their mutations) and the tests that
compose two breakers all apply mutations.  A mutation finds the argument it changes through the
call's signature (:func:`harness.problems.batch_info_of`, :meth:`~harness.problems.Call.arg`),
never by position.  Each *kind* belongs to one category:

* ``partial``   -- drops optional metadata (``max_len``, ``seg_lens``, ``permutation``,
  ``sequence_lengths``, ``max_seqlen``, ``packed_indptrs``) or passes it as ``None``; the call may
  still be valid, or hit an upstream contract;
* ``upstream``  -- breaks one of SGLang's documented contracts (exact type and text expected);
* ``malformed`` -- breaks one invariant that upstream does *not* check (our strict validation must
  reject it; a target that accepts it has a validation gap).

The expected outcome is never hand-written here: :func:`harness.check.expected_outcome` runs the
reference (the oracle of contracts too) on the mutated call (an error input adds the exact text it
expects).  ``index`` picks a segment / sequence / row (taken modulo the available count, so any int
is valid and shrinks towards 0) and ``amount`` a magnitude (1 to :data:`MAX_AMOUNT`).  A kind that cannot
apply to a call (no segments to break) leaves it unchanged; the reference then simply expects a result.

:data:`LORA_KINDS` / :data:`VISION_KINDS` / ``CSGMV_KINDS`` (:mod:`harness.mutations_csgmv`) are the kinds the
fuzzer draws (:func:`kinds`); :data:`ERROR_INPUT_KINDS` holds
kinds only error inputs use (data tensors of the wrong shape or dtype, metadata on the wrong device,
...): keeping them out of the drawn tables keeps every campaign's draws as they were.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import torch

from kernel_oracle.harness.mutations_csgmv import CSGMV_ERROR_INPUT_KINDS, CSGMV_KINDS
from kernel_oracle.harness.problems import Call, batch_info_of

__all__ = ["CATEGORIES", "ERROR_INPUT_KINDS", "LORA_KINDS", "MAX_AMOUNT", "Mutation", "MutationError", "VISION_KINDS", "kinds"]

CATEGORIES = ("partial", "upstream", "malformed")
# the largest magnitude a mutation takes (the fuzzer draws 1 to 3): it is added to sizes, counts and rows
MAX_AMOUNT = 64


class MutationError(ValueError):
    """A mutation record that names an unknown kind or the wrong family."""


@dataclass(frozen=True)
class Mutation:
    """One change to a materialised call: ``kind`` (see :data:`LORA_KINDS` / :data:`VISION_KINDS`),
    ``index`` (a segment / sequence / row, modulo the count) and ``amount`` (>= 1)."""

    family: str
    kind: str
    index: int = 0
    amount: int = 1

    def __post_init__(self) -> None:
        table = _ALL.get(self.family)
        if table is None:
            raise MutationError(f"family={self.family!r} is unknown; the only valid values are {', '.join(_ALL)}")
        if self.kind not in table:
            raise MutationError(f"kind={self.kind!r} is not a {self.family} mutation; the only valid values are "
                                f"{sorted(table)}")
        for name in ("index", "amount"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise MutationError(f"Expected {name} to be an int but got {name}={value!r}")
        if not 1 <= self.amount <= MAX_AMOUNT:  # it sizes tensors and counts (a case read from data is bounded)
            raise MutationError(f"Expected amount from 1 to {MAX_AMOUNT} but got amount={self.amount}")

    @property
    def category(self) -> str:
        return _ALL[self.family][self.kind][0]

    def apply(self, call: Call) -> Call:
        """Apply in place (metadata tensors are replaced by modified clones, never edited in place)."""
        _ALL[self.family][self.kind][1](call, self.index, self.amount)
        return call

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> "Mutation | None":
        return None if d is None else cls(**d)


# ---- LoRA ----------------------------------------------------------------------------------------

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


# ---- vision --------------------------------------------------------------------------------------

def _md(call: Call):
    return call.kwargs.get(call.signature.metadata)


def _metadata_path(call: Call) -> bool:
    md = _md(call)
    return md is not None and getattr(md, "packed_indptrs", None) is not None


def _get_indptrs(call: Call):
    return _md(call).packed_indptrs if _metadata_path(call) else call.arg(call.signature.indptrs)


def _set_indptrs(call: Call, value) -> None:
    if _metadata_path(call):
        _md(call).packed_indptrs = value
    else:
        call.set_arg(call.signature.indptrs, value)


def _get_lengths(call: Call):
    return _md(call).sequence_lengths if _metadata_path(call) else call.kwargs.get("sequence_lengths")


def _set_lengths(call: Call, value) -> None:
    if _metadata_path(call):
        _md(call).sequence_lengths = value
    else:
        call.kwargs["sequence_lengths"] = value


def _get_max(call: Call):
    return _md(call).flashinfer_max_seqlen if _metadata_path(call) else call.kwargs.get("max_seqlen")


def _set_max(call: Call, value) -> None:
    if _metadata_path(call):
        _md(call).flashinfer_max_seqlen = value
    else:
        call.kwargs["max_seqlen"] = value


def _real(call: Call) -> list[int]:
    lens = _get_lengths(call).reshape(-1).tolist()
    return [b for b, n in enumerate(lens) if n > 0]


def _edit_indptr(call: Call, part: int, b: int, delta: int) -> None:
    ind = _get_indptrs(call).clone()
    B = ind.numel() // 3 - 1
    ind[part * (B + 1) + b] += delta
    _set_indptrs(call, ind)


def _v_drop_kw(name: str):
    def m(call, index, amount):
        if _metadata_path(call):
            _md(call).packed_indptrs = None  # fall back to the kwargs path, which lacks the key
        call.kwargs.pop(name, None)
    return m


def _v_none_kw(name: str):
    def m(call, index, amount):
        if name == "sequence_lengths":
            _set_lengths(call, None)
        else:
            _set_max(call, None)
    return m


def _v_drop_packed_indptrs(call, index, amount):
    """Metadata path without packed_indptrs: the kwargs path takes over (valid when kwargs carry it)."""
    md = _md(call)
    if md is None:
        return
    call.kwargs["sequence_lengths"] = md.sequence_lengths
    call.kwargs["max_seqlen"] = md.flashinfer_max_seqlen
    call.set_arg(call.signature.indptrs, md.packed_indptrs)
    md.packed_indptrs = None


def _v_drop_both(call, index, amount):
    if _metadata_path(call):
        _md(call).packed_indptrs = None
    call.kwargs.pop("sequence_lengths", None)
    call.kwargs.pop("max_seqlen", None)


def _v_indptrs_list(call, index, amount):
    _set_indptrs(call, _get_indptrs(call).tolist())


def _v_lengths_list(call, index, amount):
    _set_lengths(call, _get_lengths(call).reshape(-1).tolist())


def _v_numel_mismatch(call, index, amount):
    ind = _get_indptrs(call)
    k = min(amount, ind.numel())
    _set_indptrs(call, ind[:-k].clone() if index % 2 == 0 else torch.cat([ind, ind[-1:].expand(k)]))


def _v_qk_out_of_bounds(call, index, amount):
    real = _real(call)
    if real:
        b = real[index % len(real)]
        q = call.arg("q")
        T = q.shape[0] * (q.shape[1] if q.dim() == 4 else 1)
        n = int(_get_lengths(call).reshape(-1)[b])
        ind = _get_indptrs(call)
        tok = q.shape[-2] * q.shape[-1]
        _edit_indptr(call, 0, b, (T - n + amount) * tok - int(ind[b]))


def _v_negative_length(call, index, amount):
    lens = _get_lengths(call).clone()
    flat = lens.view(-1)
    pads = [b for b, n in enumerate(flat.tolist()) if n == 0]
    b = pads[index % len(pads)] if pads else index % flat.numel()
    flat[b] = -amount
    _set_lengths(call, lens)


def _v_max_seqlen_too_small(call, index, amount):
    lens = _get_lengths(call).reshape(-1)
    longest = int(lens.max()) if lens.numel() else 0
    if longest > 0:
        old = _get_max(call)
        new = max(0, longest - amount)
        _set_max(call, torch.tensor(new, device=old.device) if isinstance(old, torch.Tensor) else new)


def _v_misaligned(call, index, amount):
    real = _real(call)
    if real:
        _edit_indptr(call, index % 3, real[index % len(real)], 1 + (amount - 1) % 3)


def _v_offset_past_end(part: int):
    def m(call, index, amount):
        real = _real(call)
        if real:
            b = real[index % len(real)]
            q = call.arg("q")
            T = q.shape[0] * (q.shape[1] if q.dim() == 4 else 1)
            t = call.arg("v") if part == 1 else q
            stride = t.stride(-3)
            _edit_indptr(call, part, b, (T + amount) * stride)
    return m


def _v_output_overlap(call, index, amount):
    real = _real(call)
    if len(real) >= 2:
        i = index % len(real)
        a, b = real[i], real[(i + 1) % len(real)]
        ind = _get_indptrs(call)
        B = ind.numel() // 3 - 1
        _edit_indptr(call, 2, b, int(ind[2 * (B + 1) + a]) - int(ind[2 * (B + 1) + b]))


def _v_metadata_dtype(call, index, amount):
    if index % 2 == 0:
        _set_indptrs(call, _get_indptrs(call).to(torch.float32))
    else:
        _set_lengths(call, _get_lengths(call).to(torch.float32))


VISION_KINDS: dict[str, tuple[str, Callable]] = {
    # partial metadata
    "drop_packed_indptrs_use_kwargs": ("partial", _v_drop_packed_indptrs),
    "drop_sequence_lengths": ("partial", _v_drop_kw("sequence_lengths")),
    "drop_max_seqlen": ("partial", _v_drop_kw("max_seqlen")),
    "drop_sequence_lengths_and_max_seqlen": ("partial", _v_drop_both),
    "sequence_lengths_none": ("partial", _v_none_kw("sequence_lengths")),
    "max_seqlen_none": ("partial", _v_none_kw("max_seqlen")),
    # upstream contracts
    "indptrs_as_list": ("upstream", _v_indptrs_list),
    "sequence_lengths_as_list": ("upstream", _v_lengths_list),
    "indptr_numel_mismatch": ("upstream", _v_numel_mismatch),
    "qk_offset_out_of_bounds": ("upstream", _v_qk_out_of_bounds),
    # malformed (strict validation only)
    "negative_length": ("malformed", _v_negative_length),
    "max_seqlen_too_small": ("malformed", _v_max_seqlen_too_small),
    "misaligned_offset": ("malformed", _v_misaligned),
    "v_offset_past_end": ("malformed", _v_offset_past_end(1)),
    "o_offset_past_end": ("malformed", _v_offset_past_end(2)),
    "output_overlap": ("malformed", _v_output_overlap),
    "metadata_dtype": ("malformed", _v_metadata_dtype),
}

_TABLES = {"lora": LORA_KINDS, "vision": VISION_KINDS, "csgmv": CSGMV_KINDS}


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


def _v_indptrs_none(call, index, amount):
    _set_indptrs(call, None)


def _v_window(value):
    def m(call, index, amount):
        call.kwargs["window_size"] = value
    return m


def _v_sinks_wrong_heads(call, index, amount):
    """``s_aux`` with ``amount`` more entries than q has heads."""
    q = call.arg("q")
    call.kwargs["s_aux"] = torch.zeros(q.shape[-2] + amount, dtype=torch.bfloat16, device=q.device)


def _v_attention_mask(call, index, amount):
    """A boolean mask (SGLang's SDPA backends' ``(1, T, T)``), which the flashinfer_cudnn contract lacks."""
    q = call.arg("q")
    T = q.shape[0] * (q.shape[1] if q.dim() == 4 else 1)
    call.kwargs["attention_mask"] = torch.ones(1, T, T, dtype=torch.bool, device=q.device)


def _data_resized(dim: int):
    """A data tensor (``index`` picks one of the signature's data parameters) with ``amount`` more
    entries along ``dim`` (-2: heads, -1: the last dim)."""
    def m(call, index, amount):
        data = call.signature.data
        name = data[index % len(data)]
        t = call.arg(name)
        shape = list(t.shape)
        shape[dim] += amount
        call.set_arg(name, torch.ones(shape, dtype=t.dtype, device=t.device))
    return m


def _data_int(call, index, amount):
    data = call.signature.data
    name = data[index % len(data)]
    call.set_arg(name, call.arg(name).to(torch.int32))


def _data_stride0(call, index, amount):
    """A data tensor whose rows all alias its first row (``expand``: stride 0 along dim 0)."""
    data = call.signature.data
    name = data[index % len(data)]
    t = call.arg(name)
    call.set_arg(name, t[:1].expand_as(t))


def _data_transposed(call, index, amount):
    """The same values in a buffer laid out with dims 0 and 1 swapped (a transposed view)."""
    data = call.signature.data
    name = data[index % len(data)]
    call.set_arg(name, call.arg(name).transpose(0, 1).contiguous().transpose(0, 1))


_DATA_KINDS: dict[str, tuple[str, Callable]] = {
    "data_heads": ("malformed", _data_resized(-2)),
    "data_last_dim": ("malformed", _data_resized(-1)),
    "data_int": ("malformed", _data_int),
    "data_stride0": ("malformed", _data_stride0),
    "data_transposed": ("malformed", _data_transposed),
}
ERROR_INPUT_KINDS: dict[str, dict[str, tuple[str, Callable]]] = {
    "lora": {
        "bad_num_segments": ("malformed", _l_bad_num_segments),
        "metadata_device": ("malformed", _l_metadata_changed(lambda t: t.to("meta"))),
        "metadata_rank": ("malformed", _l_metadata_changed(lambda t: t.reshape(1, -1))),
        **_DATA_KINDS,
    },
    "vision": {
        "indptrs_none": ("upstream", _v_indptrs_none),
        "window_not_pair": ("malformed", _v_window((3,))),
        "window_not_ints": ("malformed", _v_window((1.5, 2))),
        "sinks_wrong_heads": ("malformed", _v_sinks_wrong_heads),
        "attention_mask_given": ("malformed", _v_attention_mask),
        **_DATA_KINDS,
    },
    "csgmv": CSGMV_ERROR_INPUT_KINDS,
}
_ALL = {family: {**table, **ERROR_INPUT_KINDS[family]} for family, table in _TABLES.items()}


def kinds(family: str, categories=CATEGORIES) -> list[str]:
    """The fuzzer's mutation kinds of ``family`` in the given categories, in table order (the
    :data:`ERROR_INPUT_KINDS` are not drawn)."""
    if family not in _TABLES:
        raise MutationError(f"family={family!r} is unknown; the only valid values are {', '.join(_TABLES)}")
    bad = [c for c in categories if c not in CATEGORIES]
    if bad:
        raise MutationError(f"categories {bad} are unknown; the only valid values are {list(CATEGORIES)}")
    return [k for k, (cat, _) in _TABLES[family].items() if cat in categories]
