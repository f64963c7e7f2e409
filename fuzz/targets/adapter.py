"""What every target adapter uses: entry points found by name, imports that report why they failed,
and the declarations of code we do not own (Note [Targets] in :mod:`kernel_oracle.harness.targets`)."""

from __future__ import annotations

import importlib
from typing import Optional

from kernel_oracle.harness.device import interpreting
from kernel_oracle.harness.target_raises import signals_noted
from kernel_oracle.harness.targets import Target

__all__ = ["BF16_REASON", "entries_from", "import_module", "third_party"]

BF16_REASON = ("third-party Triton code under the Triton interpreter: the interpreter computes bf16 "
               "arithmetic on raw bit patterns (docs/semantics.md#where-the-triton-interpreter-is-wrong), which is not the target's fault")


def entries_from(obj, ops=None, notes=None) -> dict:
    """op -> callable of ``obj``'s entry points (SGLang's names, :func:`harness.opinfo.entry_names`)
    among ``ops`` (default: every op); a missing one is noted in ``notes`` (op -> why) when given."""
    from kernel_oracle.harness.opinfo import entry_names  # torch: when a target is resolved, not when listed

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
    """``(module, None)``, or ``(None, why)`` when importing ``name`` fails (the reason is reported)."""
    with signals_noted() as noted:  # an exit() at import is the module's failure too (Note [The target's BaseException])
        try:
            return importlib.import_module(name), None
        except BaseException as exc:  # noqa: BLE001 - the reason is reported, not swallowed
            if not noted.targets(exc):
                raise
            return None, f"import {name} failed: {type(exc).__name__}: {exc}"


def third_party(name: str, entries: dict, notes: dict, *, triton_code: bool, strict: bool,
                precision: Optional[str], device) -> Target:
    """A target of code we do not own: bf16 excluded under the interpreter (we cannot neutralise its
    defects inside their kernels), fp32 precision TF32 for Triton code on a GPU unless declared."""
    excluded = {}
    if triton_code and interpreting():
        excluded["bfloat16"] = BF16_REASON
    if precision is None:  # tl.dot runs fp32 in TF32 on NVIDIA GPUs by default; exact in the interpreter
        precision = "tf32" if (triton_code and str(device).startswith("cuda") and not interpreting()) else "ieee"
    return Target(name, entries, precision=precision, strict=strict, excluded_dtypes=excluded, notes=notes)
