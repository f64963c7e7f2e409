"""Small private helpers shared by the reference modules."""

from __future__ import annotations

import torch

from kernel_oracle.reference.contracts import raise_contract


def describe_tensor(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return f"{type(t).__name__} {t!r}"
    return f"{str(t.dtype).replace('torch.', '')} tensor of shape {tuple(t.shape)} on {t.device}"


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
