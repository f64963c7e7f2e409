"""Published SGLang releases as test targets: the wheel comes from the cache (``scripts/sglang_wheels.sh``
fills it before CI's tests; ``$KERNEL_ORACLE_CACHE/wheels`` or ``~/.cache/kernel-oracle/wheels``), or
``pip download``.

A test skips only when no wheel is cached and the registry cannot be reached; with
``KERNEL_ORACLE_REQUIRE=sglang-wheels`` (set by ``.ci/run``) a missing wheel fails instead, so CI
cannot go green without running the real kernels.
"""

from __future__ import annotations


import pytest

from kernel_oracle.fuzz.targets import TargetSpec, resolve_target
from kernel_oracle.fuzz.targets.sglang_wheel import LoaderError, find_wheel, wheel_release
from kernel_oracle.harness.releases import SGLANG_RELEASES

from .conftest import REQUIRE_ENV, REQUIRED

# the releases the suite reads (docs/semantics.md#where-sglang-keeps-the-kernels): kv_b kernels, and every one
# of the four versions of the vision wrapper (0.5.10 | 0.5.11 - 0.5.15.post1 | 0.5.16 | 0.5.17 - 0.5.23)
RELEASES = ("0.5.12", "0.5.15", "0.5.23")
VISION_RELEASES = ("0.5.10", "0.5.12", "0.5.15", "0.5.16", "0.5.23")
# every published release from 0.5.10 on, oldest first: the product's release table (Note [Release table])
ALL_RELEASES = SGLANG_RELEASES


def wheel_or_skip(version: str):
    """The wheel of ``sglang==version``, or skip (fail under ``KERNEL_ORACLE_REQUIRE=sglang-wheels``)."""
    try:
        return find_wheel(version)
    except LoaderError as exc:
        if "sglang-wheels" in REQUIRED:
            pytest.fail(f"{REQUIRE_ENV} names sglang-wheels but the sglang {version} wheel is unavailable: {exc}")
        pytest.skip(f"no sglang {version} wheel cached and none could be downloaded: {exc}")


def release_files(version: str):
    return wheel_release(wheel_or_skip(version))


def release_target(spec: str, device: str = "cpu"):
    """The resolved, available target ``spec`` (``sglang==X.Y.Z`` or ``sglang-trt==X.Y.Z``)."""
    wheel_or_skip(TargetSpec.parse(spec).release)
    t = resolve_target(spec, device)
    assert t.available, f"{spec} is unavailable although its wheel is there: {t.reason}"
    return t
