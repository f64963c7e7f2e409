"""The rows of the op database (Note [OpInfos] in :mod:`harness.opinfo`): an :class:`OpInfo` (one op), a
:class:`Sample` (a plain-data problem and its name) and an :class:`ErrorInput` (a sample broken by mutations,
and the exact error it must raise).  A module of its own so that each family's rows (:mod:`harness.opinfo_lora`,
:mod:`harness.opinfo_vision`, :mod:`harness.opinfo_csgmv`, its record's ``opinfos``) are built without
importing the database.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from kernel_oracle.reference.contracts import CONTRACTS, contract
from kernel_oracle.reference.signatures import Signature

from kernel_oracle.harness.family import get_family
from kernel_oracle.harness.mutations import Mutation
from kernel_oracle.harness.problems import Call, materialize

__all__ = ["DTYPE_NAME", "FLOATS", "ErrorInput", "OpInfo", "Sample"]

# the dtypes every op is checked in, and their names in a problem
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64"}


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


@dataclass(frozen=True)
class OpInfo:
    """One op: its signature, its oracle and reference entry point, dtypes, inputs and error inputs."""

    signature: Signature
    dtypes: tuple[torch.dtype, ...]
    sample_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    exhaustive_inputs: Callable[[str, torch.dtype], Iterator[Sample]]
    error_inputs: Callable[[str], Iterator[ErrorInput]]
    contracts: tuple[str, ...] = field(default=())
    # a random well-formed problem for the selfcheck, ``f(op, rng, dtype name)`` (None: the family's record
    # names its own selfcheck rows)
    random_inputs: Optional[Callable[[str, random.Random, str], object]] = None

    def __post_init__(self) -> None:
        for what in ("oracle", "reference"):
            if not callable(getattr(self, what)):
                raise ValueError(f"OpInfo {self.name!r}: the reference module has no callable {what} "
                                 f"{getattr(self.signature, 'oracle' if what == 'oracle' else 'entry')!r}")
        unknown = [c for c in self.contracts if c not in CONTRACTS]
        if unknown:
            raise ValueError(f"OpInfo {self.name!r} names contracts {unknown} that the contract table lacks")
        wrong = [c for c in self.contracts if CONTRACTS[c].api != self.family]
        if wrong:
            raise ValueError(f"OpInfo {self.name!r} ({self.family}) names contracts of another family: {wrong}")
        if not self.dtypes:
            raise ValueError(f"OpInfo {self.name!r} lists no dtypes")

    @property
    def name(self) -> str:
        return self.signature.op

    @property
    def family(self) -> str:
        return self.signature.family

    @property
    def entry(self) -> str:
        """The entry-point name a target module exports (SGLang's name)."""
        return self.signature.entry

    @property
    def inplace_arg(self) -> Optional[int]:
        """Index of the argument updated in place and returned; None for a fresh output."""
        return self.signature.inplace_index

    @property
    def oracle(self) -> Callable:
        return getattr(get_family(self.family).resolve("reference"), self.signature.oracle, None)

    @property
    def reference(self) -> Callable:
        """The reference's drop-in entry point (SGLang's signature)."""
        return getattr(get_family(self.family).resolve("reference"), self.signature.entry, None)
