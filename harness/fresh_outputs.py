"""NaN in every uninitialised floating tensor a target allocates during one call.

Note [Poisoning code we do not own]
-----------------------------------
An output that a kernel allocates itself with ``torch.empty`` holds whatever the allocator hands
back: often the freed block of a tensor of the same size, and on a second call of the same batch
that can be the *right answer* left by an earlier call (a kernel that skips rows then passes by
luck, depending on test order). Our kernels fill their fresh outputs with NaN under
``LaunchOptions.poison_outputs`` (a target's ``poison`` hook); for code we do not own (an SGLang
release's kernel file, a user's module) :func:`nan_filled_allocations` does the same from outside:
while the call runs, ``torch.empty``, ``torch.empty_like``, ``torch.empty_strided`` and
``Tensor.new_empty`` return floating (and complex) tensors filled with NaN; integer and bool
tensors are left as allocated (no value is "impossible" there).  A row the kernel should have
written and did not is then NaN, never a stale copy of the expected value, so the judge sees it.

Only uninitialised allocations change: ``torch.zeros``, ``torch.full`` and friends keep their
values, and a kernel that writes before it reads (every correct use of ``empty``) computes the same
numbers.  The patch is per call, restored in ``finally``; the campaign's worker runs one case at a
time, so no other thread sees it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch

__all__ = ["nan_filled_allocations"]

_FACTORIES = ("empty", "empty_like", "empty_strided")


def _poisoned(fn):
    @functools.wraps(fn)
    def allocate(*args, **kwargs):
        t = fn(*args, **kwargs)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() \
                and t.device.type != "meta":
            with torch.no_grad():
                t.fill_(float("nan"))
        return t

    return allocate


@contextlib.contextmanager
def nan_filled_allocations() -> Iterator[None]:
    """Within the block, fresh ``empty`` floating tensors are NaN (Note [Poisoning code we do not own])."""
    saved = {name: getattr(torch, name) for name in _FACTORIES}
    saved_method = torch.Tensor.new_empty
    try:
        for name, fn in saved.items():
            setattr(torch, name, _poisoned(fn))
        torch.Tensor.new_empty = _poisoned(saved_method)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
        torch.Tensor.new_empty = saved_method
