"""The error-contract table: every error the suite's APIs raise, in one place.

Note [Contracts]
----------------
Kernel engineers compare error *text*, so a message must never be written twice: code raises
through :func:`raise_contract` and tests assert through :func:`expected_message`, both reading the
same :data:`CONTRACTS` entry.  Each entry says

* ``origin``: ``"upstream"`` (SGLang's exact text and type; never edited) or ``"strict"`` (our own
  validation, only for inputs that upstream would silently accept: see docs/semantics.md#strict-validation);
* ``api``: the family whose entry points raise it (``"lora"`` = every kv_b LoRA step, ``"vision"`` = the
  ``flashinfer_cudnn`` forward, ``"csgmv"`` = the chunked SGMV shrink and expand); each family's rows live
  in a module of its own (:mod:`reference.contracts_lora`, :mod:`reference.contracts_vision`,
  :mod:`reference.contracts_csgmv`), and its record registers them with the table (Note [Reference tables]
  in :mod:`reference.registry`);
* ``order``: for upstream vision contracts, the position in SGLang's resolution order.

Strict messages name the field, the offending index and value, and suggest the fix (Hypothesis /
pytest-benchmark style: "pass X rather than Y").
"""

from __future__ import annotations

from kernel_oracle.reference.contract_row import Contract, ContractError

__all__ = [
    "Contract",
    "CONTRACTS",
    "ContractError",
    "contract",
    "expected_message",
    "raise_contract",
    "upstream_contracts",
    "strict_contracts",
]


# contract id -> its row, filled by registration (Note [Reference tables] in reference/registry.py): each
# family's rows from its record, in registration order
CONTRACTS: dict[str, Contract] = {}


def contract(contract_id: str) -> Contract:
    try:
        return CONTRACTS[contract_id]
    except KeyError:
        raise ContractError(
            f"unknown contract id {contract_id!r}; the only valid ids are {sorted(CONTRACTS)}"
        ) from None


def expected_message(contract_id: str, **fields: object) -> str:
    """The exact text that :func:`raise_contract` produces for these fields."""
    return contract(contract_id).message(**fields)


def raise_contract(contract_id: str, **fields: object) -> None:
    """Raise the contract's exception type with its exact message. Never returns."""
    row = contract(contract_id)
    err = row.exc_type(row.message(**fields))
    err.contract_id = contract_id  # type: ignore[attr-defined]
    raise err


def upstream_contracts(api: str | None = None) -> list[Contract]:
    return [c for c in CONTRACTS.values() if c.origin == "upstream" and (api is None or c.api == api)]


def strict_contracts(api: str | None = None) -> list[Contract]:
    return [c for c in CONTRACTS.values() if c.origin == "strict" and (api is None or c.api == api)]
