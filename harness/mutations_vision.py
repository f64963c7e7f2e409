"""The vision family's metadata mutation kinds (Note [Mutations] in :mod:`harness.mutations`), which the
``vision`` record names (its ``mutations``): each breaks one thing of a materialised vision call's metadata (on
either path: ``forward_metadata`` or the keywords), or one of its extra arguments."""

from __future__ import annotations

from typing import Callable

import torch

from kernel_oracle.harness.mutations import DATA_KINDS, MutationKinds
from kernel_oracle.harness.problems import Call

__all__ = ["VISION_KINDS", "VISION_MUTATIONS"]


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


# ---- kinds only error inputs use (not drawn by the fuzzer) ---------------------------------------

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


VISION_MUTATIONS = MutationKinds(VISION_KINDS, {
    "indptrs_none": ("upstream", _v_indptrs_none),
    "window_not_pair": ("malformed", _v_window((3,))),
    "window_not_ints": ("malformed", _v_window((1.5, 2))),
    "sinks_wrong_heads": ("malformed", _v_sinks_wrong_heads),
    "attention_mask_given": ("malformed", _v_attention_mask),
    **DATA_KINDS,
})
