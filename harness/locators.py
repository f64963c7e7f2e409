"""Where a failing element lies (token, head, segment, slot) and what the reference expected there.

:func:`reference.tolerance.compare` names the worst element by its index; a reader wants the batch's
own words for it (``Where: token=14, head=1, segment=0, slot=1``) and the number the reference gave
there next to the target's (``base_output[14, 1, 6] = 0.8731 (float64 reference, allowed +-2e-06);
got -1.1184``), so a repro says what was expected in numbers, not just "a result".
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["expected_at"]


def expected_at(actual: torch.Tensor, value: Optional[torch.Tensor], cmp, call) -> str:
    """What a mismatch expected, in numbers: the reference at the worst element, its allowance and what
    the target gave there (``base_output[3, 0, 7] = 0.8731 (float64 reference, allowed +-2.1e-06); got
    -1.1184``)."""
    index = tuple(int(i) for i in cmp.worst_index)
    if not index or value is None:
        return "a result"
    name = "base_output" if call.inplace is not None else "output"
    ref = float(value[index])
    got = float(actual[index])
    at = f"{name}[{', '.join(str(i) for i in index)}]"
    return f"{at} = {ref:.6g} (float64 reference, allowed +-{cmp.allowed:.3g}); got {got:.6g}"
