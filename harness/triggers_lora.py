"""The known-issue triggers of LoRA defects (Note [Known-issue triggers] in :mod:`harness.triggers`), which the
``lora`` record names (its ``triggers``).  Standard library only."""

from __future__ import annotations

from typing import Mapping

__all__ = ["LORA_TRIGGERS"]


def _lora_rank_above_buffer(case: Mapping) -> bool:
    """A non-empty segment routes a slot whose ``lora_ranks`` entry exceeds the buffer rank ``R``
    (the kv_b contract caps it at R; SGLang's memory pool never holds such a rank)."""
    p = case.get("problem") or {}
    ranks, R = list(p.get("lora_ranks") or ()), int(p.get("R") or 0)
    for length, slot in zip(p.get("seg_lens") or (), p.get("weight_indices") or ()):
        if int(length) > 0 and 0 <= int(slot) < len(ranks) and int(ranks[int(slot)]) > R:
            return True
    return False


LORA_TRIGGERS = {"lora_rank_above_buffer": _lora_rank_above_buffer}
