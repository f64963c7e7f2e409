"""The csgmv family's plain-data problem and how it becomes a call (Note [csgmv problems]).

Note [csgmv problems]
---------------------
A :class:`CsgmvProblem` is one launch of SGLang's chunked SGMV shrink or expand as data: the batch as the
csgmv backend cuts it (``seg_lens`` and ``weight_indices`` per segment in logical order, zero-length ones
allowed; ``lora_ranks`` and ``scalings`` per slot, rank 0 allowed; ``permutation`` logical row -> physical
row of ``x``), the layer (``num_slices`` slices at output columns ``slice_offsets``, input width ``K``,
buffer rank ``R``), the chunk size ``max_len``, ``unrouted_rows`` physical rows no segment names, the
dtype and the seed of the data.  Under ``use_cuda_graph`` the device metadata is padded with zero-length
segments to ``graph_pad_to`` and ``stale_host_ints`` ``(bs, num_segments)`` are the capture-time host ints
(None: the real count).  ``base``: the expand's ``base_output``: ``"buffer"`` (S, OUTPUT_DIM), ``"view"``
(columns 2 .. 2 + OUTPUT_DIM of a wider projection) or ``"none"`` (fresh zeros); ``split_k`` and
``cpu_offsets`` pass the keywords of 0.5.22+ (None / False: not passed).

:func:`materialize_csgmv` draws fresh data from ``seed`` (the scheme of
:func:`kernel_oracle.harness.problems.generation_scheme`): ``x`` (S, K) and ``weights`` (L, num_slices * R,
K) for the shrink; ``x`` (S, num_slices * R), ``weights`` (L, OUTPUT_DIM, R) and ``base_output`` for the
expand.  The shrink's output is a fresh ``torch.empty`` inside the target, NaN-poisoned by the harness
(:mod:`kernel_oracle.harness.fresh_outputs`); a view ``base_output``'s buffer around it is watched for
writes (:mod:`kernel_oracle.harness.view_gaps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

import torch

from kernel_oracle.reference.batch_info import LoRABatchInfo
from kernel_oracle.reference.signatures import signature

from kernel_oracle.harness.problems import Call, _generator, _randn, dtype_of
from kernel_oracle.harness.problem_variants import length_class

__all__ = ["BASES", "CSGMV_OPS", "CsgmvProblem", "csgmv_mismatch", "materialize_csgmv"]

CSGMV_OPS = ("csgmv_shrink", "csgmv_expand")
BASES = ("buffer", "view", "none")


@dataclass(frozen=True)
class CsgmvProblem:
    """One csgmv launch as data (Note [csgmv problems])."""

    op: str
    seg_lens: tuple[int, ...]
    weight_indices: tuple[int, ...]
    lora_ranks: tuple[int, ...]
    scalings: tuple[float, ...]
    permutation: tuple[int, ...]
    num_slices: int = 1
    slice_offsets: tuple[int, ...] = (0, 16)
    K: int = 32
    R: int = 8
    max_len: int = 16
    unrouted_rows: int = 0
    dtype: str = "float32"
    seed: int = 0
    use_cuda_graph: bool = False
    graph_pad_to: Optional[int] = None
    stale_host_ints: Optional[tuple[int, int]] = None
    base: str = "buffer"
    split_k: Optional[int] = None
    cpu_offsets: bool = False
    family: str = field(default="csgmv", init=False)

    def __post_init__(self) -> None:
        """A problem is a batch the csgmv backend could build (Note [csgmv problems]): malformed metadata is a
        case's mutation, never its problem, so nothing here can make a kernel address memory outside a tensor."""
        if self.op not in CSGMV_OPS:
            raise ValueError(f"op={self.op!r}; the only valid values are {list(CSGMV_OPS)}")
        if self.base not in BASES:
            raise ValueError(f"base={self.base!r}; the only valid values are {list(BASES)}")
        if self.num_slices < 1:
            raise ValueError(f"num_slices={self.num_slices}; a layer has 1 or more slices (q, k, v: 3)")
        if len(self.slice_offsets) != self.num_slices + 1:
            raise ValueError(f"slice_offsets={self.slice_offsets} must hold num_slices + 1 = {self.num_slices + 1} "
                             f"bounds")
        if any(lo > hi for lo, hi in zip(self.slice_offsets, self.slice_offsets[1:])):
            raise ValueError(f"slice_offsets={self.slice_offsets} must not decrease: each slice's columns start "
                             f"where the one before ends")
        if not len(self.weight_indices) == len(self.seg_lens):
            raise ValueError(f"weight_indices has {len(self.weight_indices)} slots but seg_lens "
                             f"{len(self.seg_lens)} segments; pass one slot per segment")
        if len(self.scalings) != len(self.lora_ranks):
            raise ValueError(f"scalings has {len(self.scalings)} values but lora_ranks {len(self.lora_ranks)} "
                             f"slots; pass one per slot")
        bad = next(((i, w) for i, w in enumerate(self.weight_indices) if not 0 <= w < len(self.lora_ranks)), None)
        if bad is not None:
            raise ValueError(f"weight_indices[{bad[0]}]={bad[1]} is outside 0..{len(self.lora_ranks) - 1} (the "
                             f"slots of lora_ranks)")
        if len(self.permutation) != sum(self.seg_lens):
            raise ValueError(f"permutation has {len(self.permutation)} rows but the segments {sum(self.seg_lens)}")
        bad = next(((i, r) for i, r in enumerate(self.permutation) if not 0 <= r < self.S), None)
        if bad is not None:
            raise ValueError(f"permutation[{bad[0]}]={bad[1]} is outside 0..{self.S - 1} (the rows of x: the "
                             f"segments' rows and unrouted_rows)")

    @property
    def S(self) -> int:
        """Physical rows of ``x``: the routed ones and the unrouted ones."""
        return sum(self.seg_lens) + self.unrouted_rows

    @property
    def L(self) -> int:
        return len(self.lora_ranks)

    @property
    def output_dim(self) -> int:
        return self.slice_offsets[-1]

    @property
    def max_slice_size(self) -> int:
        o = self.slice_offsets
        return max(hi - lo for lo, hi in zip(o, o[1:]))

    def sizes(self) -> tuple[dict, int, dict]:
        """(size name -> its smallest value, how many elements its tensors hold, count name -> the count):
        the bounds of a problem read from a file (:func:`kernel_oracle.harness.problems.problem_from_dict`)."""
        n = self.num_slices * self.R
        padded = max(len(self.seg_lens), self.graph_pad_to or 0)
        elements = (self.S * (self.K + n + 2 * self.output_dim + 4) + self.L * n * (self.K + self.output_dim)
                    + 2 * padded + max(self.split_k or 1, 1) * self.S * n)
        counts = {"segments (len(seg_lens))": len(self.seg_lens), "graph_pad_to": self.graph_pad_to or 0,
                  "stale_host_ints": max(self.stale_host_ints or (0,)), "max_len": self.max_len,
                  "num_slices": self.num_slices, "split_k": self.split_k or 0}
        return {"seg_lens": min(self.seg_lens, default=0), "unrouted_rows": self.unrouted_rows, "K": self.K,
                "R": self.R, "max_len": self.max_len, "slice_offsets": min(self.slice_offsets, default=0)}, \
            elements, counts

    def simplifications(self) -> Iterator["CsgmvProblem"]:
        """Plainer variants, the most worth keeping first (Note [Minimal examples] in harness/simplify.py):
        eager metadata, a plain ``base_output`` and no keywords, no unrouted rows, rows in order, one slice,
        then each segment dropped."""
        yield replace(self, use_cuda_graph=False, graph_pad_to=None, stale_host_ints=None)
        yield replace(self, base="buffer", split_k=None, cpu_offsets=False)
        yield replace(self, unrouted_rows=0, permutation=_ranked(self.permutation))
        yield replace(self, permutation=tuple(sorted(self.permutation)))
        yield replace(self, num_slices=1, slice_offsets=self.slice_offsets[:2])
        indptr = [0]
        for n in self.seg_lens:
            indptr.append(indptr[-1] + n)
        for b in reversed(range(len(self.seg_lens))):
            if len(self.seg_lens) > 1:
                kept = self.permutation[:indptr[b]] + self.permutation[indptr[b + 1]:]
                yield replace(self, seg_lens=self.seg_lens[:b] + self.seg_lens[b + 1:],
                              weight_indices=self.weight_indices[:b] + self.weight_indices[b + 1:],
                              permutation=_ranked(kept),
                              graph_pad_to=None, use_cuda_graph=False, stale_host_ints=None)

    def feature_variants(self) -> dict:
        """feature of ``harness.simplify.FEATURES`` -> this problem without it (None where it has none)."""
        def without(**changes):
            changed = {k: v for k, v in changes.items() if getattr(self, k) != v}
            return replace(self, **changed) if changed else None

        slot = self.weight_indices[0] if self.weight_indices else 0
        return {"permutation": without(permutation=tuple(sorted(self.permutation))),
                "slot": without(weight_indices=tuple(slot for _ in self.weight_indices)),
                "rank": without(lora_ranks=tuple(self.R for _ in self.lora_ranks)),
                "scaling": without(scalings=tuple(1.0 for _ in self.scalings)),
                "cuda graph": without(use_cuda_graph=False, graph_pad_to=None, stale_host_ints=None)}

    def materialize(self, device="cpu", metadata_helper=None):
        """Its call on ``device``: :func:`materialize_csgmv` (no metadata helper: csgmv takes the batch info)."""
        return materialize_csgmv(self, device)

    def example_size(self) -> int:
        """Its size when the smallest example of a finding is picked: the elements of its tensors."""
        return self.sizes()[1]

    def shape_class(self) -> str:
        """A coarse class for grouping results: ``empty``, ``ragged``, ``long`` (a segment of 1024 rows or more)."""
        return length_class(self.seg_lens)


def _ranked(rows: tuple[int, ...]) -> tuple[int, ...]:
    """``rows`` renumbered 0 .. len - 1 in their order of size (the same relative order, no gaps)."""
    rank = {r: i for i, r in enumerate(sorted(rows))}
    return tuple(rank[r] for r in rows)


def _batch_info(p: CsgmvProblem, device) -> LoRABatchInfo:
    n = len(p.seg_lens)
    pad = max((p.graph_pad_to or n) - n, 0) if p.use_cuda_graph else 0
    indptr = [0]
    for length in (*p.seg_lens, *([0] * pad)):
        indptr.append(indptr[-1] + length)
    bs, num = p.stale_host_ints if (p.use_cuda_graph and p.stale_host_ints is not None) else (n, n)

    def ints(values, dtype=torch.int32):
        return torch.tensor(list(values), dtype=dtype, device=device)

    return LoRABatchInfo(use_cuda_graph=p.use_cuda_graph, bs=bs, num_segments=num, seg_indptr=ints(indptr),
                         weight_indices=ints((*p.weight_indices, *([0] * pad))), lora_ranks=ints(p.lora_ranks),
                         scalings=ints(p.scalings, torch.float32), max_len=p.max_len, seg_lens=None,
                         permutation=ints(p.permutation))


def materialize_csgmv(p: CsgmvProblem, device: str | torch.device = "cpu"):
    """The :class:`~kernel_oracle.harness.problems.Call` of ``p`` on ``device``, fresh data from ``p.seed``
    (Note [csgmv problems]).  An expand into fresh zeros (``base="none"``) returns a new tensor: its call
    has no in-place argument."""
    gen, dt = _generator(p.seed, device), dtype_of(p.dtype)
    sig, n = signature(p.op), p.num_slices * p.R
    bi = _batch_info(p, device)
    if p.op == "csgmv_shrink":
        x, w = _randn(gen, (p.S, p.K), dt, device), _randn(gen, (p.L, n, p.K), dt, device, p.K ** -0.5)
        kwargs = {} if p.split_k is None else {"split_k": p.split_k}
        return Call.bind(sig, {"x": x, "weights": w, "batch_info": bi, "num_slices": p.num_slices}, kwargs)
    x, w = _randn(gen, (p.S, n), dt, device), _randn(gen, (p.L, p.output_dim, p.R), dt, device, p.R ** -0.5)
    base = _randn(gen, (p.S, p.output_dim), dt, device)
    if p.base == "view":
        wide = _randn(gen, (p.S, p.output_dim + 4), dt, device)
        wide[:, 2:2 + p.output_dim] = base
        base = wide[:, 2:2 + p.output_dim]
    offsets = torch.tensor(p.slice_offsets, dtype=torch.int32, device=device)
    kwargs = {"slice_offsets_cpu": offsets.cpu()} if p.cpu_offsets else {}
    call = Call.bind(sig, {"x": x, "weights": w, "batch_info": bi, "slice_offsets": offsets,
                           "max_slice_size": p.max_slice_size, "base_output": None if p.base == "none" else base},
                     kwargs)
    if p.base == "none":
        call.inplace = None
    return call


def csgmv_mismatch(bound: tuple, actual: torch.Tensor, out_dtype: torch.dtype, repro: str = "") -> Optional[str]:
    """None when ``actual`` passes the oracle's bound, else the one-line reason (and ``repro``): the defined
    entries within ``(terms + 2) * unit * magnitude`` (reference/csgmv.py), rows no segment routes within it
    of their ``base_output`` values, and the output in the inputs' dtype.  ``bound``: the oracle's
    ``CsgmvExpected`` and ``True`` or the TF32 mode of a target whose fp32 matmuls run in TF32 (unit 2**-10)."""
    expected, mode = bound
    unit = 2.0 ** -10 if isinstance(mode, str) else None
    if actual.dtype != out_dtype:
        why = f"output dtype {actual.dtype} != expected {out_dtype}"
    else:
        why = expected.mismatch(actual, unit)
    if why is None:
        return None
    return f"output: {why}" + (f"\nReproduce: {repro}" if repro else "")
