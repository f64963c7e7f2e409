"""A slim wheel (``fuzz.targets.sglang_slim``, what the GPU check carries) runs what the full wheel runs:
for every release, every release target, configuration and family, the run identity is the same, and
the newest release's targets have the same entry points.  A file the slim wheel drops changes one of
them (the two-stream correction: ``sglang-trt==X.Y.Z@lora_opti=on`` loses its fused sides and its
column merges with the plain one)."""

from __future__ import annotations

import pytest

from kernel_oracle.fuzz.targets import resolve_target
from kernel_oracle.fuzz.targets.sglang import release_identity
from kernel_oracle.fuzz.targets.sglang_slim import write_slim_wheel
from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.targets import RELEASE_NAMES, TargetSources, TargetSpec
from kernel_oracle.jobs.matrix import CONFIGURATION_VARIANTS

from oracle_tests._sglang_releases import ALL_RELEASES, wheel_or_skip


def _specs(release: str) -> list:
    return [f"{name}=={release}" + (f"@{conf}" if conf else "")
            for name in RELEASE_NAMES for conf in CONFIGURATION_VARIANTS.get(name, ("",))
            if not conf.startswith("engine=")]  # the engine is the device's FlashInfer, not a file of the wheel


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_the_slim_wheel_has_the_full_wheels_run_identities(release, tmp_path):
    full = TargetSources(sglang_wheel=str(wheel_or_skip(release)))
    slim = TargetSources(sglang_wheel=str(write_slim_wheel(full.sglang_wheel, tmp_path)))
    differ = [(spec, family) for spec in _specs(release) for family in FAMILY_OPS
              if release_identity(spec, family, sources=full) != release_identity(spec, family, sources=slim)]
    assert not differ, f"sglang {release}: the slim wheel runs other code for {differ}"


def test_the_slim_wheel_gives_the_newest_release_the_same_entry_points(tmp_path):
    release = ALL_RELEASES[-1]
    full = TargetSources(sglang_wheel=str(wheel_or_skip(release)))
    slim = TargetSources(sglang_wheel=str(write_slim_wheel(full.sglang_wheel, tmp_path)))
    for spec in _specs(release):
        a, b = (resolve_target(TargetSpec.parse(spec), "cpu", sources=s) for s in (full, slim))
        assert sorted(a.entries) == sorted(b.entries), (spec, sorted(set(a.entries) ^ set(b.entries)))
