"""The reference layer's tables of each kernel family: its signature rows, its contract rows and its tolerance
multiplier, filled by registration.

Note [Reference tables]
-----------------------
The reference and our kernels bind a call by its op's row of :data:`reference.signatures.SIGNATURES`, raise a
contract error through its row of :data:`reference.contracts.CONTRACTS`, and the tolerance rule
(:func:`reference.tolerance.compare`) reads the family's multiplier ``k`` in :data:`ERROR_MULTIPLIER`.  None of
these tables names a family: a family's rows are data of its record (``Family.signatures``,
``Family.contract_rows``, ``Family.error_multiplier``: :mod:`kernel_oracle.harness.family`), and registering
the record (``register_family``) hands them to :func:`register_reference`, since the reference layer cannot
read the families registry above it.  The package root registers the built-in records before any module of
the package runs, so the tables are full wherever they are read.  :func:`unregister_reference` takes a
family's rows out again (a test's family, a plug-in replaced).

Registration checks every row before it changes anything: each signature row and contract row is the
family's (``family`` / ``api``), no op, entry point or contract id is another's, and ``k`` is a positive
number.  Standard library only: the command line reads the signature table without torch.
"""

from __future__ import annotations

import math
from typing import Optional

from kernel_oracle.reference.contract_row import Contract
from kernel_oracle.reference.contracts import CONTRACTS
from kernel_oracle.reference.signatures import FAMILIES, SIGNATURES, Signature

__all__ = ["ERROR_MULTIPLIER", "register_reference", "unregister_reference"]

# K of the tolerance rule, per kernel family (FlashAttention uses 2 for the forward output); none for a family
# whose record names its own comparison
ERROR_MULTIPLIER: dict[str, float] = {}


def register_reference(family: str, *, signatures: tuple = (), contract_rows: tuple = (),
                       error_multiplier: Optional[float] = None) -> None:
    """Add ``family``'s signature rows, contract rows and multiplier ``k`` to the tables (Note [Reference
    tables]); a ``ValueError`` naming the row and changing nothing when a row is not the family's, names
    another's op, entry point or contract id, or ``k`` is no positive number."""
    if family in FAMILIES:
        raise ValueError(f"family {family!r} already has reference tables; unregister_reference({family!r}) first")
    rows, contract_rows = tuple(signatures), tuple(contract_rows)
    for row in rows:
        if not isinstance(row, Signature) or row.family != family:
            raise ValueError(f"signature row {row!r} is not a Signature of family {family!r}")
    taken = {**{s.op: s.family for s in SIGNATURES.values()}, **{s.entry: s.family for s in SIGNATURES.values()}}
    for name in [n for row in rows for n in (row.op, row.entry)]:
        if name in taken or sum(name in (r.op, r.entry) for r in rows) > 1:
            raise ValueError(f"signature row {name!r} of family {family!r}: family {taken.get(name, family)!r} "
                             f"already has an op or entry point of that name")
    for row in contract_rows:
        if not isinstance(row, Contract) or row.api != family:
            raise ValueError(f"contract row {row!r} is not a Contract of family {family!r} (its api)")
        if row.id in CONTRACTS or sum(r.id == row.id for r in contract_rows) > 1:
            raise ValueError(f"duplicate contract id {row.id!r}")
    if error_multiplier is not None and (isinstance(error_multiplier, bool) or not isinstance(error_multiplier, (int, float))
                                         or not math.isfinite(error_multiplier) or error_multiplier <= 0):
        raise ValueError(f"error_multiplier={error_multiplier!r} of family {family!r}; pass a positive number "
                         f"(the tolerance rule's k) or None")
    FAMILIES.append(family)
    SIGNATURES.update({row.op: row for row in rows})
    CONTRACTS.update({row.id: row for row in contract_rows})
    if error_multiplier is not None:
        ERROR_MULTIPLIER[family] = float(error_multiplier)


def unregister_reference(family: str) -> None:
    """Take ``family``'s rows and multiplier out of the tables (none: nothing to do)."""
    if family not in FAMILIES:
        return
    FAMILIES.remove(family)
    for table, key in ((SIGNATURES, lambda row: row.family), (CONTRACTS, lambda row: row.api)):
        for name in [name for name, row in table.items() if key(row) == family]:
            del table[name]
    ERROR_MULTIPLIER.pop(family, None)
