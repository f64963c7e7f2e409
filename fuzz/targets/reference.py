"""Target ``reference``: our pure-torch oracles, called like any target (strict, exact fp32).

Its entry points are every registered family's reference module's (:mod:`kernel_oracle.harness.family`:
a family's ``reference`` field), in registration order."""

from __future__ import annotations

from kernel_oracle.harness.family import families
from kernel_oracle.harness.targets import Target, TargetSources, TargetSpec
from kernel_oracle.harness.tiles import unknown_model

from .adapter import entries_from
from .registry import register_target


def reference_target(spec: TargetSpec, device: str, sources: TargetSources) -> Target:
    entries = {}
    for family in families():
        entries.update(entries_from(family.resolve("reference"), family.ops))
    flat = unknown_model("the pure-torch reference computes whole tensors: it has no blocks")
    return Target("reference", entries, precision="ieee", strict=True,
                  tiles={family.name: flat for family in families()})


register_target("reference", reference_target)
