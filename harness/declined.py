"""Which of a target's declines a LoRA or vision case uses: the cases a campaign never gives that target.

A target declines what its code path does not have (``Target.declines``, Note [Targets] in
:mod:`harness.targets`), and a campaign's strategies never draw it (:mod:`fuzz.strategies`).  A case that
comes from elsewhere -- ``repro --case-json``, a corpus entry, a finding replayed on another release -- is
checked against the same declines before it runs (Note [Cases outside a campaign] in
:mod:`fuzz.isolated`): each family's record names its function (``Family.declined``), these two for
LoRA and vision, :func:`kernel_oracle.harness.mutations_csgmv.csgmv_declined` for csgmv.

Standard library only.
"""

from __future__ import annotations

from kernel_oracle.harness.features import declined_in

__all__ = ["lora_declined", "vision_declined"]


def lora_declined(problem, mutation, declines) -> tuple[str, ...]:
    """``("lora.missing_max_len",)`` when a target declines that contract and the case can expect it: a
    batch without ``max_len`` or ``seg_lens``, or an upstream-contract mutation (they drop both); a
    declining target is given batches with both and no such mutation (``fuzz.strategies.lora_cases``)."""
    if "lora.missing_max_len" not in declines:
        return ()
    lengths_dropped = not (problem.with_max_len and problem.with_seg_lens)
    return ("lora.missing_max_len",) if lengths_dropped or (mutation is not None and mutation.category == "upstream") \
        else ()


def vision_declined(problem, mutation, declines) -> tuple[str, ...]:
    """The features of SGLang's vision call in ``declines`` the problem uses (:func:`harness.features.declined_in`)."""
    return tuple(declined_in(problem, declines))
