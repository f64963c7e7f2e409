"""Float64 references of SGLang's grouped LoRA shrink and expand (``grouped_lora_a`` / ``grouped_lora_b``, 0.5.23+).

Note [Grouped LoRA references]
------------------------------
The ``triton_v2`` backend's two GEMMs read rows through an aligned route (Note [Aligned routes] in
:mod:`.grouped_route`); a correct route only decides *which bucket* each pair has, so the references
take that per-pair bucket (:func:`~.grouped_route.route_buckets`) and never a route object.  Each
returns an :class:`Expected` over the tensor the primitive writes: ``value`` (float64) is to be matched
where ``defined`` within a tolerance scaled by ``magnitude`` (the same sums over absolute values), and
where ``untouched`` the tensor must keep its initial contents exactly.  Everything else is unspecified.

Shrink, ``output[p, n] = sum_k input[row(p), k0 + k] * weight[bucket(p) // weight_div, n, k]`` for
every routed pair ``p`` (bucket >= 0):

* ``row(p)`` is ``pair_to_row[p]`` when given, else ``p`` with ``pair_input``, else ``p // width``; a
  row outside ``[0, input rows)`` reads zeros (the pair's output is *written*, as 0);
* columns ``n < rank[bucket // groups_per_slot] * stack`` with ``lora_ranks``, else all ``N``; the
  columns past the live rank are left untouched;
* ``windowed``: the ``N`` columns are ``stack`` blocks of ``N // stack`` (columns past ``stack`` whole
  blocks are untouched); block ``s`` reads input columns ``[s*K, (s+1)*K)`` (``k0 = s*K``) and ignores
  ``lora_ranks``; otherwise ``k0 = 0``;
* split-K (``split_k > 1``): ``"serial"`` writes the same sums to ``output``; ``"planes"`` leaves
  ``output`` untouched and writes fp32 ``partial[s, p, n]``, the sum over the ``s``-th of ``split_k``
  chunks of ``ceil(K / split_k)`` (:func:`grouped_lora_a_planes_ref`); unrouted pairs untouched.

Expand, for slice ``s`` (weight rows ``offsets[s]:offsets[s+1]``, destination columns from
``out_offsets[s]``, default ``offsets[s]``) and routed pair ``p`` of slot ``bucket // groups_per_slot``
with live rank ``r`` (``lora_ranks[slot]``, else the pool rank ``weight.shape[2]``):
``dest[p, out_s + n] = scaling * sum_{k < r} bridge[row, c_s + k] * weight[bucket // weight_div,
offsets[s] + n, k]`` (plus the prior contents with ``add_inplace``, replacing them otherwise);
``row = p`` (``pair_bridge``) or ``p // width``; ``c_s = 0`` for one slice, ``(s % bridge_slices) * r``
when ``0 < bridge_slices < slices``, else ``s * r``; a 3-D bridge is split-K planes, summed; the
scaling is ``scalings[slot]`` or 1.  A live slot of rank 0 leaves its pairs untouched.  Unrouted pairs
are written 0 with ``zero_sentinel``, else untouched.  ``pair_heads > 0`` addresses a
``[tokens, heads, width]`` destination at ``[p // heads, p % heads]``, else row ``p`` of a 2-D one.
Columns no slice covers, and rows no pair addresses, are untouched; columns two slices cover are
unspecified.

The tests hold these against per-pair loops (oracle_tests/reference/test_grouped_references.py) and
the release's primitives (oracle_tests/fuzz/test_sglang_v2_primitives.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

__all__ = ["Expected", "grouped_lora_a_planes_ref", "grouped_lora_a_ref", "grouped_lora_b_ref", "split_ranges"]


@dataclass(frozen=True)
class Expected:
    """What a primitive must leave in the tensor it writes (Note [Grouped LoRA references])."""

    value: torch.Tensor  # float64: the expected contents (the initial ones where untouched)
    defined: torch.Tensor  # bool: compare within tolerance here
    untouched: torch.Tensor  # bool: must equal the initial contents exactly here
    magnitude: torch.Tensor  # float64: the same sums over absolute values (the tolerance's scale)

    def mismatch(self, got: torch.Tensor, *, rtol: float, atol: float = 0.0) -> Optional[str]:
        """None when ``got`` matches, else one line naming the first bad element."""
        g = got.detach().to("cpu", torch.float64)
        if g.shape != self.value.shape:
            return f"shape {tuple(g.shape)}, expected {tuple(self.value.shape)}"
        same = (g == self.value) | (torch.isnan(g) & torch.isnan(self.value))
        moved = self.untouched & ~same
        if bool(moved.any()):
            i = tuple(int(v) for v in moved.nonzero()[0])
            return f"element {i} should be untouched ({float(self.value[i])!r}) but holds {float(g[i])!r}"
        allowed = rtol * self.magnitude + atol
        bad = self.defined & ~((g - self.value).abs() <= allowed)
        if bool(bad.any()):
            i = tuple(int(v) for v in bad.nonzero()[0])
            return (f"{int(bad.sum())} of {int(self.defined.sum())} defined elements off; first {i}: got "
                    f"{float(g[i])!r}, expected {float(self.value[i])!r} (allowed {float(allowed[i]):.3g})")
        return None


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float64)


def _long(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.int64).reshape(-1)


def split_ranges(K: int, split_k: int) -> list:
    """The ``[lo, hi)`` input-column chunks of a split-K shrink: ``ceil(K / split_k)`` each, the last short
    (possibly empty)."""
    per = -(-K // split_k)
    return [(min(s * per, K), min((s + 1) * per, K)) for s in range(split_k)]


def _planes(buckets: torch.Tensor, weight_div: int, num_planes: int) -> torch.Tensor:
    planes = torch.where(buckets >= 0, buckets // weight_div, torch.zeros_like(buckets))
    if bool((planes >= num_planes).any()):
        b = int(buckets[planes >= num_planes][0])
        raise ValueError(f"bucket {b} reads weight plane {b // weight_div}; the weight has {num_planes}")
    return planes


def _shrink_terms(input, weight, buckets, *, groups_per_slot, width, pair_input, pair_to_row, lora_ranks, stack,
                  weight_div, windowed):
    """(x, w, live): per pair the input rows it reads ``[P, stack or 1, K]``, the weight plane ``[P, N, K]``
    and the live-column mask ``[P, N]`` (Note: live = routed and within rank / whole window blocks)."""
    P = buckets.numel()
    E, N, K = weight.shape
    x_all = _f64(input)
    if pair_to_row is not None:
        rows = _long(pair_to_row)[:P]
    elif pair_input:
        rows = torch.arange(P)
    else:
        rows = torch.arange(P) // width
    windows = stack if windowed else 1
    if x_all.shape[1] < windows * K:
        raise ValueError(f"the shrink reads {windows * K} input columns; the input has {x_all.shape[1]}")
    inside = (rows >= 0) & (rows < x_all.shape[0])
    x = torch.zeros(P, windows, K, dtype=torch.float64)
    if x_all.shape[0]:
        x[inside] = x_all[rows[inside]][:, : windows * K].reshape(-1, windows, K)
    w = _f64(weight)[_planes(buckets, weight_div, E)]
    columns = torch.arange(N)
    routed = buckets >= 0
    if windowed:
        live = routed[:, None] & (columns < (N // stack) * stack)[None, :]
    elif lora_ranks is not None:
        ranks = _long(lora_ranks)[(buckets.clamp(min=0) // groups_per_slot)] * stack
        over = routed & (ranks > N)
        if bool(over.any()):
            raise ValueError(f"a live rank times stack ({int(ranks[over][0])}) exceeds the weight's {N} rows")
        live = routed[:, None] & (columns[None, :] < ranks[:, None])
    else:
        live = routed[:, None].expand(P, N)
    return x, w, live


def _shrink(x, w, N, stack, windowed, k_lo, k_hi):
    """``[P, N]`` sums over input columns ``[k_lo, k_hi)`` (of each window)."""
    if windowed:
        block = torch.arange(N) // max(N // stack, 1)
        xs = x[:, block.clamp(max=x.shape[1] - 1), k_lo:k_hi]  # [P, N, k]
    else:
        xs = x[:, 0, k_lo:k_hi][:, None, :].expand(-1, N, -1)
    return (xs * w[:, :, k_lo:k_hi]).sum(-1), (xs.abs() * w[:, :, k_lo:k_hi].abs()).sum(-1)


def grouped_lora_a_ref(input: torch.Tensor, weight: torch.Tensor, output: torch.Tensor, buckets: torch.Tensor, *,
                       groups_per_slot: int = 1, width: int = 1, pair_input: bool = False,
                       pair_to_row: Optional[torch.Tensor] = None, lora_ranks: Optional[torch.Tensor] = None,
                       stack: int = 1, weight_div: int = 1, windowed: bool = False, split_k: int = 1,
                       split_mode: str = "serial") -> Expected:
    """The shrink's effect on ``output`` (Note [Grouped LoRA references])."""
    buckets = _long(buckets)
    P, (_, N, K) = buckets.numel(), weight.shape
    value = _f64(output).clone()
    untouched = torch.ones(value.shape, dtype=torch.bool)
    magnitude = torch.zeros(value.shape, dtype=torch.float64)
    if P == 0 or (split_k > 1 and split_mode == "planes"):
        return Expected(value, ~untouched, untouched, magnitude)
    x, w, live = _shrink_terms(input, weight, buckets, groups_per_slot=groups_per_slot, width=width,
                               pair_input=pair_input, pair_to_row=pair_to_row, lora_ranks=lora_ranks, stack=stack,
                               weight_div=weight_div, windowed=windowed)
    sums, mags = _shrink(x, w, N, stack, windowed, 0, K)
    value[:P, :N] = torch.where(live, sums, value[:P, :N])
    magnitude[:P, :N] = torch.where(live, mags, torch.zeros((), dtype=torch.float64))
    defined = torch.zeros_like(untouched)
    defined[:P, :N] = live
    return Expected(value, defined, ~defined, magnitude)


def grouped_lora_a_planes_ref(input: torch.Tensor, weight: torch.Tensor, partial: torch.Tensor, buckets: torch.Tensor,
                              *, split_k: int, groups_per_slot: int = 1, width: int = 1, pair_input: bool = False,
                              pair_to_row: Optional[torch.Tensor] = None, lora_ranks: Optional[torch.Tensor] = None,
                              stack: int = 1, weight_div: int = 1, windowed: bool = False) -> Expected:
    """A split-K shrink's fp32 planes ``partial[split_k, rows, N]`` (both modes write them)."""
    buckets = _long(buckets)
    P, (_, N, K) = buckets.numel(), weight.shape
    value = _f64(partial).clone()
    defined = torch.zeros(value.shape, dtype=torch.bool)
    magnitude = torch.zeros(value.shape, dtype=torch.float64)
    if P:
        x, w, live = _shrink_terms(input, weight, buckets, groups_per_slot=groups_per_slot, width=width,
                                   pair_input=pair_input, pair_to_row=pair_to_row, lora_ranks=lora_ranks, stack=stack,
                                   weight_div=weight_div, windowed=windowed)
        for s, (lo, hi) in enumerate(split_ranges(K, split_k)):
            sums, mags = _shrink(x, w, N, stack, windowed, lo, hi)
            value[s, :P, :N] = torch.where(live, sums, value[s, :P, :N])
            magnitude[s, :P, :N] = torch.where(live, mags, torch.zeros((), dtype=torch.float64))
            defined[s, :P, :N] = live
    return Expected(value, defined, ~defined, magnitude)


def _slices(offsets: Sequence[int], out_offsets: Optional[Sequence[int]]) -> list:
    rows = [int(o) for o in offsets]
    if len(rows) < 2 or rows[0] != 0 or any(lo >= hi for lo, hi in zip(rows, rows[1:])):
        raise ValueError(f"offsets must be increasing from 0; got {rows}")
    cols = rows[:-1] if out_offsets is None else [int(c) for c in out_offsets]
    if len(cols) != len(rows) - 1:
        raise ValueError(f"out_offsets needs one entry per slice ({len(rows) - 1}); got {len(cols)}")
    return [(lo, hi - lo, col) for lo, hi, col in zip(rows, rows[1:], cols)]


def _destination_index(destination: torch.Tensor, P: int, pair_heads: int):
    """Per pair, the index of its destination row: ``(token, head)`` or ``(row,)``."""
    pairs = torch.arange(P)
    if pair_heads:
        if destination.dim() != 3 or destination.shape[1] != pair_heads:
            raise ValueError(f"a pair-addressed destination is [tokens, {pair_heads}, width]; got "
                             f"{tuple(destination.shape)}")
        return (pairs // pair_heads, pairs % pair_heads)
    if destination.dim() != 2:
        raise ValueError(f"the expand's destination is 2-D without pair_heads; got {tuple(destination.shape)}")
    return (pairs,)


def _expand_terms(bridge, weight, buckets, *, groups_per_slot, width, pair_bridge, lora_ranks, scalings, weight_div):
    """Per pair: its bridge row (planes summed) ``[P, width]``, weight plane, live rank, scaling."""
    P = buckets.numel()
    E, _, R = weight.shape
    b = _f64(bridge)
    if b.dim() == 3:
        b_abs, b = b.abs().sum(0), b.sum(0)
    else:
        b_abs = b.abs()
    rows = torch.arange(P) if pair_bridge else torch.arange(P) // width
    slot = buckets.clamp(min=0) // groups_per_slot
    rank = _long(lora_ranks)[slot] if lora_ranks is not None else torch.full((P,), R, dtype=torch.int64)
    scale = _f64(scalings).reshape(-1)[slot] if scalings is not None else torch.ones(P, dtype=torch.float64)
    return b[rows], b_abs[rows], _f64(weight)[_planes(buckets, weight_div, E)], rank, scale


def grouped_lora_b_ref(bridge: torch.Tensor, weight: torch.Tensor, destination: torch.Tensor, buckets: torch.Tensor,
                       *, offsets: Sequence[int], add_inplace: bool, zero_sentinel: bool,
                       out_offsets: Optional[Sequence[int]] = None, groups_per_slot: int = 1, width: int = 1,
                       pair_bridge: bool = True, lora_ranks: Optional[torch.Tensor] = None,
                       scalings: Optional[torch.Tensor] = None, weight_div: int = 1, pair_heads: int = 0,
                       bridge_slices: int = 0) -> Expected:
    """The expand's effect on ``destination`` (Note [Grouped LoRA references])."""
    buckets = _long(buckets)
    P, R = buckets.numel(), weight.shape[2]
    slices = _slices(offsets, out_offsets)
    value = _f64(destination).clone()
    prior = value.clone()
    written = torch.zeros(value.shape, dtype=torch.int64)  # how many slices write each element
    magnitude = torch.zeros(value.shape, dtype=torch.float64)
    if P == 0:
        return Expected(value, written > 0, written == 0, magnitude)
    at = _destination_index(destination, P, pair_heads)
    rows, rows_abs, w, rank, scale = _expand_terms(bridge, weight, buckets, groups_per_slot=groups_per_slot,
                                                    width=width, pair_bridge=pair_bridge, lora_ranks=lora_ranks,
                                                    scalings=scalings, weight_div=weight_div)
    routed = buckets >= 0
    active = routed & (rank > 0) if lora_ranks is not None else routed
    cleared = ~routed if zero_sentinel else torch.zeros_like(routed)
    k_live = rank.clamp(max=R)
    ks = torch.arange(R)
    shared = 0 < bridge_slices < len(slices)
    for s, (w_lo, n, col) in enumerate(slices):
        c0 = torch.zeros_like(rank) if len(slices) == 1 else (s % bridge_slices if shared else s) * rank
        idx = (c0[:, None] + ks[None, :]).clamp(max=max(rows.shape[1] - 1, 0))
        lhs = torch.where(ks[None, :] < k_live[:, None], rows.gather(1, idx), torch.zeros((), dtype=torch.float64))
        lhs_abs = torch.where(ks[None, :] < k_live[:, None], rows_abs.gather(1, idx),
                              torch.zeros((), dtype=torch.float64))
        wk = w[:, w_lo:w_lo + n, :]
        delta = scale[:, None] * torch.einsum("pk,pnk->pn", lhs, wk)
        mag = scale.abs()[:, None] * torch.einsum("pk,pnk->pn", lhs_abs, wk.abs())
        cols = slice(col, col + n)
        here = prior[at + (cols,)]
        if add_inplace:
            delta, mag = here + delta, mag + here.abs()
        new = torch.where(active[:, None], delta, torch.where(cleared[:, None], torch.zeros_like(delta), here))
        value[at + (cols,)] = new
        magnitude[at + (cols,)] = torch.where(active[:, None], mag, torch.zeros_like(mag))
        written[at + (cols,)] += (active | cleared).to(torch.int64)[:, None]
    return Expected(value, written == 1, written == 0, magnitude)
