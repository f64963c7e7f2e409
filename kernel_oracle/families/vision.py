"""The ``vision`` family's record: the flashinfer_cudnn vision attention (one op of the family's name)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family
from kernel_oracle.reference.signatures import ops_of

__all__ = ["VISION"]


def _reference():
    from kernel_oracle.reference import vision

    return vision


def _problem():
    from kernel_oracle.harness.problems import VisionProblem

    return VisionProblem


def _strategies():
    from kernel_oracle.fuzz.strategies import vision_problems

    return vision_problems


def _cases():
    from kernel_oracle.fuzz.strategies import vision_cases

    return vision_cases


def _locator():
    from kernel_oracle.harness.locators import vision_locator

    return vision_locator


def _declined():
    from kernel_oracle.harness.declined import vision_declined

    return vision_declined


def _kernels():
    from kernel_oracle.kernels import vision

    return vision


def _benchmark():
    from kernel_oracle.benchmarks import bench_vision

    return bench_vision


VISION = Family(
    name="vision",
    ops=ops_of("vision"),  # ("vision",)
    label="vision attention",
    reference=_reference,
    problem=_problem,
    strategies=_strategies,
    cases=_cases,
    locator=_locator,
    declined=_declined,
    kernels=_kernels,
    benchmark=_benchmark,
)
