"""One entry of data per operator (PyTorch OpInfo style).

Note [OpInfos]
--------------
Every operator the suite checks is an :class:`OpInfo`: its :class:`~reference.signatures.Signature`
(name, family, SGLang's entry-point name, argument names in order, the in-place argument, where
the batch info or the metadata sits), the reference oracle and drop-in entry point (looked up by
the signature's names), the dtypes, and two generators with one signature,
``(device, dtype) -> Iterator[Sample]``:

* ``sample_inputs``: small, fast, hand-picked edge cases (commented literal tables below) that
  every run uses, CPU interpreter included;
* ``exhaustive_inputs``: realistic shapes, for the GPU or when time allows.

``error_inputs(device)`` yields :class:`ErrorInput` rows: a valid sample, the
:class:`~harness.mutations.Mutation` (or mutations, applied in order) that break it, and the
contract id and fields of the exact error it must raise.  Error inputs are the one way the suite
states an error contract: ``oracle_tests/reference/test_contracts.py``'s ``test_error_inputs`` runs every
row against every selected target that implements strict validation (the reference and our Triton
kernels by default), and the upstream rows against the other targets too; ``kernel-oracle
selfcheck`` runs them against the reference.

The database, :data:`OP_DB`, holds every registered family's rows, in registration order: each record
names its own (``Family.opinfos``: :mod:`harness.opinfo_lora`, :mod:`harness.opinfo_vision`,
:mod:`harness.opinfo_csgmv`), and the database is rebuilt, in place, whenever a family is registered or
removed.  Everything else derives from it: the targets' entry points (:func:`entry_names`,
:data:`FAMILY_OPS`), the campaigns' op names (:data:`FAMILY_OF`; both live views of the families
registry, :mod:`harness.family`), the strategies' LoRA ops and the selfcheck.  Adding an op is one
signature row of its family's record, its oracle and kernel, and its row in the family's ``opinfos``.

An OpInfo checks itself on construction and says why when it is inconsistent.
"""

from __future__ import annotations

from kernel_oracle.harness.family import FAMILY_OF, FAMILY_OPS, families, watch_registry
from kernel_oracle.harness.opinfo_rows import ErrorInput, OpInfo, Sample

__all__ = ["ErrorInput", "FAMILY_OF", "FAMILY_OPS", "OP_DB", "OpInfo", "Sample", "entry_names", "op_info"]

# op -> its OpInfo, every registered family's rows in registration order (rebuilt in place by _rebuild)
OP_DB: dict[str, OpInfo] = {}


def _rebuild() -> None:
    """Fill :data:`OP_DB` from the records' ``opinfos``: each family's rows are its ops, in its record's order."""
    rows: dict[str, OpInfo] = {}
    for family in families():
        infos = tuple(family.resolve("opinfos") or ())
        ours = tuple(info.name for info in infos)
        if infos and (ours != family.ops or any(info.family != family.name for info in infos)):
            raise ValueError(f"family {family.name!r} names OpInfo rows of ops {list(ours)} (families "
                             f"{sorted({info.family for info in infos})}); its ops are {list(family.ops)}: pass one "
                             f"row per op, in that order")
        rows.update({info.name: info for info in infos})
    OP_DB.clear()
    OP_DB.update(rows)


_rebuild()
watch_registry(_rebuild)


def entry_names() -> dict[str, str]:
    """op -> the entry-point name a target module must export (SGLang's names)."""
    return {info.name: info.entry for info in OP_DB.values()}


def op_info(name: str) -> OpInfo:
    try:
        return OP_DB[name]
    except KeyError:
        raise ValueError(f"op={name!r} is unknown; the only valid values are {sorted(OP_DB)}") from None
