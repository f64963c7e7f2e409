"""Plain-data problem descriptions and their materialisation into tensors.

Note [Problems]
---------------
A *problem* is a small frozen dataclass of ints, tuples and strings: everything needed to rebuild
one call bit-for-bit (the tensors come from ``seed``).  Keeping cases as data (not tensors) is what
lets Hypothesis shrink them, lets a finding be saved as one JSON line, and lets a repro command
rebuild it anywhere.  Each family's problem class lives in a file of its own
(:mod:`harness.problem_lora`, :mod:`harness.problem_vision`, :mod:`harness.problem_csgmv`), and its
``materialize`` builds the call's values by parameter name; the op's :class:`~reference.signatures.Signature` orders them into a
:class:`Call` (positional args, kwargs, and the index of the argument updated in place, or ``None``
for ops returning a fresh output).  :func:`batch_info_of` and :meth:`Call.arg` find an argument by
its part or name, so nothing downstream counts positions.

Data is random normal scaled so that outputs stay O(1) (never zeros: zeros hide unwritten outputs).

Note [Where data is generated]
------------------------------
The tensors are drawn by a ``torch.Generator`` *on the device they are built for* (a GPU case never
generates on the host and copies).  On the CPU this is one host generator seeded with the problem's
seed, in a documented order (saved findings replay bit-identically); on a GPU it is the device's own
Philox generator, so the same seed gives other values there.  :func:`generation_scheme` names the
scheme of a device (records and saved cases carry it); a finding is replayed from its saved tensors
(``kernel-oracle repro``), or rebuilt from its seed on the kind of device it was found on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import torch

from kernel_oracle.reference.signatures import Signature, signature_of_entry

from kernel_oracle.harness.family import family_names
from kernel_oracle.harness.problem_dict import problem_from_dict, problem_to_dict  # noqa: F401 (re-exported)

__all__ = ["Call", "DTYPES", "batch_info_of", "dtype_of", "generation_scheme", "materialize", "problem_from_dict",
           "problem_to_dict"]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def dtype_of(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype={name!r} is unknown; the only valid values are {sorted(DTYPES)}") from None


@dataclass
class Call:
    """Arguments in the entry point's order; ``inplace`` is the index of the updated argument.

    Build one with :meth:`bind` (from values by parameter name); the entry name identifies the
    op's :class:`~reference.signatures.Signature` (:attr:`signature`)."""

    entry: str
    args: tuple
    kwargs: dict
    inplace: Optional[int] = None

    @classmethod
    def bind(cls, sig: Signature, values: Mapping[str, object], kwargs: Optional[dict] = None) -> "Call":
        """The call of ``sig`` with positional ``values`` (name -> value) and keyword ``kwargs``."""
        unknown = [k for k in (kwargs or {}) if k not in sig.keywords]
        if unknown:
            raise ValueError(f"{sig.op} takes no keyword {unknown}; its keywords are {list(sig.keywords)}")
        return cls(sig.entry, sig.bind(values), dict(kwargs or {}), sig.inplace_index)

    @property
    def signature(self) -> Signature:
        return signature_of_entry(self.entry)

    def arg(self, name: str):
        """The positional argument ``name``, or the keyword ``name`` (None when not passed)."""
        sig = self.signature
        if name in sig.params:
            return self.args[sig.index(name)]
        if name in sig.keywords:
            return self.kwargs.get(name)
        raise ValueError(f"{sig.op} has no parameter {name!r}; it has {list(sig.params + sig.keywords)}")

    def set_arg(self, name: str, value) -> None:
        """Replace the positional argument ``name`` (the tuple is rebuilt), or set the keyword ``name``."""
        sig = self.signature
        if name in sig.params:
            i = sig.index(name)
            self.args = self.args[:i] + (value,) + self.args[i + 1:]
        elif name in sig.keywords:
            self.kwargs[name] = value
        else:
            raise ValueError(f"{sig.op} has no parameter {name!r}; it has {list(sig.params + sig.keywords)}")


def batch_info_of(call: Call):
    """The LoRA batch info of ``call`` (its signature's ``batch_info`` argument)."""
    sig = call.signature
    if sig.batch_info is None:
        raise ValueError(f"{sig.op} ({sig.family}) takes no LoRA batch info")
    return call.args[sig.index(sig.batch_info)]


# Note [Where data is generated]: the scheme of each device type (a new scheme gets a new name)
GENERATION_SCHEMES = {"cpu": "torch.Generator(cpu)/v1", "cuda": "torch.Generator(cuda)/v1"}


def generation_scheme(device: str | torch.device = "cpu") -> str:
    """The name of the scheme that draws a problem's tensors on ``device`` (Note [Where data is generated])."""
    kind = torch.device(device).type
    try:
        return GENERATION_SCHEMES[kind]
    except KeyError:
        raise ValueError(f"device={str(device)!r} is unsupported; the only valid device types are "
                         f"{sorted(GENERATION_SCHEMES)}") from None


def _generator(seed: int, device: str | torch.device) -> torch.Generator:
    """A generator on ``device`` seeded with ``seed`` (the CPU one for the CPU: bit-identical to before)."""
    generation_scheme(device)  # refuses a device type without a scheme
    dev = torch.device(device)
    gen = torch.Generator() if dev.type == "cpu" else torch.Generator(device=dev)
    return gen.manual_seed(seed)


def _randn(gen: torch.Generator, shape, dtype, device, scale=1.0) -> torch.Tensor:
    """Normal values drawn in fp32 on the generator's device, scaled, then cast to ``dtype``."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=gen.device) * scale
    return t.to(dtype)


def materialize(problem, device: str | torch.device = "cpu", metadata_helper=None) -> Call:
    """The call of ``problem`` on ``device`` (its family's ``materialize``); ``metadata_helper``: a target's own
    metadata helper (a vision target's: :func:`harness.problem_vision.materialize_vision`)."""
    if not callable(getattr(problem, "materialize", None)):
        raise TypeError(f"Expected a problem of a registered family ({', '.join(family_names())}) but got "
                        f"{type(problem).__name__}")
    return problem.materialize(device, metadata_helper)
