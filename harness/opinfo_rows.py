"""The rows of the op database's inputs (Note [OpInfos] in :mod:`harness.opinfo`): a :class:`Sample` (a
plain-data problem and its name) and an :class:`ErrorInput` (a sample broken by mutations, and the exact
error it must raise).  A module of its own so that a family's inputs (:mod:`harness.opinfo_csgmv`) build
rows without importing the database.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

from kernel_oracle.reference.contracts import CONTRACTS, contract

from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problems import Call, materialize

__all__ = ["ErrorInput", "Sample"]


@dataclass
class Sample:
    """A problem (plain data) and a short name for test ids."""

    problem: object
    name: str

    def call(self, device) -> Call:
        return materialize(self.problem, device)


@dataclass(frozen=True)
class ErrorInput:
    """A valid ``sample`` broken by ``mutation`` (one :class:`Mutation`, or several applied in
    order) that must raise ``contract_id`` with ``fields`` (a dict, or a function of the broken
    call for values that depend on its tensors).

    ``runs_without_strict``: with strict validation off the call runs (metadata upstream accepts);
    False for inputs that upstream code answers with an error of its own (wrong data shapes or
    dtypes, metadata on another device)."""

    sample: Sample
    mutation: Mutation | tuple[Mutation, ...]
    contract_id: str
    fields: dict | Callable[[Call], dict] = field(default_factory=dict)
    runs_without_strict: bool = True

    def __post_init__(self) -> None:
        if self.contract_id not in CONTRACTS:
            raise ValueError(f"ErrorInput: contract_id={self.contract_id!r} is not in the contract table")
        family = self.sample.problem.family
        wrong = [m for m in self.mutations if m.family != family]
        if wrong or not self.mutations:
            raise ValueError(f"ErrorInput {self.contract_id}: expected one or more {family} mutations but got "
                             f"mutation={self.mutation!r}")

    @property
    def mutations(self) -> tuple[Mutation, ...]:
        return self.mutation if isinstance(self.mutation, tuple) else (self.mutation,)

    def call(self, device, dtype: Optional[str] = None) -> Call:
        """The broken call (``dtype``: another dtype name for the sample's data)."""
        sample = self.sample
        if dtype is not None:
            sample = Sample(dataclasses.replace(sample.problem, dtype=dtype), sample.name)
        call = sample.call(device)
        for m in self.mutations:
            m.apply(call)
        return call

    def build(self, device, dtype: Optional[str] = None) -> tuple[Call, str]:
        """The broken call and the exact message it must raise."""
        call = self.call(device, dtype)
        fields = self.fields(call) if callable(self.fields) else self.fields
        return call, contract(self.contract_id).message(**fields)

    @property
    def origin(self) -> str:
        return contract(self.contract_id).origin

    @property
    def name(self) -> str:
        """A short id: the contract and the mutation kinds."""
        return f"{self.contract_id}<-{'+'.join(m.kind for m in self.mutations)}"
