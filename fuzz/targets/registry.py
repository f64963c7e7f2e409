"""The targets registry: anything with SGLang's signatures can be fuzzed.

Note [Targets]
--------------
A :class:`Target` maps op names (``step_a_q`` ... ``v_side_fused``, ``vision``) to callables with
the signatures of :mod:`reference.lora` / :func:`reference.vision.flashinfer_cudnn_attention`, and
declares what the comparison needs to be fair:

* ``precision``: how it runs fp32 matmuls, one value for every entry point or a dict per op
  (``precision_for(op)``): ``"ieee"`` (exact fp32 products), ``"tf32"`` (TF32, operands rounded to
  nearest or truncated: the baseline takes the worst of both), or one mode, ``"tf32-rne"`` /
  ``"tf32-trunc"``; the tolerance baseline is the faithful oracle in that precision
  (reference.tolerance, Note [TF32 rounding]), and records name it per op;
* ``strict``: whether it implements our strict validation (third-party code does not: malformed
  metadata cases are then validation gaps by construction; ``--upstream-contracts-only`` skips them);
* ``excluded_dtypes``: dtype -> reason; a third-party Triton target run under the interpreter is not
  tested in bfloat16, because the interpreter computes bf16 arithmetic on raw bit patterns
  (SPEC.md "Where it runs") and we cannot neutralise that inside code we do not own;
* ``poison``: an optional ``family -> context manager`` that makes the target allocate its fresh
  outputs full of NaN (our vision kernel's ``poisoned_output`` hook).

This module is the registry only: :func:`register_target` (an exact spec such as ``triton``) and
:func:`register_prefix` (a family of specs such as ``mutant:NAME``) map specs to factories
``(spec, device) -> Target``; one module per adapter in this package registers itself
(``reference``, ``triton``, ``sglang``, ``torch-varlen``, ``flashinfer-cudnn``, ``mutant:NAME``), and
anything else that looks like ``package.module[:attr]`` goes to the module-spec adapter.  A target
with only some entry points is tested on those; an unavailable one carries the reason, and callers
report it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Optional

from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.opinfo import FAMILY_OPS, entry_names

__all__ = ["PRECISIONS", "Target", "TargetError", "builtin_targets", "entries_from", "import_module", "register_prefix",
           "register_target", "resolve_target", "third_party", "unavailable"]

_BF16_REASON = ("third-party Triton code under the Triton interpreter: the interpreter computes bf16 "
                "arithmetic on raw bit patterns (SPEC.md), which is not the target's fault")


class TargetError(ValueError):
    """An unknown or malformed target spec."""


# fp32 matmul precisions a target may declare (the faithful oracle modes of reference.tolerance)
PRECISIONS = ("ieee", "tf32", "tf32-rne", "tf32-trunc")


@dataclass
class Target:
    name: str
    entries: dict = field(default_factory=dict)  # op -> callable
    available: bool = True
    reason: str = ""
    precision: str | dict = "ieee"  # one for every op, or op -> precision (ops not named: "ieee")
    strict: bool = True
    excluded_dtypes: dict = field(default_factory=dict)  # dtype name -> reason
    poison: Optional[Callable] = None  # family -> context manager
    notes: dict = field(default_factory=dict)  # op -> why it is missing
    status: Optional[Callable[[], str]] = None  # a live ``reason`` (e.g. an engine's fallback note)
    release: Optional[str] = None  # the upstream package's version (known issues apply per release)

    def __post_init__(self) -> None:
        if isinstance(self.precision, dict):
            known = {op for ops in FAMILY_OPS.values() for op in ops}
            for op, prec in self.precision.items():
                if op not in known:
                    raise TargetError(f"target {self.name!r}: precision names op={op!r}; the only valid ops are "
                                      f"{sorted(known)}")
                self._check_precision(prec, f"precision[{op!r}]")
        else:
            self._check_precision(self.precision, "precision")

    def _check_precision(self, prec: object, field: str) -> None:
        if not isinstance(prec, str) or prec not in PRECISIONS:
            raise TargetError(f"target {self.name!r}: {field}={prec!r}; the only valid values are "
                              + ", ".join(repr(p) for p in PRECISIONS))

    def precision_for(self, op: str) -> str:
        """How this target runs fp32 matmuls in ``op`` (the ``precision=`` of ``expected_outcome``)."""
        if isinstance(self.precision, dict):
            return self.precision.get(op, "ieee")
        return self.precision

    def precisions(self) -> dict:
        """op -> precision for every entry point."""
        return {op: self.precision_for(op) for op in sorted(self.entries)}

    def precision_summary(self) -> str:
        """One line for reports: ``"ieee"`` when every entry point agrees, else
        ``"tf32: step_a_q, ...; ieee: vision"``."""
        by: dict = {}
        for op, prec in self.precisions().items():
            by.setdefault(prec, []).append(op)
        if len(by) <= 1:
            return next(iter(by), self.precision if isinstance(self.precision, str) else "ieee")
        return "; ".join(f"{prec}: {', '.join(ops)}" for prec, ops in by.items())

    def has(self, op: str) -> bool:
        return op in self.entries

    def entry(self, op: str) -> Callable:
        try:
            return self.entries[op]
        except KeyError:
            raise TargetError(f"target {self.name!r} has no entry point for op {op!r}; it has "
                              f"{sorted(self.entries)}") from None

    def ops(self, family: str) -> tuple[str, ...]:
        return tuple(op for op in FAMILY_OPS[family] if op in self.entries)

    def dtypes(self, candidates) -> tuple[str, ...]:
        return tuple(d for d in candidates if d not in self.excluded_dtypes)

    def to_record(self) -> dict:
        reason = self.status() if self.status is not None else self.reason
        return {"name": self.name, "available": self.available, "reason": reason,
                "entry_points": sorted(self.entries), "precision": self.precision_summary(),
                "precision_by_op": self.precisions(), "strict": self.strict,
                "excluded_dtypes": dict(self.excluded_dtypes), "missing": dict(self.notes),
                "release": self.release}


def unavailable(name: str, reason: str, **kw) -> Target:
    return Target(name, {}, available=False, reason=reason, **kw)


def entries_from(obj, ops=None, notes=None) -> dict:
    out = {}
    names = entry_names()
    for op in ops or tuple(names):
        attr = names[op]
        fn = getattr(obj, attr, None)
        if callable(fn):
            out[op] = fn
        elif notes is not None:
            notes[op] = f"{getattr(obj, '__name__', obj)!s} has no {attr}"
    return out


def import_module(name: str):
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001 - the reason is reported, not swallowed
        return None, f"import {name} failed: {type(exc).__name__}: {exc}"


def third_party(name: str, entries: dict, notes: dict, *, triton_code: bool, strict: bool,
                precision: Optional[str], device) -> Target:
    """A target of code we do not own: bf16 excluded under the interpreter (we cannot neutralise its
    defects inside their kernels), fp32 precision TF32 for Triton code on a GPU unless declared."""
    excluded = {}
    if triton_code and interpreting():
        excluded["bfloat16"] = _BF16_REASON
    if precision is None:  # tl.dot runs fp32 in TF32 on NVIDIA GPUs by default; exact in the interpreter
        precision = "tf32" if (triton_code and str(device).startswith("cuda") and not interpreting()) else "ieee"
    return Target(name, entries, precision=precision, strict=strict, excluded_dtypes=excluded, notes=notes)


Factory = Callable[[str, object], Target]
_EXACT: dict[str, Factory] = {}
_PREFIX: dict[str, Factory] = {}
_FALLBACK: dict[str, Factory] = {}
_CACHE: dict = {}


def register_target(name: str, factory: Factory) -> None:
    """Make ``name`` a built-in spec: ``factory(spec, device)`` builds its :class:`Target`."""
    if not name or ":" in name or "." in name:
        raise TargetError(f"register_target: name={name!r}; a built-in name has no ':' or '.' "
                          "(those are for prefixes and module specs)")
    _EXACT[name] = factory


def register_prefix(prefix: str, factory: Factory) -> None:
    """Route every spec starting with ``prefix`` (e.g. ``"mutant:"``) to ``factory(spec, device)``."""
    _PREFIX[prefix] = factory


def register_module_fallback(factory: Factory) -> None:
    """The adapter for ``package.module[:attr]`` specs (anything with a '.' or ':' not claimed above)."""
    _FALLBACK["module"] = factory


def builtin_targets() -> tuple[str, ...]:
    return tuple(_EXACT)


def resolve_target(spec: str, device="cpu") -> Target:
    """The :class:`Target` for ``spec`` (cached per spec and device); never raises for an
    unavailable target -- check ``.available`` and report ``.reason``."""
    if not isinstance(spec, str) or not spec:
        raise TargetError(f"Expected a target spec such as {', '.join(repr(n) for n in _EXACT)}, "
                          f"'mutant:NAME' or 'package.module[:attr]' but got spec={spec!r}")
    key = (spec, str(device))
    if key in _CACHE:
        return _CACHE[key]
    if spec in _EXACT:
        t = _EXACT[spec](spec, device)
    else:
        prefix = next((p for p in _PREFIX if spec.startswith(p)), None)
        if prefix is not None:
            t = _PREFIX[prefix](spec, device)
        elif ("." in spec.partition(":")[0] or ":" in spec) and "module" in _FALLBACK:
            t = _FALLBACK["module"](spec, device)
        else:
            raise TargetError(f"target={spec!r} is unknown; the only built-in targets are {list(_EXACT)} "
                              f"(or pass {', '.join(p + '...' for p in _PREFIX)} or package.module[:attr])")
    _CACHE[key] = t
    return t
