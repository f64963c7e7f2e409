"""One row of the contract table (Note [Contracts] in :mod:`reference.contracts`): its fields and its message.

The table itself (:data:`reference.contracts.CONTRACTS`) gathers the rows; a family whose rows live in a
module of their own (:mod:`reference.contracts_csgmv`) builds them from this module, which imports nothing of
the table.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

__all__ = ["APIS", "Contract", "ContractError"]

APIS = ("lora", "vision", "csgmv")


class ContractError(ValueError):
    """Raised when the contract table itself is used wrongly (unknown id, missing field)."""


@dataclass(frozen=True)
class Contract:
    """One row of the contract table.

    ``template`` is a :meth:`str.format` template; its fields are the keyword arguments that
    :func:`raise_contract` needs.  Upstream rows with no fields are the literal upstream text.
    """

    id: str
    exc_type: type
    template: str
    api: str
    origin: str  # "upstream" | "strict"
    order: int | None = None

    def __post_init__(self) -> None:
        if self.origin not in ("upstream", "strict"):
            raise ContractError(f"contract {self.id!r}: origin must be 'upstream' or 'strict', got {self.origin!r}")
        if self.api not in APIS:
            raise ContractError(f"contract {self.id!r}: api must be one of {list(APIS)}, got {self.api!r}")
        if self.origin == "strict" and self.exc_type is not ValueError:
            raise ContractError(f"contract {self.id!r}: strict validation raises ValueError, not {self.exc_type.__name__}")

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.template) if name)

    def message(self, **fields: object) -> str:
        missing = set(self.fields) - set(fields)
        extra = set(fields) - set(self.fields)
        if missing or extra:
            raise ContractError(
                f"contract {self.id!r} takes fields {sorted(self.fields)}; "
                f"missing={sorted(missing)} unexpected={sorted(extra)}"
            )
        return self.template.format(**fields)
