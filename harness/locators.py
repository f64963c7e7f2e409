"""Where a failing element lies (token, head, segment, slot) and what the reference expected there.

:func:`reference.tolerance.compare` names the worst element by its index; a reader wants the batch's
own words for it (``Where: token=14, head=1, segment=0, slot=1``) and the number the reference gave
there next to the target's (``base_output[14, 1, 6] = 0.8731 (float64 reference, allowed +-2e-06);
got -1.1184``), so a repro says what was expected in numbers, not just "a result".
"""

from __future__ import annotations

import copy
from typing import Optional

import torch

from kernel_oracle.harness.problems import batch_info_of
from kernel_oracle.reference.lora_routing import route_lora_batch

__all__ = ["expected_at", "lora_locator", "vision_locator"]


def lora_locator(call):
    """``(locate, route)`` of a LoRA call: ``locate(index)`` names the token, head, segment and slot of an
    output index; ``route`` is the call's routing (None when its metadata has none to give)."""
    bi = batch_info_of(call)
    try:
        route = route_lora_batch(bi, num_rows=call.args[0].shape[0], num_slots=int(bi.lora_ranks.numel()),
                                 max_rank=10**9, device=torch.device("cpu"), strict=False)
    except Exception:  # noqa: BLE001 - malformed metadata: no routing to name
        route = None

    def locate(index):
        t, h = int(index[0]), int(index[1])
        where = {"token": t, "head": h, "segment": None, "slot": None}
        if route is not None:
            hit = torch.nonzero(route.rows == t).flatten()
            if hit.numel():
                where["segment"] = int(route.segment[hit[0]])
                where["slot"] = int(route.slot[hit[0]])
        return where
    return locate, route


def vision_locator(call):
    """``(locate, None)`` of a vision call: ``locate(index)`` names the token, head and sequence (as ``segment``) of
    an output index; a vision call has no routing."""
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    c = copy.deepcopy(call)
    try:
        plan = resolve_flashinfer_cudnn(*c.args[:4], c.kwargs.get("softmax_scale"), c.kwargs.get("forward_metadata"),
                                        strict=False, **{k: v for k, v in c.kwargs.items()
                                                         if k not in ("softmax_scale", "forward_metadata")})
    except Exception:  # noqa: BLE001 - malformed metadata: no plan to name
        plan = None
    four_d = call.args[0].dim() == 4

    def locate(index):
        if four_d:
            t = int(index[0]) * call.args[0].shape[1] + int(index[1])
            h = int(index[2])
        else:
            t, h = int(index[0]), int(index[1])
        where = {"token": t, "head": h, "segment": None, "slot": None}
        if plan is not None:
            for b in range(plan.num_sequences):
                o, n = int(plan.o_start[b]), int(plan.lengths[b])
                if n > 0 and o <= t < o + n:
                    where["segment"] = b
                    break
        return where
    return locate, None


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
