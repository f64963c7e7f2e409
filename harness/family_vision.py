"""The ``vision`` family's record: the flashinfer_cudnn vision attention (one op of the family's name)."""

from __future__ import annotations

from kernel_oracle.reference.signatures import ops_of

from kernel_oracle.harness.family import Family

VISION = Family(
    name="vision",
    ops=ops_of("vision"),  # ("vision",)
    label="vision attention",
    reference="kernel_oracle.reference.vision",
    problem="kernel_oracle.harness.problems:VisionProblem",
    strategies="kernel_oracle.fuzz.strategies:vision_problems",
    cases="kernel_oracle.fuzz.strategies:vision_cases",
    locator="kernel_oracle.harness.locators:vision_locator",
    declined="kernel_oracle.harness.declined:vision_declined",
    kernels="kernel_oracle.kernels.vision",
    benchmark="kernel_oracle.benchmarks.bench_vision",
)
