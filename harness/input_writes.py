"""Inputs a target must not write, copied before its call and compared bit for bit after it.

Note [Read-only inputs]
-----------------------
SGLang's entry points write one argument, the in-place ``base_output`` of the LoRA B steps and
the fused steps (:attr:`reference.signatures.Signature.inplace`); every other argument is read
only: the activations and weights, the batch info and its tensors (``seg_indptr``,
``weight_indices``, ``permutation``, ...), the vision indptrs, ``sequence_lengths``,
``max_seqlen`` and the ``forward_metadata`` object with its fields.  A kernel that computes the
right output and then clobbers one of them (a scratch buffer reused, a sort done in place, a field
rebound) corrupts the caller's next call while every output comparison passes, so
:func:`watch` copies each of them before the call (tensors with ``clone``, other field values
as they are) and :func:`writes` compares after it: tensors as raw bits (so NaN equals NaN and
-0.0 differs from 0.0), on their own device, one ``torch.equal`` per tensor; the index of the
first difference is looked for only once one is found.  A change is one line naming the argument
(``batch_info.seg_indptr``) and the first changed index with the value before and after.

Before any of that, :func:`freed` looks at every tensor of the call, the in-place output included: a
target that frees an argument's memory (``untyped_storage().resize_(0)``) leaves a tensor whose storage
no longer holds its view, and reading it faults the process (a bare SIGSEGV with no word of what the
target did).  Such a call is judged on that alone and none of its tensors is read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

__all__ = ["Watched", "freed", "storage_shortfall", "watch", "writes"]

# metadata objects are followed this deep (batch info -> its fields; a cycle ends here)
_MAX_DEPTH = 2
_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device)


@dataclasses.dataclass
class Watched:
    """One read-only value: ``name`` as the finding says it, ``now()`` reads it after the call,
    ``before`` is its copy."""

    name: str
    now: Callable[[], Any]
    before: Any


def _fields(obj: Any) -> dict:
    """The fields of a metadata object (a dataclass, a plain object or a SimpleNamespace)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if hasattr(obj, f.name)}
    return dict(getattr(obj, "__dict__", None) or {})


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _watch_value(name: str, value: Any, now: Callable[[], Any], out: list, depth: int = 0) -> None:
    if isinstance(value, (torch.Tensor, list, tuple) + _SCALARS):
        out.append(Watched(name, now, _copy(value)))
    elif depth < _MAX_DEPTH:  # a metadata object: each field, read back from the object (a rebound field counts)
        for field, v in _fields(value).items():
            _watch_value(f"{name}.{field}", v, (lambda o=value, f=field: getattr(o, f, None)), out, depth + 1)


def watch(call) -> list[Watched]:
    """Copies of every argument of ``call`` but its in-place output (Note [Read-only inputs])."""
    sig = call.signature
    out: list[Watched] = []
    for i, value in enumerate(call.args):
        if i == call.inplace:
            continue
        name = sig.params[i] if i < len(sig.params) else f"args[{i}]"
        _watch_value(name, value, (lambda v=value: v), out)
    for key, value in call.kwargs.items():
        _watch_value(key, value, (lambda v=value: v), out)
    return out


def storage_shortfall(t: torch.Tensor) -> str | None:
    """Why reading ``t`` would read past its storage (its memory was freed or shrunk), or None."""
    try:
        if t.numel() == 0 or t.is_meta or t.layout != torch.strided or t.is_nested:
            return None
        last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
        have, need = t.untyped_storage().nbytes(), (last + 1) * t.element_size()
    except (RuntimeError, NotImplementedError, TypeError):  # no storage to speak of: the other checks say what it is
        return None
    return None if have >= need else f"its storage holds {have} bytes, its view needs {need}"


def _tensors(name: str, value: Any, out: list, depth: int = 0) -> None:
    if isinstance(value, torch.Tensor):
        out.append((name, value))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _tensors(f"{name}[{i}]", v, out, depth)
    elif not isinstance(value, _SCALARS) and depth < _MAX_DEPTH:
        for field, v in _fields(value).items():
            _tensors(f"{name}.{field}", v, out, depth + 1)


def freed(call) -> list[str]:
    """One line per tensor of ``call`` (the in-place output too) whose storage no longer holds its view
    (see the Note): nothing may read such a call."""
    sig, found = call.signature, []
    for i, value in enumerate(call.args):
        _tensors(sig.params[i] if i < len(sig.params) else f"args[{i}]", value, found)
    for key, value in call.kwargs.items():
        _tensors(key, value, found)
    return [f"{name}: {why}" for name, t in found if (why := storage_shortfall(t)) is not None]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers of its element size (NaN payloads and signs compared too)."""
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    size = t.element_size()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]) if size in (1, 2, 4, 8) else t


def _tensor_change(before: torch.Tensor, now: Any) -> str | None:
    if not isinstance(now, torch.Tensor):
        return f"was a tensor, is now {type(now).__name__}"
    if now.shape != before.shape or now.dtype != before.dtype:
        return f"was {before.dtype} {tuple(before.shape)}, is now {now.dtype} {tuple(now.shape)}"
    if now.device != before.device:
        return f"was on {before.device}, is now on {now.device}"
    a, b = _bits(before), _bits(now.detach())
    if torch.equal(a, b):
        return None
    first = tuple(int(i) for i in torch.nonzero(a != b)[0].tolist())
    if before.is_complex():
        first = first[:-1]
    was, is_now = before[first].item(), now[first].item()
    return f"first changed index {first}: {was!r} -> {is_now!r}"


def _same_value(before: Any, now: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return _tensor_change(before, now) is None
    if isinstance(before, (list, tuple)):
        return (isinstance(now, (list, tuple)) and len(now) == len(before)
                and all(_same_value(b, n) for b, n in zip(before, now)))
    try:
        return type(before) is type(now) and bool(before == now or (before != before and now != now))
    except Exception:  # noqa: BLE001 - a value that cannot be compared is not the value it was
        return False


def writes(watched: list[Watched]) -> list[str]:
    """One line per read-only input that differs from its copy (Note [Read-only inputs])."""
    out = []
    for w in watched:
        now = w.now()
        if isinstance(w.before, torch.Tensor):
            change = _tensor_change(w.before, now)
            if change is not None:
                out.append(f"{w.name}: {change}")
        elif not _same_value(w.before, now):
            out.append(f"{w.name}: {_short(w.before)} -> {_short(now)}")
    return out
