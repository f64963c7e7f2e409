"""A toy kernel family for the registry's tests: the vision family's reference, problem and problem strategy
under another name, each part a loader (Note [Families registry] in harness/family.py)."""

from __future__ import annotations

from kernel_oracle.harness.family import Family


def vision_reference():
    from kernel_oracle.reference import vision

    return vision


def vision_problem():
    from kernel_oracle.harness.problem_vision import VisionProblem

    return VisionProblem


def vision_problems():
    from kernel_oracle.fuzz.strategies_vision import vision_problems

    return vision_problems


def toy_family(name: str = "toy", ops: tuple = ("toy_op",), **fields) -> Family:
    """A record of ``name`` with ``ops`` and the vision family's parts; ``fields`` replace or add to them."""
    return Family(**{"name": name, "ops": ops, "label": "toy", "reference": vision_reference,
                     "problem": vision_problem, "strategies": vision_problems, **fields})
