"""The entry points the suite checks, as data: one :class:`Signature` per op.

Note [Signatures]
-----------------
Every op (the six kv_b LoRA steps, the vision attention forward and the csgmv shrink and expand) is one row of
:data:`SIGNATURES`, which its family's record holds (``Family.signatures``, registered with the table: Note
[Reference tables] in :mod:`reference.registry`): its name, family, SGLang's entry-point name, the name of its reference oracle,
its positional parameters in SGLang's order and which of them play which part:

* ``inplace``: the parameter updated in place and returned (``base_output`` of LoRA step B and of
  the fused steps); ``None`` for ops returning a fresh output;
* ``batch_info`` (LoRA): the ``LoRABatchInfo`` parameter, and ``routing_weight``: the weight buffer
  whose ``L`` is the slot count and whose ``R`` is the buffer rank (``B_buf (L, H*FULL_K, R)`` or
  ``A_buf (L, R, C)``);
* for csgmv, ``batch_info`` and ``routing_weight`` (``weights``) as for LoRA, and ``indptrs`` the
  ``slice_offsets`` tensor of the expand (integer metadata, no data tensor);
* ``metadata`` (vision): the keyword carrying ``forward_metadata``, and ``indptrs``: the positional
  parameter that carries the packed indptrs on the kwargs path;
* ``sizes``: Python-int parameters (head dims, ``bsz``, ``seq_len``); every other positional
  parameter except the metadata ones is a floating-point data tensor (:attr:`Signature.data`).

The table sits in ``reference`` because the reference's and the kernels' validation
(:func:`reference.lora.validate_call`) binds arguments by it, and kernels depend on ``reference``
only.  Everything above reads it: :mod:`harness.opinfo` (one OpInfo per row), the problems that
materialise calls, the mutations that break them, the targets' entry-point lookup, strategies and
campaigns.  Adding an op is one row of its family's record plus its oracle, its kernel and its OpInfo samples.

The module imports nothing heavy (no torch), and every row checks itself on construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

__all__ = ["FAMILIES", "SIGNATURES", "Signature", "ops_of", "signature", "signature_of_entry"]

# the families with rows, in registration order, and op -> its row: filled by registration (Note [Reference
# tables] in reference/registry.py), each family's rows from its record
FAMILIES: list[str] = []
SIGNATURES: dict[str, "Signature"] = {}


@dataclass(frozen=True)
class Signature:
    """One entry point: ``params`` in SGLang's positional order, ``keywords`` after them."""

    op: str
    family: str
    entry: str
    oracle: str  # the oracle's name in the family's reference module
    params: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    inplace: Optional[str] = None
    batch_info: Optional[str] = None
    routing_weight: Optional[str] = None
    metadata: Optional[str] = None
    indptrs: Optional[str] = None
    sizes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        def fail(why: str) -> None:
            raise ValueError(f"Signature {self.op!r}: {why}")

        if not isinstance(self.family, str) or not self.family.isidentifier():
            fail(f"family={self.family!r}; pass a family's name such as 'lora'")
        if len(set(self.params + self.keywords)) != len(self.params) + len(self.keywords):
            fail(f"a parameter name repeats in params={self.params} keywords={self.keywords}")
        for part in ("inplace", "batch_info", "routing_weight", "indptrs"):
            name = getattr(self, part)
            if name is not None and name not in self.params:
                fail(f"{part}={name!r} is not one of its positional params {self.params}")
        if self.metadata is not None and self.metadata not in self.keywords:
            fail(f"metadata={self.metadata!r} is not one of its keywords {self.keywords}")
        if any(s not in self.params for s in self.sizes):
            fail(f"sizes={self.sizes} must be positional params {self.params}")
        if (self.batch_info is None) != (self.routing_weight is None):
            fail("an op routed by a batch info names both its batch_info and routing_weight parameters")
        if self.metadata is not None and self.indptrs is None:
            fail("an op with a metadata keyword names the indptrs parameter that carries it on the kwargs path")

    def index(self, name: str) -> int:
        """Position of the positional parameter ``name``."""
        try:
            return self.params.index(name)
        except ValueError:
            raise ValueError(f"{self.op} has no positional parameter {name!r}; it has {list(self.params)}") from None

    @property
    def inplace_index(self) -> Optional[int]:
        return None if self.inplace is None else self.index(self.inplace)

    @property
    def data(self) -> tuple[str, ...]:
        """The floating-point data tensors among ``params`` (inputs, weights, ``base_output``)."""
        other = {self.batch_info, self.indptrs, *self.sizes}
        return tuple(p for p in self.params if p not in other)

    def bind(self, values: Mapping[str, object]) -> tuple:
        """The positional arguments in order, from ``values`` (name -> value, exactly ``params``)."""
        missing = [p for p in self.params if p not in values]
        extra = [k for k in values if k not in self.params]
        if missing or extra:
            raise ValueError(f"{self.op} binds exactly {list(self.params)}; missing {missing}, unknown {extra}")
        return tuple(values[p] for p in self.params)


def ops_of(family: str) -> tuple[str, ...]:
    """The ops of ``family``, in table order."""
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is unknown; the only valid values are {list(FAMILIES)}")
    return tuple(op for op, s in SIGNATURES.items() if s.family == family)


def signature(op: str) -> Signature:
    try:
        return SIGNATURES[op]
    except KeyError:
        raise ValueError(f"op={op!r} is unknown; the only valid values are {list(SIGNATURES)}") from None


def signature_of_entry(entry: str) -> Signature:
    found = next((s for s in SIGNATURES.values() if s.entry == entry), None)
    if found is None:
        raise ValueError(f"entry={entry!r} is unknown; the only valid values are "
                         f"{[s.entry for s in SIGNATURES.values()]}")
    return found
