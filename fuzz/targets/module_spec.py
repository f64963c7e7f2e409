"""Targets given as ``package.module`` or ``package.module:attr``: anything exporting SGLang's entry points.

The module is searched in the current directory first, then on ``sys.path`` (Note [Modules beside
the user] in :mod:`.user_modules`).  ``attr`` may be an object with the entry points, a class (instantiated without arguments), or a bare
function (then the op a family's record takes it as, ``Family.bare_function_op``: the vision forward).  A module declares ``KERNEL_ORACLE_STRICT = True`` when it
implements our strict validation and ``KERNEL_ORACLE_PRECISION`` (``"ieee"``/``"tf32"``) when it
knows its fp32 matmul precision.
"""

from __future__ import annotations

import inspect

from kernel_oracle.harness.family import families
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec, unavailable

from .adapter import entries_from, third_party
from .registry import register_target
from .user_modules import import_module


def _module_target(parsed: TargetSpec, device: str, sources: TargetSources) -> Target:
    spec, module_name, attr = str(parsed), parsed.module, parsed.attr
    mod, why = import_module(module_name)
    if mod is None:
        return unavailable(spec, why)
    obj = mod
    if attr:
        obj = getattr(mod, attr, None)
        if obj is None:
            return unavailable(spec, f"{module_name} has no attribute {attr!r}; pass package.module:attr "
                                      f"with an attr it defines")
        if inspect.isclass(obj):
            try:
                obj = obj()
            except Exception as exc:  # noqa: BLE001
                return unavailable(spec, f"{spec}() failed: {type(exc).__name__}: {exc}")
    notes: dict = {}
    entries = entries_from(obj, None, notes)
    bare = [f.bare_function_op for f in families() if f.bare_function_op is not None]
    if not entries and callable(obj) and attr and len(bare) == 1:
        entries = {bare[0]: obj}  # a bare function: the op a record takes it as (vision's forward)
        notes.pop(bare[0], None)
    if not entries:
        from kernel_oracle.harness.opinfo import entry_names

        return unavailable(spec, f"{spec} exports none of {sorted(entry_names().values())} ")
    try:
        source = inspect.getsource(mod)
    except (OSError, TypeError):
        source = ""
    triton_code = "triton" in source
    strict = bool(getattr(obj, "KERNEL_ORACLE_STRICT", getattr(mod, "KERNEL_ORACLE_STRICT", False)))
    precision = getattr(obj, "KERNEL_ORACLE_PRECISION", getattr(mod, "KERNEL_ORACLE_PRECISION", None))
    return third_party(spec, entries, notes, triton_code=triton_code, strict=strict, precision=precision,
                        device=device)


register_target("module", _module_target)
