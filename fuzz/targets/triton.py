"""Target ``triton``: our Triton kernels (:mod:`kernel_oracle.kernels.lora`, ``.vision``).

The same builder serves the mutants (:mod:`.mutants`): a patched copy of the kernels package is an
ordinary kernels package under another name.
"""

from __future__ import annotations

import contextlib

from kernel_oracle.harness.opinfo import FAMILY_OPS

from .registry import Target, entries_from, import_module, register_target, unavailable

KERNELS_PACKAGE = "kernel_oracle.kernels"


def kernels_target(device, package: str = KERNELS_PACKAGE, name: str = "triton") -> Target:
    """The target of the kernels package ``package`` (ours, or a mutant's copy)."""
    notes: dict = {}
    entries: dict = {}
    poison = None
    lora, why_l = import_module(f"{package}.lora")
    if lora is not None:
        entries.update(entries_from(lora, FAMILY_OPS["lora"], notes))
    else:
        notes.update({op: why_l for op in FAMILY_OPS["lora"]})
    vision, why_v = import_module(f"{package}.vision")
    if vision is not None:
        entries.update(entries_from(vision, FAMILY_OPS["vision"], notes))
        hook = getattr(vision, "poisoned_output", None)
        if hook is not None:
            poison = (lambda family: hook() if family == "vision" else contextlib.nullcontext())
    else:
        notes["vision"] = why_v
    if not entries:
        return unavailable(name, "; ".join(sorted(set(notes.values()))), notes=notes)
    return Target(name, entries, precision="ieee", strict=True, poison=poison, notes=notes)


register_target("triton", lambda spec, device: kernels_target(device))
