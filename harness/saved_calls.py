"""A saved call moved to a device: the tensors of a case file, which travel to a worker on the CPU."""

from __future__ import annotations

import copy
import dataclasses

import torch

__all__ = ["call_on"]


def call_on(call, device):
    """``call`` with every tensor on ``device`` (arguments, lists, metadata objects' fields), views kept
    views of one moved storage; ``call`` itself where everything is there already."""
    device, memo = torch.device(device), {}

    def moved(v):
        if isinstance(v, torch.Tensor):
            if v.device.type == device.type and (device.index is None or v.device.index == device.index):
                return v
            key = v.untyped_storage().data_ptr(), v.untyped_storage().nbytes(), str(v.device)
            if key not in memo:
                memo[key] = v.untyped_storage().to(device=device)
            fresh = torch.empty(0, dtype=v.dtype, device=device)
            return fresh.set_(memo[key], v.storage_offset(), v.size(), v.stride())
        if isinstance(v, (list, tuple)):
            return type(v)(moved(x) for x in v)
        fields = getattr(v, "__dict__", None)
        if isinstance(fields, dict) and not isinstance(v, type):
            new = copy.copy(v)
            for k, x in fields.items():
                setattr(new, k, moved(x))
            return new
        return v

    return dataclasses.replace(call, args=tuple(moved(a) for a in call.args),
                               kwargs={k: moved(v) for k, v in call.kwargs.items()})
