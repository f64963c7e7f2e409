"""Private helpers of the reference tests: entry-point lookup and one float64 comparison.

The float64 comparison follows ``assert_close``'s layout (shape and mask first, then values: how
many elements mismatch, the greatest difference with its index), restricted to the defined region.
"""

from __future__ import annotations

import torch


# float64 against float64: two exact formulations differ only by summation order
F64_RTOL = 1e-10
F64_ATOL = 1e-10


def reference_entry(info):
    """The reference's drop-in entry point (SGLang's name) for an OpInfo."""
    return info.reference


def assert_defined_close(actual, actual_defined, expected, expected_defined, *, what: str,
                         rtol: float = F64_RTOL, atol: float = F64_ATOL) -> None:
    """``actual`` (any float dtype) against float64 ``expected`` over the defined region only.

    The two masks must agree exactly: a reference that defines too much or too little is wrong.
    """
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} differs from the independent formulation's {tuple(expected.shape)}")
    a_mask, e_mask = actual_defined.cpu(), expected_defined.cpu()
    if not torch.equal(a_mask, e_mask):
        extra = int((a_mask & ~e_mask).sum())
        missing = int((e_mask & ~a_mask).sum())
        raise AssertionError(f"{what}: defined region differs: {extra} elements defined only by the reference, "
                             f"{missing} only by the independent formulation")
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    diff = torch.where(e_mask, (a - e).abs(), torch.zeros((), dtype=torch.float64))
    diff = torch.where(e_mask & ~torch.isfinite(a), torch.full((), float("inf"), dtype=torch.float64), diff)
    allowed = atol + rtol * e.abs()
    over = e_mask & (diff > allowed)
    if over.any():
        flat = int(torch.argmax(torch.where(e_mask, diff / allowed, torch.zeros((), dtype=torch.float64))))
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
        total = int(e_mask.sum())
        raise AssertionError(
            f"{what}: tensor-likes are not close!\n"
            f"Mismatched elements: {int(over.sum())} / {total} ({100.0 * int(over.sum()) / total:.1f}%)\n"
            f"Greatest absolute difference: {float(diff[idx]):.6g} at index {idx} "
            f"(up to {float(allowed[idx]):.6g} allowed; expected {float(e[idx]):.6g}, got {float(a[idx]):.6g})")
