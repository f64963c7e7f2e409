"""Where a failing element lies: the token, head, segment and slot of an output index.

A mismatch message ends with its ``Where:`` line (STYLE.md's failure layout): the comparison
(:func:`reference.tolerance.compare`) is given a ``locate(index)`` function built here from the call's
own metadata, read leniently (a malformed batch still locates what it can).
"""

from __future__ import annotations

import copy

import torch

from kernel_oracle.reference.lora_routing import route_lora_batch

from kernel_oracle.harness.problems import batch_info_of

__all__ = ["lora_locator", "vision_locator"]


def lora_locator(call):
    """``(locate, route)``: the locator of a LoRA step's output index, and the call's routing (None when
    even lenient routing fails)."""
    bi = batch_info_of(call)
    try:
        route = route_lora_batch(bi, num_rows=call.args[0].shape[0], num_slots=int(bi.lora_ranks.numel()),
                                 max_rank=10**9, device=torch.device("cpu"), strict=False)
    except Exception:  # noqa: BLE001 - a batch even lenient routing refuses locates tokens only
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
    """The locator of a vision output index (its sequence by the output offsets)."""
    from kernel_oracle.reference.vision_metadata import resolve_flashinfer_cudnn

    c = copy.deepcopy(call)
    try:
        plan = resolve_flashinfer_cudnn(*c.args[:4], c.kwargs.get("softmax_scale"), c.kwargs.get("forward_metadata"),
                                        strict=False, **{k: v for k, v in c.kwargs.items()
                                                         if k not in ("softmax_scale", "forward_metadata")})
    except Exception:  # noqa: BLE001 - metadata that cannot be resolved locates tokens only
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
    return locate
