"""Writes outside a view: the memory of a strided argument's buffer that the view does not cover.

Note [Writes outside a view]
----------------------------
The suite passes strided arguments on purpose (``LoRAProblem.strided``: every other element of a wider
buffer; ``offset_views``: a view one row into it; vision's ``v`` inside an interleaved qkv buffer), and
fills the buffer's other elements -- the gaps -- with NaN, so a kernel that *reads* a gap produces NaN.
A kernel that *writes* one was unseen: the comparison reads only the view, and the read-only inputs are
compared only through their views (Note [Read-only inputs]), so a ``step_b_q`` that adds the right values
to ``base_output`` and then zeroes its neighbours' memory passed every case -- in SGLang those gaps are
another tensor's rows.  :func:`watch` copies, before the call, the whole buffer (``untyped_storage``) of
every tensor argument whose view leaves part of it uncovered; :func:`writes` compares the uncovered bytes
after it (raw bytes: NaN equals NaN) and names each tensor whose gap changed, with the first changed
element as an index into its buffer and its value before and after.  Views of one buffer are watched
together (what one of them covers is no gap).  Contiguous arguments that fill their buffer cost nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["Gap", "watch", "writes"]


@dataclasses.dataclass
class Gap:
    """The buffer of one or more views: ``names`` of the arguments viewing it, ``raw`` its bytes (live),
    ``before`` their copy, ``uncovered`` the bool mask of bytes no view covers, ``dtype`` the first
    view's (its elements index the buffer in the message)."""

    names: list
    raw: torch.Tensor
    before: torch.Tensor
    uncovered: torch.Tensor
    dtype: torch.dtype


def _raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t``'s whole buffer, as a live uint8 tensor (writes to the buffer show in it)."""
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))


def _covered(t: torch.Tensor, nbytes: int) -> torch.Tensor:
    """Bool mask over the buffer's ``nbytes`` bytes: True where an element of the view ``t`` lies."""
    item = t.element_size()
    index = torch.arange(nbytes // item, device=t.device).as_strided(t.shape, t.stride(), t.storage_offset())
    elements = torch.zeros(nbytes // item, dtype=torch.bool, device=t.device)
    elements[index.reshape(-1)] = True
    mask = torch.zeros(nbytes, dtype=torch.bool, device=t.device)
    mask[:elements.numel() * item] = elements.repeat_interleave(item)
    return mask


def _tensors(call) -> list:
    """``(name, tensor)`` of the call's plain tensor arguments (positional by the signature's names)."""
    sig = call.signature
    named = [(sig.params[i] if i < len(sig.params) else f"args[{i}]", a) for i, a in enumerate(call.args)]
    named += list(call.kwargs.items())
    return [(n, a) for n, a in named if type(a) is torch.Tensor and a.layout == torch.strided and not a.is_meta
            and a.numel() > 0]


def watch(call) -> list[Gap]:
    """Copies of the buffers of ``call``'s tensor arguments that their views leave partly uncovered
    (Note [Writes outside a view])."""
    by_buffer: dict = {}
    for name, t in _tensors(call):
        storage = t.untyped_storage()
        key = (storage.data_ptr(), str(t.device))
        by_buffer.setdefault(key, []).append((name, t))
    gaps = []
    for views in by_buffer.values():
        first = views[0][1]
        nbytes = first.untyped_storage().nbytes()
        if all(t.is_contiguous() and t.storage_offset() == 0 and t.numel() * t.element_size() == nbytes
               for _, t in views):
            continue  # the view is the buffer: no gap
        covered = torch.zeros(nbytes, dtype=torch.bool, device=first.device)
        for _, t in views:
            covered |= _covered(t, nbytes)
        if bool(covered.all()):
            continue
        raw = _raw_bytes(first)
        gaps.append(Gap([n for n, _ in views], raw, raw.clone(), ~covered, first.dtype))
    return gaps


def _element(raw: torch.Tensor, index: int, dtype: torch.dtype) -> Any:
    item = torch.empty(0, dtype=dtype).element_size()
    return raw[index * item:(index + 1) * item].cpu().view(dtype).item()


def writes(gaps: list[Gap]) -> list[str]:
    """One line per buffer whose uncovered bytes changed since :func:`watch`: the arguments viewing it, the
    first changed element (an index into the buffer, in the first view's dtype) before and after."""
    out = []
    for g in gaps:
        changed = (g.raw != g.before) & g.uncovered
        if not bool(changed.any()):
            continue
        first_byte = int(torch.nonzero(changed)[0])
        item = torch.empty(0, dtype=g.dtype).element_size()
        index = first_byte // item
        count = int(changed.view(-1, item).any(dim=1).sum()) if g.raw.numel() % item == 0 else int(changed.sum())
        names = " and ".join(g.names)
        out.append(f"{names}: wrote {count} element(s) of its buffer outside the view, first buffer element "
                   f"{index}: {_element(g.before, index, g.dtype)!r} -> {_element(g.raw, index, g.dtype)!r}")
    return out
