"""Hypothesis strategies for your own property tests (the public face of :mod:`kernel_oracle.fuzz.strategies` and of each family's strategies).

They draw plain data -- problems and cases, never tensors -- so failures shrink and read as code;
:func:`kernel_oracle.materialize` turns one into tensors on a device::

    from hypothesis import given
    import kernel_oracle
    from kernel_oracle.strategies import lora_problems

    @given(lora_problems(ops=["step_a_q"], limits="tiny"))
    def test_my_step_a_q(problem):
        call = kernel_oracle.materialize(problem, "cuda")
        kernel_oracle.assert_matches(problem.op, my_step_a_q, *call.args, **call.kwargs)

``csgmv_problems(ops=..., dtypes=...)`` draws SGLang's chunked SGMV batches (:class:`CsgmvProblem`).
``cases(family, categories=...)`` adds partial, upstream-contract and malformed metadata (a
:class:`Case` is a problem plus a mutation; ``materialize(case)`` applies it), and
``assert_matches`` then demands the exact contract error where the oracle raises one.
"""

from __future__ import annotations

from kernel_oracle.fuzz.strategies import (LIMITS, InvalidArgument, Limits, cases, malformed_metadata, partial_metadata,
                                           upstream_contract_cases)
from kernel_oracle.fuzz.strategies_csgmv import csgmv_problems
from kernel_oracle.fuzz.strategies_lora import lora_problems
from kernel_oracle.fuzz.strategies_vision import vision_problems
from kernel_oracle.harness.check import Case
from kernel_oracle.harness.problem_csgmv import CsgmvProblem
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problem_vision import VisionProblem

__all__ = ["Case", "CsgmvProblem", "InvalidArgument", "LIMITS", "Limits", "LoRAProblem", "VisionProblem", "cases",
           "csgmv_problems", "lora_problems", "malformed_metadata", "partial_metadata", "upstream_contract_cases",
           "vision_problems"]
