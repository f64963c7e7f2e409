"""Our vision kernel's warm-up cases (Note [Warm-up] in :mod:`harness.warmup`), which the ``vision`` record names
(its ``warm_up``): Qwen2-VL-style batches, H=16, head dims 80/64/128."""

from __future__ import annotations

from typing import Sequence

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_vision import VisionProblem

__all__ = ["vision_warm_up_cases"]

# vision batches: (lengths, head dim)
_VISION_BATCHES = (((1024, 77, 256), 80), ((64, 129), 64), ((300,), 128))


def vision_warm_up_cases(ops: Sequence[str], dtypes: Sequence[str]) -> list[Case]:
    """The fixed warm-up cases of the vision op in ``dtypes``, batch by batch."""
    return [Case(VisionProblem(lengths=lengths, H=16, D=head_dim, dtype=dtype, seed=1))
            for lengths, head_dim in _VISION_BATCHES for dtype in dtypes]
