"""The in-place rule for rows no segment routes: they come back bit-identical (docs/semantics.md#kv_b-lora-steps).

One check for the suite's verdict (:func:`kernel_oracle.harness.check.judge`) and for the standalone repro
script (:mod:`kernel_oracle.jobs.repro_script`), which needs only torch: the script's text embeds
:func:`changed_rows` and :func:`changed_rows_message` as they are written here (:data:`SCRIPT_SOURCE`), and its
``untouched`` mask is :func:`untouched_mask`'s, saved when the script is written.
"""

from __future__ import annotations

import inspect

import torch

__all__ = ["SCRIPT_SOURCE", "changed_rows", "changed_rows_message", "untouched_mask", "untouched_rows"]


def untouched_mask(route, num_rows: int) -> torch.Tensor:
    """bool (num_rows,) on the CPU: the rows of an in-place output that ``route`` (``LoRARouting``) leaves
    alone, neither routed nor of unspecified value; none at all when every row's value is unspecified."""
    untouched = torch.ones(num_rows, dtype=torch.bool)
    untouched[route.rows.cpu()] = False
    if route.undefined_rows.numel():
        untouched[route.undefined_rows.cpu()] = False
    if route.all_undefined:
        untouched[:] = False
    return untouched


def untouched_rows(family, call, inplace) -> torch.Tensor | None:
    """:func:`untouched_mask` of ``call``'s in-place output (argument ``inplace``) by ``family``'s routing (its
    locator's route); None when the op has no in-place output or the family no routing to give."""
    locator = family.resolve("locator")
    route = None if inplace is None or locator is None else locator(call)[1]
    return None if route is None else untouched_mask(route, call.args[inplace].shape[0])


def changed_rows(out, before, untouched):
    """The rows marked in ``untouched`` (bool (S,)) whose bits differ between ``out`` and ``before`` (S, ...),
    ascending; compared on ``out``'s device, NaN payloads and signed zeros included."""
    rows = untouched.to(out.device)
    if not bool(rows.any()):
        return []
    n = int(rows.sum())
    a = out[rows].reshape(n, -1).contiguous().view(torch.uint8)
    b = before.to(out.device)[rows].reshape(n, -1).contiguous().view(torch.uint8)
    differ = (a != b).any(dim=1).cpu()
    return [int(r) for r in torch.nonzero(rows.cpu()).flatten()[differ]]


def changed_rows_message(bad):
    """What a target that changed untouched rows ``bad`` did (the first eight rows named)."""
    return f"rows routed by no segment changed (must stay bit-identical): rows {bad[:8]}"


# the repro script's copy of the check (Note [The script is data] there: fixed text, only torch)
SCRIPT_SOURCE = inspect.getsource(changed_rows) + "\n\n" + inspect.getsource(changed_rows_message)
