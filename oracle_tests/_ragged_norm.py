"""A small kernel family of the test tree, added the way docs/architecture.md ("Adding a kernel family") says:
RMSNorm over ragged rows.  This module is the family's own file, all of it: its signature and contract rows,
its float64 oracle and drop-in entry point, its plain-data problem, its strategies and mutation kinds, its
OpInfo rows, its independent formulation, its record, and a plain-torch target kind.  It changes no shared
file: :func:`register` reaches the product through the registration points the doc lists, and nothing else.

The op: ``ragged_rms_norm(x, weight, indptr, eps=1e-6)``.  ``x`` (T, D) holds the rows of B segments back to
back (segment b is rows ``indptr[b]:indptr[b+1]``; rows past ``indptr[B]`` belong to no segment), ``weight``
(B, D) one row per segment, ``indptr`` (B + 1,) int32.  Row t of segment b becomes
``x[t] / sqrt(mean(x[t]**2) + eps) * weight[b]``; the rows of no segment are not written (no contract fixes
them).  The one error contract: ``weight`` must have one row per segment.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace

import torch

from kernel_oracle.fuzz.strategies import cases_of
from kernel_oracle.fuzz.targets.registry import register_target
from kernel_oracle.harness.family import Family, register_family
from kernel_oracle.harness.mutations import MutationKinds
from kernel_oracle.harness.opinfo_rows import DTYPE_NAME, FLOATS, ErrorInput, OpInfo, Sample
from kernel_oracle.harness.problems import Call
from kernel_oracle.harness.targets import Target
from kernel_oracle.harness.tiles import unknown_model
from kernel_oracle.reference.contract_row import Contract
from kernel_oracle.reference.contracts import raise_contract
from kernel_oracle.reference.signatures import Signature, signature
from kernel_oracle.reference.tolerance import check_faithful

FAMILY, OP, ENTRY = "ragged_norm", "ragged_rms_norm", "ragged_rms_norm_fwd"
TARGET, BUGGY_TARGET = "ragged-torch", "ragged-torch-last-row"

SIGNATURES = (Signature(OP, FAMILY, ENTRY, "ragged_rms_norm_oracle", ("x", "weight", "indptr"), keywords=("eps",),
                        indptrs="indptr"),)
CONTRACT_ROWS = (Contract("ragged_norm.weight_rows", ValueError,
                          "weight has {got} rows but indptr has {segments} segments; pass one weight row per segment",
                          FAMILY, "upstream"),)


# ---- the reference: the float64 oracle and the drop-in entry point ----------------------------------

@dataclass
class RaggedNormResult:
    """The oracle's result: ``value`` (T, D), ``defined`` (T, D) bool (the rows of a segment)."""

    value: torch.Tensor
    defined: torch.Tensor

    @property
    def baselines(self) -> tuple:
        return (self.value,)


def _segments(x: torch.Tensor, weight: torch.Tensor, indptr: torch.Tensor) -> list[tuple[int, int]]:
    bounds = [int(v) for v in indptr.cpu().tolist()]
    if weight.shape[0] != len(bounds) - 1:
        raise_contract("ragged_norm.weight_rows", got=weight.shape[0], segments=len(bounds) - 1)
    return list(zip(bounds[:-1], bounds[1:]))


def ragged_rms_norm_oracle(x, weight, indptr, eps=1e-6, *, faithful=False, strict=None) -> RaggedNormResult:
    """float64 (``faithful=False``), or the inputs' dtype with fp32 sums (any other mode: no matmul to round)."""
    check_faithful(faithful)
    value = torch.zeros(x.shape, dtype=torch.float64 if faithful is False else x.dtype, device=x.device)
    defined = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    work = torch.float64 if faithful is False else torch.float32
    for b, (start, end) in enumerate(_segments(x, weight, indptr)):
        rows = x[start:end].to(work)
        norm = rows * torch.rsqrt(rows.square().mean(-1, keepdim=True) + eps) * weight[b].to(work)
        value[start:end] = norm.to(value.dtype)
        defined[start:end] = True
    return RaggedNormResult(value, defined)


def ragged_rms_norm_fwd(x, weight, indptr, eps=1e-6, *, strict=None):
    """The drop-in entry point: a fresh output in ``x``'s dtype; rows of no segment are left unwritten."""
    result = ragged_rms_norm_oracle(x, weight, indptr, eps, faithful=True, strict=strict)
    out = torch.empty_like(x)
    out[result.defined] = result.value[result.defined]
    return out


# ---- the independent formulation (a row at a time, from the definition) -----------------------------

def independent(op: str, args: tuple, kwargs=None) -> tuple[torch.Tensor, torch.Tensor]:
    x, weight, indptr = args
    eps = (kwargs or {}).get("eps", 1e-6)
    value = torch.zeros(x.shape, dtype=torch.float64)
    defined = torch.zeros(x.shape, dtype=torch.bool)
    bounds = [int(v) for v in indptr.cpu().tolist()]
    for b in range(len(bounds) - 1):
        for t in range(bounds[b], bounds[b + 1]):
            row = x[t].cpu().double()
            value[t] = row / (row.dot(row) / row.numel() + eps) ** 0.5 * weight[b].cpu().double()
            defined[t] = True
    return value, defined


# ---- the problem, its strategies and its mutation kinds ---------------------------------------------

@dataclass(frozen=True)
class RaggedNormProblem:
    """One call as data: segment ``lengths``, row width ``D``, ``extra_rows`` of no segment."""

    lengths: tuple[int, ...] = (3,)
    D: int = 16
    extra_rows: int = 0
    eps: float = 1e-6
    dtype: str = "float32"
    seed: int = 0
    op: str = field(default=OP, init=False)
    family: str = field(default=FAMILY, init=False)

    def materialize(self, device, metadata_helper=None) -> Call:
        gen = torch.Generator().manual_seed(self.seed)
        dtype = {name: dt for dt, name in DTYPE_NAME.items()}[self.dtype]
        rows = sum(self.lengths) + self.extra_rows
        x = torch.randn(rows, self.D, generator=gen).to(dtype).to(device)
        weight = torch.randn(len(self.lengths), self.D, generator=gen).to(dtype).to(device)
        indptr = torch.tensor([0, *itertools.accumulate(self.lengths)], dtype=torch.int32, device=device)
        return Call.bind(signature(OP), {"x": x, "weight": weight, "indptr": indptr}, {"eps": self.eps})

    def sizes(self) -> tuple[dict, int]:
        return ({"lengths": min(self.lengths, default=0), "D": self.D, "extra_rows": self.extra_rows},
                (sum(self.lengths) + self.extra_rows + len(self.lengths)) * self.D)

    def example_size(self) -> int:
        return sum(self.lengths) * self.D

    def shape_class(self) -> str:
        return "empty" if not any(self.lengths) else "ragged"

    def simplifications(self):
        if len(self.lengths) > 1:
            yield replace(self, lengths=self.lengths[:-1])
        if self.extra_rows:
            yield replace(self, extra_rows=0)

    def feature_variants(self) -> dict:
        return {}


def problems(*, dtypes=("float32",), **_):
    import hypothesis.strategies as st

    return st.builds(RaggedNormProblem, lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple),
                     D=st.sampled_from((8, 16)), extra_rows=st.integers(0, 2), dtype=st.sampled_from(tuple(dtypes)),
                     seed=st.integers(0, 2**16))


def cases(*, ops, dtypes, declines, categories, limits, big, tiles):
    return cases_of(problems(dtypes=dtypes), FAMILY, categories)


def _drop_weight_row(call, index, amount):
    weight = call.arg("weight")
    call.set_arg("weight", weight[:max(0, weight.shape[0] - amount)])


MUTATIONS = MutationKinds({"weight_rows_short": ("upstream", _drop_weight_row)})


def locator(call):
    bounds = [int(v) for v in call.arg("indptr").cpu().tolist()]

    def locate(index):
        row = int(index[0])
        segment = next((b for b in range(len(bounds) - 1) if bounds[b] <= row < bounds[b + 1]), None)
        return {"token": row, "head": None, "segment": segment, "slot": None}
    return locate, None


# ---- the OpInfo row ---------------------------------------------------------------------------------

def _samples(device, dtype):
    for i, lengths in enumerate(((3,), (4, 0, 2), (1, 1, 5))):
        yield Sample(RaggedNormProblem(lengths=lengths, extra_rows=i, dtype=DTYPE_NAME[dtype], seed=i), f"ragged-{i}")


def _errors(device):
    from kernel_oracle.harness.mutations import Mutation

    yield ErrorInput(Sample(RaggedNormProblem(lengths=(2, 3)), "err"), Mutation(FAMILY, "weight_rows_short"),
                     "ragged_norm.weight_rows", dict(got=1, segments=2), runs_without_strict=True)


def _random(op, rng: random.Random, dtype: str) -> RaggedNormProblem:
    return RaggedNormProblem(lengths=tuple(rng.randint(0, 6) for _ in range(rng.randint(1, 3))), D=rng.choice((8, 24)),
                             dtype=dtype, seed=rng.randrange(2**16))


def opinfos() -> tuple:
    return (OpInfo(signature=signature(OP), dtypes=FLOATS, sample_inputs=_samples, exhaustive_inputs=_samples,
                   error_inputs=_errors, contracts=("ragged_norm.weight_rows",), random_inputs=_random),)


# ---- the target kind: plain torch, and the same with a planted bug --------------------------------

def _torch_fwd(x, weight, indptr, eps=1e-6):
    """What a user's plain-torch kernel does: fp32 sums, the weight check in the contract's words."""
    bounds = [int(v) for v in indptr.cpu().tolist()]
    if weight.shape[0] != len(bounds) - 1:
        raise ValueError(f"weight has {weight.shape[0]} rows but indptr has {len(bounds) - 1} segments; pass one "
                         f"weight row per segment")
    out = torch.empty_like(x)
    for b in range(len(bounds) - 1):
        rows = x[bounds[b]:bounds[b + 1]].float()
        out[bounds[b]:bounds[b + 1]] = (rows * torch.rsqrt(rows.square().mean(-1, keepdim=True) + eps)
                                        * weight[b].float()).to(x.dtype)
    return out


def _last_row_skipped(x, weight, indptr, eps=1e-6):
    """The planted bug: each segment's loop stops one row early, so its last row passes through unnormalized."""
    out = _torch_fwd(x, weight, indptr, eps)
    bounds = [int(v) for v in indptr.cpu().tolist()]
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end > start:
            out[end - 1] = x[end - 1]
    return out


def _target(name, fn):
    def factory(spec, device, sources):
        return Target(name, {OP: fn}, precision="ieee", strict=True,
                      tiles={FAMILY: unknown_model("plain torch: whole rows, no blocks")})
    return factory


# ---- the record, and its registration -----------------------------------------------------------

def _this():
    import oracle_tests._ragged_norm as module

    return module


RECORD = Family(
    name=FAMILY, label="ragged RMSNorm", signatures=SIGNATURES, contract_rows=CONTRACT_ROWS, error_multiplier=2.0,
    reference=_this, problem=lambda: RaggedNormProblem, strategies=lambda: problems, cases=lambda: cases,
    locator=lambda: locator, independent=lambda: independent, opinfos=opinfos, mutations=lambda: MUTATIONS,
    by_default=False,
)


def register() -> None:
    """Register the family and its two target kinds (what a plug-in does once)."""
    register_family(RECORD)
    register_target(TARGET, _target(TARGET, _torch_fwd), families=(FAMILY,))
    register_target(BUGGY_TARGET, _target(BUGGY_TARGET, _last_row_skipped), families=(FAMILY,))
