"""The kv_b LoRA family's plain-data problem (Note [Problems] in :mod:`harness.problems`): :class:`LoRAProblem`,
its call (:func:`materialize_lora`), its plainer variants (Note [Minimal examples] in :mod:`harness.simplify`),
its words for a failing element (:func:`lora_locator`) and the declines a case of it uses
(:func:`lora_declined`); the ``lora`` record names them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch

from kernel_oracle.reference.batch_info import make_lora_batch_info
from kernel_oracle.reference.lora_routing import route_lora_batch
from kernel_oracle.reference.signatures import signature

from kernel_oracle.harness.problem_variants import replace_changed, shorter
from kernel_oracle.harness.problems import Call, _generator, _randn, batch_info_of, dtype_of

__all__ = ["LoRAProblem", "lora_declined", "lora_feature_variants", "lora_locator", "lora_simplifications",
           "materialize_lora"]


@dataclass(frozen=True)
class LoRAProblem:
    """One kv_b LoRA call as data.  Shapes: S tokens, H heads, qk/vd head dims, C kv_lora_rank,
    R buffer rank, L slots; ``seg_lens``/``weight_indices`` per segment, ``lora_ranks``/``scalings``
    per slot.  ``extra_rows``: unrouted token rows after the routed ones (must stay untouched)."""

    op: str
    seg_lens: tuple[int, ...]
    weight_indices: tuple[int, ...]
    lora_ranks: tuple[int, ...]
    scalings: tuple[float, ...]
    H: int = 2
    qk: int = 48
    vd: int = 40
    C: int = 64
    R: int = 16
    extra_rows: int = 0
    permute: bool = False
    cuda_graph_pad_to: Optional[int] = None
    with_max_len: bool = True
    with_seg_lens: bool = True
    dtype: str = "float32"
    base_dtype: Optional[str] = None  # None: same as dtype
    strided: bool = False  # activations / base_output as non-contiguous views
    seed: int = 0
    # added for the fuzzer (defaults keep every existing problem bit-identical):
    # step B only: fill columns >= r (the routed slot's rank) of the input with "huge" values or "nan";
    # a kernel that reads past the rank then produces garbage even where the scaling is 0
    poison_beyond_rank: Optional[str] = None
    # activations / base_output start one token row into a larger buffer (non-zero storage offset)
    offset_views: bool = False
    # CUDA-graph replay with stale capture-time host ints (bs, num_segments, max_len): see
    # reference.batch_info.make_lora_batch_info (None: the real counts, as before)
    stale_host_ints: Optional[tuple[int, int, int]] = None
    # eager batches whose redundant fields disagree within the contract (docs/semantics.md#fields-that-may-disagree;
    # reference.batch_info.make_lora_batch_info): (bs, num_segments), max_len above the longest segment,
    # seg_lens that disagree with seg_indptr (None, 0, None: as before)
    eager_counts: Optional[tuple[int, int]] = None
    max_len_slack: int = 0
    seg_lens_drift: Optional[str] = None
    # the forward is a prefill (LoRABatchInfo.is_prefill; the triton_v2 path plans decode and prefill apart)
    is_prefill: bool = False
    # CUDA graph: the padded tail holds an earlier, larger batch's segments over padding rows (make_lora_batch_info)
    graph_tail: bool = False
    family: str = field(default="lora", init=False)

    @property
    def tail_rows(self) -> range:
        """The padding rows the stale graph tail covers (``graph_tail``): after the live rows, one per
        padded segment; empty otherwise."""
        if not self.graph_tail or self.cuda_graph_pad_to is None:
            return range(0)
        start = sum(self.seg_lens)
        return range(start, start + self.cuda_graph_pad_to - len(self.seg_lens))

    @property
    def L(self) -> int:
        return len(self.lora_ranks)

    @property
    def S(self) -> int:
        return sum(self.seg_lens) + self.extra_rows

    # the hooks every family's problem has (docs/architecture.md, "Adding a kernel family")
    def materialize(self, device: str | torch.device = "cpu", metadata_helper=None) -> "Call":
        """Its call on ``device``: :func:`materialize_lora` (no metadata helper: LoRA targets take the batch info)."""
        return materialize_lora(self, device)

    def sizes(self) -> tuple[dict, int, dict]:
        """(size name -> its smallest value, how many elements its tensors hold, count name -> the count):
        the bounds of a problem read from a file (:func:`problem_from_dict`)."""
        sizes = {"seg_lens": min(self.seg_lens, default=0), "extra_rows": self.extra_rows,
                 **{k: getattr(self, k) for k in ("H", "qk", "vd", "C", "R")}}
        longest = max(self.seg_lens, default=0)
        counts = {"segments (len(seg_lens))": len(self.seg_lens), "cuda_graph_pad_to": self.cuda_graph_pad_to or 0,
                  "eager_counts": max(self.eager_counts or (0,)), "max_len_slack": self.max_len_slack,
                  "stale_host_ints max_len past the longest segment":
                      (self.stale_host_ints[-1] - longest) if self.stale_host_ints else 0}
        return sizes, (self.L * self.H * (self.qk + self.vd) * self.R + self.L * self.R * self.C
                       + self.S * self.H * (self.qk + self.vd + self.C + self.R)), counts

    def example_size(self) -> int:
        """Its size when the smallest example of a finding is picked: rows times heads times the widest head or
        rank dimension."""
        return self.S * self.H * max(self.qk, self.vd, self.C, self.R)

    def shape_class(self) -> str:
        """A coarse class for grouping results: ``empty``, ``decode`` (one-row segments), ``prefill``,
        ``prefill-large`` (a segment of 256 rows or more)."""
        lens = [n for n in self.seg_lens if n]
        if not lens:
            return "empty"
        if max(lens) <= 1:
            return "decode"
        return "prefill-large" if max(lens) >= 256 else "prefill"

    def simplifications(self):
        """Plainer variants, the most worth keeping first (Note [Minimal examples] in harness/simplify.py)."""
        return lora_simplifications(self)

    def feature_variants(self) -> dict:
        """feature of ``harness.simplify.FEATURES`` -> this problem without it (None where it has none)."""
        return lora_feature_variants(self)


def _maybe_strided(t: torch.Tensor, strided: bool, offset: bool = False) -> torch.Tensor:
    """A non-contiguous view with the same values: every other element of a wider last dim;
    with ``offset``, the view starts one (NaN-filled) leading row into its buffer."""
    if not strided and not offset:
        return t
    lead = 1 if offset else 0
    width = 2 * t.shape[-1] if strided else t.shape[-1]
    wide = torch.empty(t.shape[0] + lead, *t.shape[1:-1], width, dtype=t.dtype, device=t.device)
    wide.fill_(float("nan"))
    view = wide[lead:, ..., ::2] if strided else wide[lead:]
    view.copy_(t)
    return view


_POISON_VALUES = {"huge": 3.0e4, "nan": float("nan")}


def _poison_beyond_rank(x: torch.Tensor, bi, num_slots: int, R: int, how: Optional[str]) -> None:
    """Fill ``x[row, :, r:]`` with a poison value for every routed row of a slot of rank r < R."""
    if how is None:
        return
    if how not in _POISON_VALUES:
        raise ValueError(f"poison_beyond_rank={how!r} is unknown; the only valid values are None, 'huge', 'nan'")
    from kernel_oracle.reference.lora_routing import route_lora_batch

    route = route_lora_batch(bi, num_rows=x.shape[0], num_slots=num_slots, max_rank=R, device=x.device,
                             strict=False)
    value = _POISON_VALUES[how]
    for g in route.groups():
        if 0 < g.rank < R:
            rows = route.rows[g.index].to(x.device)
            x[rows, :, g.rank:] = value


# the input of each LoRA step, by parameter name: (its last dim, whether it is scaled by that dim**-0.5,
# base_output's last dim: kv_lora_rank on the q side, v_head_dim on the v side)
_LORA_INPUTS = {
    "q_nope": ("qk", False, "C"),
    "q_lora_a": ("R", False, "C"),
    "attn_output": ("C", True, "vd"),
    "attn_lora_a": ("R", False, "vd"),
}


def materialize_lora(p: LoRAProblem, device: str | torch.device = "cpu") -> Call:
    """Build tensors and batch info for ``p``; weights are scaled so deltas are O(1).

    Draw order (fixed, so a seed always gives the same tensors on one kind of device: Note [Where
    data is generated]): permutation, B_buf, A_buf, the input, base_output."""
    sig = signature(p.op)
    if sig.family != "lora":
        raise ValueError(f"op={p.op!r} is not a LoRA step; LoRAProblem takes one of the LoRA ops")
    gen = _generator(p.seed, device)
    dt = dtype_of(p.dtype)
    bdt = dtype_of(p.base_dtype or p.dtype)
    S, H, qk, vd, C, R, L = p.S, p.H, p.qk, p.vd, p.C, p.R, p.L
    perm = torch.randperm(S, generator=gen, device=gen.device) if p.permute else None
    bi = make_lora_batch_info(p.seg_lens, p.weight_indices, p.lora_ranks, p.scalings,
                              permutation=perm, cuda_graph_pad_to=p.cuda_graph_pad_to,
                              with_max_len=p.with_max_len, with_seg_lens=p.with_seg_lens,
                              stale_host_ints=p.stale_host_ints, eager_counts=p.eager_counts,
                              max_len_slack=p.max_len_slack, seg_lens_drift=p.seg_lens_drift,
                              is_prefill=p.is_prefill, graph_tail=p.graph_tail, device=device)
    dims = {"qk": qk, "vd": vd, "C": C, "R": R}
    values: dict[str, Any] = {
        "B_buf": _randn(gen, (L, H * (qk + vd), R), dt, device, scale=qk ** -0.5),
        "A_buf": _randn(gen, (L, R, C), dt, device, scale=R ** -0.5),
        sig.batch_info: bi,
        "full_K_per_head": qk + vd,
        "qk_nope_head_dim": qk,
        "v_head_dim": vd,
    }
    name = sig.params[0]
    dim, fan_in_scaled, out_dim = _LORA_INPUTS[name]
    x = _randn(gen, (S, H, dims[dim]), dt, device, scale=dims[dim] ** -0.5 if fan_in_scaled else 1.0)
    if sig.inplace is not None:
        base = _randn(gen, (S, H, dims[out_dim]), bdt, device)
        values[sig.inplace] = _maybe_strided(base, p.strided, p.offset_views)
    if dim == "R":  # step B reads R columns: poison the ones at or beyond the routed slot's rank
        _poison_beyond_rank(x, bi, L, R, p.poison_beyond_rank)
    values[name] = _maybe_strided(x, p.strided, p.offset_views)
    return Call.bind(sig, {k: v for k, v in values.items() if k in sig.params})


def _still_stale(stale, segments: int):
    """Stale CUDA-graph host ints ``(bs, num_segments, max_len)`` for a batch of ``segments`` segments: each
    count no larger than ``segments - 1`` (smaller than the replayed batch, as the strategy draws them), the
    capture-time ``max_len`` kept (an upper bound still); None stays None."""
    if stale is None:
        return None
    bs, num, max_len = stale
    top = max(segments - 1, 0)
    return min(bs, top), min(num, top), max_len


def _lora_without_segment(p, b: int):
    keep = [i for i in range(len(p.seg_lens)) if i != b]
    # eager counts described the segments there were; stale graph ints stay stale for the ones left
    return dataclasses.replace(p, seg_lens=tuple(p.seg_lens[i] for i in keep),
                               weight_indices=tuple(p.weight_indices[i] for i in keep),
                               eager_counts=None, stale_host_ints=_still_stale(p.stale_host_ints, len(keep)),
                               graph_tail=False)


def lora_simplifications(p) -> Iterator:
    """A LoRA problem's :meth:`~harness.problem_lora.LoRAProblem.simplifications`."""
    for b in reversed(range(len(p.seg_lens))):
        yield _lora_without_segment(p, b)
    for b, n in enumerate(p.seg_lens):
        for m in shorter(n):
            yield dataclasses.replace(p, seg_lens=p.seg_lens[:b] + (m,) + p.seg_lens[b + 1:], eager_counts=None)
    yield replace_changed(p, H=1)
    yield replace_changed(p, extra_rows=0)
    yield replace_changed(p, seg_lens_drift=None, eager_counts=None, max_len_slack=0)
    yield replace_changed(p, with_max_len=True)
    yield replace_changed(p, stale_host_ints=None)
    if p.stale_host_ints is not None:  # the capture-time max_len down to the longest segment
        yield replace_changed(p, stale_host_ints=(*p.stale_host_ints[:2], max(p.seg_lens, default=0)))
    yield replace_changed(p, graph_tail=False)
    yield replace_changed(p, strided=False, offset_views=False)
    yield replace_changed(p, poison_beyond_rank=None)
    yield replace_changed(p, base_dtype=None)
    order = list(dict.fromkeys(w for w in p.weight_indices if 0 <= w < len(p.lora_ranks)))
    if order and len(order) == len(set(p.weight_indices)) and order != list(range(len(p.lora_ranks))):
        # only the slots the segments use, numbered 0.. in order of first use
        yield dataclasses.replace(p, weight_indices=tuple(order.index(w) for w in p.weight_indices),
                                  lora_ranks=tuple(p.lora_ranks[w] for w in order),
                                  scalings=tuple(p.scalings[w] for w in order))


def lora_feature_variants(p) -> dict:
    """A LoRA problem's :meth:`~harness.problem_lora.LoRAProblem.feature_variants`."""
    slot = p.weight_indices[0] if p.weight_indices else 0
    return {"permutation": replace_changed(p, permute=False),
            "slot": replace_changed(p, weight_indices=tuple(slot for _ in p.weight_indices)),
            "rank": replace_changed(p, lora_ranks=tuple(p.R for _ in p.lora_ranks)),
            "scaling": replace_changed(p, scalings=tuple(1.0 for _ in p.scalings)),
            "stale host ints": replace_changed(p, stale_host_ints=None),
            # stale host ints need the graph: what a case of them depends on, the variant above says
            "cuda graph": (replace_changed(p, cuda_graph_pad_to=None, graph_tail=False)
                           if p.stale_host_ints is None else None)}


def lora_locator(call):
    """``(locate, route)`` of a LoRA call: ``locate(index)`` names the token, head, segment and slot of an
    output index; ``route`` is the call's routing (None when its metadata has none to give)."""
    bi = batch_info_of(call)
    try:
        route = route_lora_batch(bi, num_rows=call.args[0].shape[0], num_slots=int(bi.lora_ranks.numel()),
                                 max_rank=10**9, device=torch.device("cpu"), strict=False)
    except Exception:  # noqa: BLE001 - malformed metadata: no routing to name
        route = None

    def locate(index):
        t, h = int(index[0]), int(index[1])
        where = {"token": t, "head": h, "segment": None, "slot": None}
        if route is not None:
            hit = torch.nonzero(route.rows == t).flatten()
            if hit.numel():
                where["segment"] = int(route.segment[hit[0]])
                where["slot"] = int(route.slot[hit[0]])
        return where
    return locate, route


def lora_declined(problem, mutation, declines) -> tuple[str, ...]:
    """``("lora.missing_max_len",)`` when a target declines that contract and the case can expect it: a
    batch without ``max_len`` or ``seg_lens``, or an upstream-contract mutation (they drop both); a
    declining target is given batches with both and no such mutation (``fuzz.strategies_lora.lora_cases``)."""
    if "lora.missing_max_len" not in declines:
        return ()
    lengths_dropped = not (problem.with_max_len and problem.with_seg_lens)
    return ("lora.missing_max_len",) if lengths_dropped or (mutation is not None and mutation.category == "upstream") \
        else ()
