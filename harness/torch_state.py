"""torch's process-wide settings, read before a target call and put back after it.

Note [Global state]
-------------------
A target runs in the same process as the oracle, and torch keeps settings process-wide: a target
that calls ``torch.set_float32_matmul_precision("medium")`` makes every later fp32 matmul of the
oracle's same-dtype baseline run in bf16, which widens the allowance of every later case (and of
the comparison of the same case): a sloppy kernel then passes cases it fails on a clean process.
So :func:`snapshot` reads every setting that changes what torch computes or where it allocates,
the check of a case (:func:`harness.check.execute`) takes one before the target call, and
:func:`restore` puts it back right after; what differs is the target's doing and is reported
(:func:`changes`: ``torch.backends.cuda.matmul.allow_tf32 False -> True``) while the case is judged
as if nothing had happened.  A campaign worker also takes one when it starts, before it imports a
target, and restores it before each case: a target that changes a setting at import time is caught
at its first case.

The settings (:data:`SETTINGS`): fp32 matmul precision and TF32 switches in both of torch's
spellings (the legacy ``allow_tf32`` flags and the per-backend ``fp32_precision`` strings: torch
refuses to read a legacy flag once the two disagree, which reads here as ``<mixed>``), the
reduced-precision reductions, cuDNN's switches, the default dtype and device, deterministic
algorithms (and warn-only), flush-denormal (read with a probe: ``set_flush_denormal`` only says
whether the CPU supports it), grad mode, the CPU generator's state, and with CUDA initialised the
current device with its stream and generator state.  Reading them costs microseconds and
allocates nothing on the GPU; nothing here initialises CUDA.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

__all__ = ["SETTINGS", "Setting", "changes", "restore", "snapshot"]

MIXED = "<mixed>"  # a legacy TF32 flag torch refuses to read (the two spellings disagree)


@dataclass(frozen=True)
class Setting:
    """One process-wide setting: its name as a user would write it, how to read it and set it back.
    ``show`` renders a value for a finding (generator states as a short digest); ``switch``: the
    name of the setting that leads its group (one switch with several spellings, e.g. the fp32
    matmul precision and its TF32 flags), reported as one change; None: its own name."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]
    show: Callable[[Any], str] = repr
    switch: Optional[str] = None

    @property
    def lead(self) -> str:
        return self.switch or self.name

    def read(self) -> Any:
        try:
            return self.get()
        except RuntimeError:  # torch: legacy and new TF32 APIs disagree
            return MIXED


def _attr(path: str, switch: Optional[str] = None) -> Setting:
    """A setting that is an attribute, ``torch.backends.cudnn.enabled`` style."""
    owner_path, _, name = path.rpartition(".")

    def owner():
        obj: Any = torch
        for part in owner_path.split(".")[1:]:
            obj = getattr(obj, part)
        return obj

    return Setting(path, lambda: getattr(owner(), name), lambda v: setattr(owner(), name, v), switch=switch)


def _flush_denormal() -> bool:
    """Whether denormals flush to zero in this thread (a probe: 1e-38 / 1e4 is a denormal float32)."""
    return float(torch.tensor([1e-38], dtype=torch.float32, device="cpu") / 1e4) == 0.0


def _default_device() -> torch.device:
    return torch.get_default_device()


def _set_default_device(device: torch.device) -> None:
    torch.set_default_device(None if device == torch.device("cpu") else device)


def _deterministic() -> tuple:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _set_deterministic(value: tuple) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _digest(state: Any) -> str:
    """A generator state (a uint8 tensor, or a list of them) as 8 hex digits."""
    states = state if isinstance(state, (list, tuple)) else [state]
    h = hashlib.sha1()
    for s in states:
        h.update(s.cpu().numpy().tobytes())
    return h.hexdigest()[:8]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _cuda_on() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _stream_id(stream) -> int:
    return stream.cuda_stream


_MATMUL = "torch.get_float32_matmul_precision()"
_CUDNN = "torch.backends.cudnn.allow_tf32"
# torch's per-backend precision strings, each with the switch it spells
_PRECISION_STRINGS = (("torch.backends.fp32_precision", _MATMUL), ("torch.backends.cuda.matmul.fp32_precision", _MATMUL),
                      ("torch.backends.cudnn.fp32_precision", _CUDNN), ("torch.backends.cudnn.conv.fp32_precision", _CUDNN),
                      ("torch.backends.cudnn.rnn.fp32_precision", _CUDNN), ("torch.backends.mkldnn.fp32_precision", _MATMUL),
                      ("torch.backends.mkldnn.matmul.fp32_precision", _MATMUL),
                      ("torch.backends.mkldnn.conv.fp32_precision", _CUDNN),
                      ("torch.backends.mkldnn.rnn.fp32_precision", _CUDNN))


def _available(path: str) -> bool:
    try:
        _attr(path).get()
    except AttributeError:  # an older torch without this spelling
        return False
    except RuntimeError:
        return True
    return True


# In restore order: the legacy spellings first, then the per-backend strings (parents before
# children: a parent's value propagates to its children), then the rest (Note [Global state]).
SETTINGS: tuple[Setting, ...] = (
    Setting(_MATMUL, torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    _attr("torch.backends.cuda.matmul.allow_tf32", _MATMUL),
    _attr("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"),
    _attr("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
    _attr("torch.backends.cudnn.allow_tf32"),
    *(_attr(p, switch) for p, switch in _PRECISION_STRINGS if _available(p)),
    _attr("torch.backends.cudnn.enabled"),
    _attr("torch.backends.cudnn.deterministic"),
    _attr("torch.backends.cudnn.benchmark"),
    Setting("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
    Setting("torch.get_default_device()", _default_device, _set_default_device),
    Setting("torch.are_deterministic_algorithms_enabled() (and warn_only)", _deterministic, _set_deterministic),
    Setting("flush denormal (torch.set_flush_denormal)", _flush_denormal, torch.set_flush_denormal),
    Setting("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
    Setting("torch.get_rng_state()", torch.get_rng_state, torch.set_rng_state, _digest),
)

# read only once CUDA is initialised (reading them must not initialise it), and only of the current
# device (reading another device's stream or generator would make a context there); the device first,
# so that restoring it comes before its stream and generator
_CUDA_SETTINGS: tuple[Setting, ...] = (
    Setting("torch.cuda.current_device()", torch.cuda.current_device, torch.cuda.set_device),
    Setting("torch.cuda.current_stream()", torch.cuda.current_stream, torch.cuda.set_stream,
            lambda stream: hex(_stream_id(stream))),
    Setting("torch.cuda.get_rng_state()", torch.cuda.get_rng_state, torch.cuda.set_rng_state, _digest),
)


def snapshot() -> dict:
    """The value of every setting (name -> value); CUDA's only when CUDA is initialised."""
    settings = SETTINGS + (_CUDA_SETTINGS if _cuda_on() else ())
    return {s.name: s.read() for s in settings}


def _by_name() -> dict:
    return {s.name: s for s in SETTINGS + _CUDA_SETTINGS}


def _is_mixed(value: Any) -> bool:
    return isinstance(value, str) and value == MIXED


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "torch.cuda.current_stream()":
        return _stream_id(a) == _stream_id(b)
    return _equal(a, b)


def changes(before: dict, after: dict) -> list[tuple[str, str]]:
    """``(switch, "name old -> new[; name old -> new]")`` per switch whose settings differ: one
    entry per switch, every spelling that changed in its text (restore order)."""
    settings = _by_name()
    out: dict[str, list[str]] = {}
    for name, old in before.items():
        if name in after and not _same(name, old, after[name]):
            s = settings[name]
            out.setdefault(s.lead, []).append(f"{name} {s.show(old)} -> {s.show(after[name])}")
    return [(lead, "; ".join(lines)) for lead, lines in out.items()]


def restore(before: dict) -> list[str]:
    """Set every setting that differs from ``before`` back; the names that could not be restored."""
    settings = _by_name()
    failed = []
    for name, old in before.items():
        s = settings[name]
        if _is_mixed(old) or _same(name, old, s.read()):
            continue
        try:
            s.set(old)
        except (RuntimeError, ValueError, TypeError):
            failed.append(name)
    now = snapshot()
    failed += [n for n, old in before.items() if n not in failed and not _is_mixed(old) and n in now
               and not _same(n, old, now[n])]
    return failed
