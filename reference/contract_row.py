"""One row of the contract table (Note [Contracts] in :mod:`reference.contracts`): its fields and its message.

The table itself (:data:`reference.contracts.CONTRACTS`) gathers the rows its families register (Note
[Reference tables] in :mod:`reference.registry`); each family builds its rows in a module of its own
(:mod:`reference.contracts_csgmv`) from this module, which imports nothing of the table.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

__all__ = ["Contract", "ContractError"]


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
        if not isinstance(self.api, str) or not self.api.isidentifier():
            raise ContractError(f"contract {self.id!r}: api={self.api!r}; pass the name of the family whose entry "
                                f"points raise it, such as 'lora'")
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
