"""Float64 oracle of SGLang's chunked SGMV LoRA kernels (``--lora-backend csgmv``, its default backend).

Note [csgmv semantics]
----------------------
SGLang's csgmv backend computes a LoRA delta in two launches (docs/csgmv.md has the per-release
detail).  Tokens are grouped by adapter slot and cut into *segments* of at most ``max_len`` rows
(the chunk size, a power of two: 16, 32 or 128); one program handles one segment (``BLOCK_M =
max_len``), so a segment longer than ``max_len`` is outside the contract.  Shapes:

* ``x`` (S, K): the layer input, one row per token; ``weights`` (L, N, K) with ``N = num_slices * R``:
  the A matrices of the L slots, stacked per slice (q/k/v: 3, gate/up: 2, others 1).
* shrink output (S, N): for each processed segment of slot ``w`` with rank ``r = lora_ranks[w] > 0``,
  the rows ``p = permutation[t]`` (t in ``seg_indptr[b] .. seg_indptr[b+1]``) get
  ``out[p, c] = sum_k x[p, k] * weights[w, c, k]`` for the columns ``c < min(N, r * num_slices)``:
  the slices of a rank-r adapter are packed, slice i at columns ``i*r .. (i+1)*r``.  No scaling
  here.  Every other entry is unwritten (a fresh ``torch.empty``): *undefined*.
* expand: ``x`` (S, num_slices * R) is the shrink output, ``weights`` (L, OUTPUT_DIM, R) the B
  matrices, ``slice_offsets`` (num_slices + 1,) the output columns of each slice (ragged: q wider
  than k and v).  For those rows and each slice i with columns ``lo .. hi``:
  ``out[p, n] += scalings[w] * sum_{k < r'} x[p, i*r' + k] * weights[w, n, k]`` with
  ``r' = min(R, r)``.  ``out`` is ``base_output`` (accumulated in place; it may be a view of a wider
  projection) or fresh zeros (S, OUTPUT_DIM): every entry is defined, rows no segment routes keep
  their value.

Which segments a launch processes: eagerly ``batch_info.num_segments``; under ``use_cuda_graph``
every one of the ``weight_indices.shape[0]`` device segments, because the host ints ``bs``,
``num_segments`` and ``max_len`` are the values the graph was captured with and may be stale for the
replayed batch (the padded tail is zero-length segments, which do nothing).  Zero-length segments
and rank-0 slots do nothing.  A physical row routed more than once is a race upstream: undefined.

The error contracts upstream raises before any launch (exact type and text, the ``csgmv.assert`` and
``csgmv.split_k`` rows of :mod:`reference.contracts_csgmv`): bare ``assert`` on contiguity, ranks and
widths (``AssertionError`` with no text), and from 0.5.22 ``ValueError("split_k must be positive")``.
Metadata the kernels read unchecked (slots, segment bounds and permutation rows out of range, a segment
longer than ``max_len``, ``max_slice_size`` below a slice's width, CPU offsets that disagree with the
device ones, ...) raise the ``csgmv.strict.*`` rows under strict validation (on by default;
Note [csgmv strict validation] in :mod:`reference.csgmv_strict`).  With it off the oracle models what
the kernels do where that is defined: a long segment loses its rows past ``max_len``, slice columns the
grid may not reach are undefined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from kernel_oracle.reference.contracts import contract, raise_contract
from kernel_oracle.reference.csgmv_strict import check_batch_info, check_slices, processed_count
from kernel_oracle.reference.strict import resolve_strict

__all__ = ["CSGMV_CONTRACTS", "CsgmvExpected", "chunked_sgmv_lora_expand_forward", "chunked_sgmv_lora_shrink_forward",
           "csgmv_segments", "expand_reference", "shrink_reference"]

# contract id -> (exception type, exact upstream text): the upstream rows of reference/contracts_csgmv.py
CSGMV_CONTRACTS = {name: (contract(f"csgmv.{row}").exc_type, contract(f"csgmv.{row}").template)
                   for name, row in (("asserts", "assert"), ("split_k", "split_k"))}


@dataclass(frozen=True)
class CsgmvExpected:
    """The oracle's answer for one launch.  ``value``: float64, the output's shape; ``defined``: bool,
    True where the contract fixes the value (compare there only); ``magnitude``: float64, the sum of
    the absolute terms behind each entry (``|x| @ |w|``, plus ``|base|``): the scale of any rounding
    error, so the tolerance is exact arithmetic's bound and needs no tuning."""

    value: torch.Tensor
    defined: torch.Tensor
    magnitude: torch.Tensor
    terms: int  # the longest dot product behind an entry (K for shrink, the rank for expand)

    def mismatch(self, actual: torch.Tensor, unit: Optional[float] = None,
                 allowed: Optional[torch.Tensor] = None) -> Optional[str]:
        """None when ``actual`` agrees over the defined region, else one line saying where and by how much.
        ``unit``: the rounding unit of the arithmetic (default: ``actual.dtype``'s epsilon; pass 2**-10 for
        TF32 matmuls).  Allowed: ``(terms + 2) * unit * magnitude + tiny`` per entry (the worst case of a
        sum of ``terms`` products, the scaling and the cast), or the float64 bound ``allowed`` given (the
        output's shape) where the caller knows the arithmetic more closely."""
        if tuple(actual.shape) != tuple(self.value.shape):
            return f"shape {tuple(actual.shape)} != expected {tuple(self.value.shape)}"
        unit = torch.finfo(actual.dtype).eps if unit is None else unit
        a = actual.detach().to("cpu", torch.float64)
        if allowed is None:
            allowed = (self.terms + 2) * unit * self.magnitude + torch.finfo(actual.dtype).tiny
        bad = self.defined & ~((a - self.value).abs() <= allowed)  # NaN is never within the bound
        if not bool(bad.any()):
            return None
        row, col = (int(i) for i in bad.nonzero()[0])
        rows = sorted(set(bad.nonzero()[:, 0].tolist()))
        return (f"{int(bad.sum())} of {int(self.defined.sum())} defined entries differ; first at row {row}, "
                f"column {col}: got {float(a[row, col])!r}, expected {float(self.value[row, col])!r} "
                f"(allowed {float(allowed[row, col]):.3g}); rows differing: {rows}")


def csgmv_segments(batch_info) -> list[tuple[int, int, int]]:
    """``(start, end, slot)`` of every segment a launch processes (see the Note): eagerly the first
    ``num_segments``, under CUDA graph all ``weight_indices.shape[0]``.  A segment longer than ``max_len``
    (which strict validation rejects) is cut to its first ``max_len`` rows: the program's row tile, the
    rows past it are never computed."""
    slots = [int(v) for v in batch_info.weight_indices.tolist()]
    indptr = [int(v) for v in batch_info.seg_indptr.tolist()]
    tile = int(batch_info.max_len)
    return [(indptr[b], min(indptr[b + 1], indptr[b] + tile), slots[b]) for b in range(processed_count(batch_info))]


def _routed(batch_info, S: int) -> tuple[list[tuple[torch.Tensor, int]], torch.Tensor]:
    """``[(physical rows, slot)]`` of every processed non-empty segment whose slot has a positive rank,
    and the bool (S,) mask of rows routed more than once (a race upstream: undefined)."""
    perm = batch_info.permutation.to("cpu", torch.int64)
    ranks = [int(r) for r in batch_info.lora_ranks.tolist()]
    groups, counts = [], torch.zeros(S, dtype=torch.int64)
    for start, end, slot in csgmv_segments(batch_info):
        if end <= start or ranks[slot] <= 0:
            continue
        rows = perm[start:end]
        if int(rows.min()) < 0 or int(rows.max()) >= S:
            raise ValueError(f"permutation[{start}:{end}] holds rows outside 0..{S - 1}, which the kernels would read "
                             f"and write unchecked: the oracle has no value for that (strict validation names the row)")
        counts.index_add_(0, rows, torch.ones_like(rows))
        groups.append((rows, slot))
    return groups, counts > 1


def _check_split_k(split_k: Optional[int]) -> None:
    if split_k is not None and split_k < 1:
        raise_contract("csgmv.split_k")


def shrink_reference(x: torch.Tensor, weights: torch.Tensor, batch_info, num_slices: int,
                     split_k: Optional[int] = None, *, strict: Optional[bool] = None) -> CsgmvExpected:
    """The oracle of ``chunked_sgmv_lora_shrink_forward(x, weights, batch_info, num_slices, split_k)``.

    ``x`` (S, K) contiguous; ``weights`` (L, num_slices * R, K) contiguous; the result is (S, N).
    ``split_k`` only changes the summation order (fp32 partials, then a reduce): the same value.
    ``strict``: validate the batch info first (Note [csgmv strict validation]; None: the ambient setting)."""
    _check_split_k(split_k)
    if not (x.is_contiguous() and weights.is_contiguous() and x.dim() == 2 and weights.dim() == 3
            and x.shape[-1] == weights.shape[2]):
        raise_contract("csgmv.assert")
    if resolve_strict(strict):
        check_batch_info(x, weights, batch_info)
    S, N = x.shape[0], weights.shape[1]
    x64, w64 = x.detach().to("cpu", torch.float64), weights.detach().to("cpu", torch.float64)
    value = torch.zeros(S, N, dtype=torch.float64)
    magnitude = torch.zeros_like(value)
    defined = torch.zeros(S, N, dtype=torch.bool)
    groups, repeated = _routed(batch_info, S)
    ranks = batch_info.lora_ranks.tolist()
    for rows, slot in groups:
        n = min(N, int(ranks[slot]) * num_slices)
        w = w64[slot, :n]
        value[rows, :n] = x64[rows] @ w.T
        magnitude[rows, :n] = x64[rows].abs() @ w.abs().T
        defined[rows, :n] = True
    defined[repeated] = False
    return CsgmvExpected(value, defined, magnitude, terms=x.shape[1])


def _reached(slice_offsets: torch.Tensor, slice_offsets_cpu: Optional[torch.Tensor], max_slice_size: int) -> list:
    """``(lo, hi, reached)`` of each slice, for strict validation off: the grid reaches columns ``lo ..
    reached`` for sure; the rest of the slice depends on the block size (``max_slice_size`` below the
    width), and no column is sure where the CPU copy (0.5.22+'s grid) disagrees with the device offsets."""
    offsets = [int(v) for v in slice_offsets.tolist()]
    if slice_offsets_cpu is not None:
        same = [int(v) for v in slice_offsets_cpu.tolist()] == offsets
        return [(lo, hi, hi if same else lo) for lo, hi in zip(offsets, offsets[1:])]
    return [(lo, hi, min(hi, lo + int(max_slice_size))) for lo, hi in zip(offsets, offsets[1:])]


def expand_reference(x: torch.Tensor, weights: torch.Tensor, batch_info, slice_offsets: torch.Tensor,
                     max_slice_size: int, base_output: Optional[torch.Tensor] = None,
                     slice_offsets_cpu: Optional[torch.Tensor] = None, *,
                     strict: Optional[bool] = None) -> CsgmvExpected:
    """The oracle of ``chunked_sgmv_lora_expand_forward(x, weights, batch_info, slice_offsets,
    max_slice_size, base_output, slice_offsets_cpu)``.

    ``x`` (S, num_slices * R) contiguous; ``weights`` (L, OUTPUT_DIM, R) contiguous; the result has
    ``base_output``'s shape (it is accumulated in place) or (S, OUTPUT_DIM) (fresh zeros).
    ``strict``: validate the batch info and the slices first (Note [csgmv strict validation]; None: the
    ambient setting); off, columns the grid may not reach are undefined."""
    num_slices = len(slice_offsets) - 1
    if not (x.is_contiguous() and weights.is_contiguous() and x.dim() == 2 and weights.dim() == 3
            and x.shape[1] == num_slices * weights.shape[2]):
        raise_contract("csgmv.assert")
    if resolve_strict(strict):
        check_batch_info(x, weights, batch_info)
        check_slices(x, weights, slice_offsets, max_slice_size, slice_offsets_cpu)
    slices = _reached(slice_offsets, slice_offsets_cpu, max_slice_size)
    S, R = x.shape[0], weights.shape[2]
    x64, w64 = x.detach().to("cpu", torch.float64), weights.detach().to("cpu", torch.float64)
    if base_output is None:
        value = torch.zeros(S, weights.shape[1], dtype=torch.float64)
    else:
        value = base_output.detach().to("cpu", torch.float64).clone()
    magnitude = value.abs()
    groups, repeated = _routed(batch_info, S)
    ranks, scalings = batch_info.lora_ranks.tolist(), batch_info.scalings.tolist()
    defined = torch.ones(value.shape, dtype=torch.bool)
    for rows, slot in groups:
        r, scale = min(R, int(ranks[slot])), float(scalings[slot])
        for i, (lo, hi, reached) in enumerate(slices):
            xs, w = x64[rows, i * r:(i + 1) * r], w64[slot, lo:hi, :r]
            value[rows, lo:hi] += scale * (xs @ w.T)
            magnitude[rows, lo:hi] += abs(scale) * (xs.abs() @ w.abs().T)
            defined[rows, reached:hi] = False
    defined[repeated] = False
    return CsgmvExpected(value, defined, magnitude, terms=R)



# ---- drop-in entry points (the ``reference`` target) ------------------------------------------------------------

def chunked_sgmv_lora_shrink_forward(x: torch.Tensor, weights: torch.Tensor, batch_info, num_slices: int,
                                     split_k: Optional[int] = None, *, strict: Optional[bool] = None) -> torch.Tensor:
    """SGLang's shrink signature answered by the oracle: a fresh ``torch.empty`` (S, N) of ``x``'s dtype
    with the defined entries written (rounded once from float64) and the rest left unwritten, as upstream."""
    want = shrink_reference(x, weights, batch_info, num_slices, split_k, strict=strict)
    out = torch.empty(tuple(want.value.shape), dtype=x.dtype, device=x.device)
    defined = want.defined.to(x.device)
    out[defined] = want.value.to(device=x.device, dtype=x.dtype)[defined]
    return out


def chunked_sgmv_lora_expand_forward(x: torch.Tensor, weights: torch.Tensor, batch_info, slice_offsets: torch.Tensor,
                                     max_slice_size: int, base_output: Optional[torch.Tensor] = None,
                                     slice_offsets_cpu: Optional[torch.Tensor] = None, *,
                                     strict: Optional[bool] = None) -> torch.Tensor:
    """SGLang's expand signature answered by the oracle: ``base_output`` (S, >= OUTPUT_DIM) updated in place
    and returned, or fresh zeros (S, OUTPUT_DIM) of ``x``'s dtype; rows routed twice are left as they were."""
    want = expand_reference(x, weights, batch_info, slice_offsets, max_slice_size, base_output, slice_offsets_cpu,
                            strict=strict)
    out = torch.zeros(tuple(want.value.shape), dtype=x.dtype, device=x.device) if base_output is None else base_output
    defined = want.defined.to(out.device)
    out[defined] = want.value.to(device=out.device, dtype=out.dtype)[defined]
    return out
