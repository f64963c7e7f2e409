"""Target ``reference``: our pure-torch oracles, called like any target (strict, exact fp32)."""

from __future__ import annotations

from kernel_oracle.harness.opinfo import FAMILY_OPS

from .registry import Target, entries_from, register_target


def reference_target(spec: str, device) -> Target:
    from kernel_oracle.reference import lora, vision

    entries = {**entries_from(lora, FAMILY_OPS["lora"]), **entries_from(vision, FAMILY_OPS["vision"])}
    return Target("reference", entries, precision="ieee", strict=True)


register_target("reference", reference_target)
