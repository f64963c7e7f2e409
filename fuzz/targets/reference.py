"""Target ``reference``: our pure-torch oracles, called like any target (strict, exact fp32)."""

from __future__ import annotations

from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec

from .adapter import entries_from
from .registry import register_target


def reference_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    from kernel_oracle.reference import lora, vision

    entries = {**entries_from(lora, FAMILY_OPS["lora"]), **entries_from(vision, FAMILY_OPS["vision"])}
    return Target("reference", entries, precision="ieee", strict=True)


register_target("reference", reference_target)
