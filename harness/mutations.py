"""Metadata mutations as plain data: partial metadata, upstream-contract breakers, malformed metadata.

Note [Mutations]
----------------
A :class:`Mutation` is a small frozen record ``(kind, index, amount)`` applied to a materialised
:class:`~harness.problems.Call`, so a case stays plain data that Hypothesis can shrink and a
finding can store as JSON.  It is the one way the suite breaks a call: the fuzzer's cases, the
error inputs of :class:`harness.opinfo.ErrorInput` (which carry their mutations) and the tests that
compose two breakers all apply mutations.  A mutation finds the argument it changes through the
call's signature (:func:`harness.problems.batch_info_of`, :meth:`~harness.problems.Call.arg`),
never by position.  Each *kind* belongs to one category:

* ``partial``   -- drops optional metadata (``max_len``, ``seg_lens``, ``permutation``,
  ``sequence_lengths``, ``max_seqlen``, ``packed_indptrs``) or passes it as ``None``; the call may
  still be valid, or hit an upstream contract;
* ``upstream``  -- breaks one of SGLang's documented contracts (exact type and text expected);
* ``malformed`` -- breaks one invariant that upstream does *not* check (our strict validation must
  reject it; a target that accepts it has a validation gap).

The expected outcome is never hand-written here: :func:`harness.check.expected_outcome` runs the
reference (the oracle of contracts too) on the mutated call (an error input adds the exact text it
expects).  ``index`` picks a segment / sequence / row (taken modulo the available count, so any int
is valid and shrinks towards 0) and ``amount`` a magnitude (1 to :data:`MAX_AMOUNT`).  A kind that cannot
apply to a call (no segments to break) leaves it unchanged; the reference then simply expects a result.

Each family's kinds are a :class:`MutationKinds` of its own files, which its record names (``Family.mutations``:
:mod:`harness.mutations_lora`, :mod:`harness.mutations_vision`, :mod:`harness.mutations_csgmv`): ``drawn``, the
kinds the fuzzer draws (:func:`kinds`), and ``error_inputs``, kinds only error inputs use (data tensors of the
wrong shape or dtype, metadata on the wrong device, ...; :data:`DATA_KINDS` are those of any family's data
tensors): keeping them out of the drawn table keeps every campaign's draws as they were.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

import torch

from kernel_oracle.harness.family import families, get_family
from kernel_oracle.harness.problems import Call

__all__ = ["CATEGORIES", "DATA_KINDS", "MAX_AMOUNT", "Mutation", "MutationError", "MutationKinds", "kinds"]

CATEGORIES = ("partial", "upstream", "malformed")
# the largest magnitude a mutation takes (the fuzzer draws 1 to 3): it is added to sizes, counts and rows
MAX_AMOUNT = 64


class MutationError(ValueError):
    """A mutation record that names an unknown kind or the wrong family."""


# kind -> (its category, ``f(call, index, amount)`` that applies it in place)
Kinds = Mapping[str, tuple[str, Callable]]


@dataclass(frozen=True)
class MutationKinds:
    """One family's mutation kinds: ``drawn``, the ones the fuzzer draws (in table order), and ``error_inputs``,
    the ones only error inputs use."""

    drawn: Kinds
    error_inputs: Kinds = field(default_factory=dict)

    def __post_init__(self) -> None:
        both = sorted(set(self.drawn) & set(self.error_inputs))
        bad = [k for k, (category, _) in {**self.drawn, **self.error_inputs}.items() if category not in CATEGORIES]
        if both or bad:
            raise MutationError(f"MutationKinds: kinds {both} are both drawn and error inputs' only, kinds {bad} name "
                                f"no category of {list(CATEGORIES)}")

    def of(self, kind: str) -> tuple[str, Callable]:
        return self.drawn[kind] if kind in self.drawn else self.error_inputs[kind]


def _kinds_of(family: str) -> MutationKinds:
    """``family``'s kinds (its record's ``mutations``); :class:`MutationError` naming the families that have some."""
    table = None
    try:
        table = get_family(family).resolve("mutations")
    except ValueError:  # FamilyError: not registered
        pass
    if table is None:
        names = [f.name for f in families() if f.mutations is not None]
        raise MutationError(f"family={family!r} is unknown; the only valid values are {', '.join(names)}")
    return table


@dataclass(frozen=True)
class Mutation:
    """One change to a materialised call: ``kind`` (one of its family's :class:`MutationKinds`),
    ``index`` (a segment / sequence / row, modulo the count) and ``amount`` (>= 1)."""

    family: str
    kind: str
    index: int = 0
    amount: int = 1

    def __post_init__(self) -> None:
        table = _kinds_of(self.family)
        if self.kind not in table.drawn and self.kind not in table.error_inputs:
            raise MutationError(f"kind={self.kind!r} is not a {self.family} mutation; the only valid values are "
                                f"{sorted({*table.drawn, *table.error_inputs})}")
        for name in ("index", "amount"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise MutationError(f"Expected {name} to be an int but got {name}={value!r}")
        if not 1 <= self.amount <= MAX_AMOUNT:  # it sizes tensors and counts (a case read from data is bounded)
            raise MutationError(f"Expected amount from 1 to {MAX_AMOUNT} but got amount={self.amount}")

    @property
    def category(self) -> str:
        return _kinds_of(self.family).of(self.kind)[0]

    def apply(self, call: Call) -> Call:
        """Apply in place (metadata tensors are replaced by modified clones, never edited in place)."""
        _kinds_of(self.family).of(self.kind)[1](call, self.index, self.amount)
        return call

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> "Mutation | None":
        return None if d is None else cls(**d)


# ---- kinds of any family (error inputs only) ---------------------------------------------------

def _data_resized(dim: int):
    """A data tensor (``index`` picks one of the signature's data parameters) with ``amount`` more
    entries along ``dim`` (-2: heads, -1: the last dim)."""
    def m(call, index, amount):
        data = call.signature.data
        name = data[index % len(data)]
        t = call.arg(name)
        shape = list(t.shape)
        shape[dim] += amount
        call.set_arg(name, torch.ones(shape, dtype=t.dtype, device=t.device))
    return m


def _data_int(call, index, amount):
    data = call.signature.data
    name = data[index % len(data)]
    call.set_arg(name, call.arg(name).to(torch.int32))


def _data_stride0(call, index, amount):
    """A data tensor whose rows all alias its first row (``expand``: stride 0 along dim 0)."""
    data = call.signature.data
    name = data[index % len(data)]
    t = call.arg(name)
    call.set_arg(name, t[:1].expand_as(t))


def _data_transposed(call, index, amount):
    """The same values in a buffer laid out with dims 0 and 1 swapped (a transposed view)."""
    data = call.signature.data
    name = data[index % len(data)]
    call.set_arg(name, call.arg(name).transpose(0, 1).contiguous().transpose(0, 1))


# data tensors of any family broken (``index`` picks one of the signature's data parameters): error inputs only
DATA_KINDS: dict[str, tuple[str, Callable]] = {
    "data_heads": ("malformed", _data_resized(-2)),
    "data_last_dim": ("malformed", _data_resized(-1)),
    "data_int": ("malformed", _data_int),
    "data_stride0": ("malformed", _data_stride0),
    "data_transposed": ("malformed", _data_transposed),
}


def kinds(family: str, categories=CATEGORIES) -> list[str]:
    """The fuzzer's mutation kinds of ``family`` in the given categories, in table order (the error inputs'
    own kinds are not drawn)."""
    table = _kinds_of(family)
    bad = [c for c in categories if c not in CATEGORIES]
    if bad:
        raise MutationError(f"categories {bad} are unknown; the only valid values are {list(CATEGORIES)}")
    return [k for k, (cat, _) in table.drawn.items() if cat in categories]
