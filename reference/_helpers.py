"""Small private helpers shared by the reference modules."""

from __future__ import annotations

import numbers
from typing import Optional

import torch

from kernel_oracle.reference.contracts import raise_contract


def describe_tensor(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return f"{type(t).__name__} {t!r}"
    return f"{str(t.dtype).replace('torch.', '')} tensor of shape {tuple(t.shape)} on {t.device}"


def describe_layout(t: torch.Tensor) -> str:
    """``describe_tensor`` plus the strides (for layout errors)."""
    return f"{describe_tensor(t)} with strides {tuple(t.stride())}"


def overlap_problem(t: torch.Tensor) -> Optional[str]:
    """Why distinct elements of ``t`` may share memory, or None when they cannot.

    A dimension of size > 1 with stride 0 shares memory outright; otherwise, with the dimensions
    sorted by stride, each stride must pass the extent of all smaller ones (the usual sufficient
    test: every layout torch itself creates by slicing, transposing or permuting passes it)."""
    dims = [(i, n, s) for i, (n, s) in enumerate(zip(t.shape, t.stride())) if n > 1]
    for i, n, s in dims:
        if s == 0:
            return f"dimension {i} (size {n}) has stride 0, so its {n} entries share memory"
    extent = 1
    for i, n, s in sorted(dims, key=lambda d: d[2]):
        if s < extent:
            return (f"dimension {i} (size {n}, stride {s}) steps inside the {extent} elements spanned by the "
                    f"dimensions of smaller stride, so elements overlap")
        extent += s * (n - 1)
    return None


def scale_as_float(name: str, value: object, default: float) -> float:
    """A scale argument as a Python float: a real number or a 1-element tensor; else an error that
    names the argument and its value (TypeError for the wrong kind of object, ValueError for a
    tensor of another size)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"Expected {name} to be a number or a 1-element tensor but got {name}="
                             f"{describe_tensor(value)}; pass one scale, e.g. {name}=float({name}.flatten()[0])")
        return float(value.detach().cpu().reshape(()).item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Expected {name} to be a number, a 1-element tensor or None but got {name}={value!r} "
                        f"({type(value).__name__}); pass a float such as {default:.6g} (the default)")
    return float(value)


def check_metadata_tensor(
    contract_id: str,
    field: str,
    value: object,
    *,
    dtypes: tuple[torch.dtype, ...],
    device: torch.device | None,
    min_numel: int | None = None,
    exact_numel: int | None = None,
    allow_shape: tuple[tuple[int, ...], ...] | None = None,
) -> torch.Tensor:
    """Check a metadata tensor's type, dtype, rank, size and device; raise ``contract_id``.

    The contract's template is ``"{field} must be {expected}, got {got}; {fix}"``.
    """
    names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
    if not isinstance(value, torch.Tensor):
        raise_contract(contract_id, field=field, expected=f"a {names} torch.Tensor",
                       got=describe_tensor(value), fix=f"pass a {names} tensor")
    if value.dtype not in dtypes:
        raise_contract(contract_id, field=field, expected=f"{names}", got=describe_tensor(value),
                       fix=f"pass {field}.to({dtypes[0]})")
    if allow_shape is None and value.dim() != 1:
        raise_contract(contract_id, field=field, expected="1-D", got=describe_tensor(value),
                       fix=f"pass {field}.view(-1)")
    if allow_shape is not None and tuple(value.shape[1:]) not in allow_shape:
        raise_contract(contract_id, field=field, expected=f"of shape (B,) + one of {list(allow_shape)}",
                       got=describe_tensor(value), fix="pass a (B,) or (B,1,1,1) tensor")
    n = value.shape[0] if value.dim() else 1
    if exact_numel is not None and n != exact_numel:
        raise_contract(contract_id, field=field, expected=f"of length {exact_numel}", got=describe_tensor(value),
                       fix=f"pass exactly {exact_numel} entries")
    if min_numel is not None and n < min_numel:
        raise_contract(contract_id, field=field, expected=f"of length at least {min_numel}",
                       got=describe_tensor(value), fix=f"pass at least {min_numel} entries")
    if device is not None and value.device != device:
        raise_contract(contract_id, field=field, expected=f"on {device} (the data's device)",
                       got=describe_tensor(value), fix=f"pass {field}.to('{device}')")
    return value
