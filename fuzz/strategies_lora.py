"""The kv_b LoRA family's Hypothesis strategies (Note [Strategies] in :mod:`kernel_oracle.fuzz.strategies`):
:func:`lora_problems` and the ``lora`` record's case strategy :func:`lora_cases`."""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from kernel_oracle.harness.family import FAMILY_OPS
from kernel_oracle.harness.mutations import CATEGORIES
from kernel_oracle.harness.problem_lora import LoRAProblem
from kernel_oracle.harness.problems import DTYPES

from kernel_oracle.fuzz.limits import LIMITS, Limits, with_realistic_share
from kernel_oracle.fuzz.strategies import (ALL_DTYPES, _BOOLS, _TRUE_FIRST, _as_strategy, _check_bool_or_none,
                                           _SEED, _check_choices, _check_features, _check_range, _ints, _limits,
                                           _named, cases_of, edge_biased, edge_biased_dims)
from kernel_oracle.fuzz.strategies_tiles import field_blocks, past_next_block, tiled_rows, tiled_sizes

__all__ = ["LORA_FEATURES", "LORA_OPS", "lora_cases", "lora_problems", "stale_host_ints"]

LORA_OPS = FAMILY_OPS["lora"]
# what a LoRA target may decline: an upstream contract of the kv_b files that its code path does not have
# (SGLang's triton_v2 correction reads no max_len)
LORA_FEATURES = ("lora.missing_max_len",)


_MAX_LEN_SLACK = st.one_of(st.just(0), st.integers(1, 3), st.sampled_from((15, 16, 17, 63, 64, 65, 127, 128, 129)))


@functools.lru_cache(maxsize=4096)  # Note [Strategy objects]; keyed by data: bounded
def stale_host_ints(n: int, longest: int) -> SearchStrategy:
    """CUDA-graph host ints ``(bs, num_segments, max_len)`` as a graph captured for another batch left
    them (docs/semantics.md#cuda-graph-host-ints): ``bs``/``num_segments`` smaller than the ``n`` replayed
    segments (0 included), ``max_len`` an upper bound above the longest replayed segment."""
    below = st.integers(0, max(n - 1, 0))
    return st.tuples(below, below, _MAX_LEN_SLACK.map(lambda d: longest + d))


_SCALINGS = (1.0, 0.0, -1.0, 0.5, 2.0, -0.25, 3.5)
_SCALING = st.one_of(st.sampled_from(_SCALINGS), st.floats(-8.0, 8.0, allow_nan=False, width=32))
_BASE_DTYPE = st.sampled_from((None, "float32"))
_POISON = st.sampled_from((None, "huge", "nan"))


@functools.lru_cache(maxsize=None)
def _rank(R: int) -> SearchStrategy:
    """A slot's rank: the buffer's R, 0..R+3 (above R the buffer caps it), or one of its edges 0, 1, R-1, R+1, R+3
    (however large R is drawn, a rank above it stays common)."""
    return st.one_of(st.just(R), st.integers(0, R + 3), st.sampled_from(tuple(sorted({0, 1, max(R - 1, 0), R + 1,
                                                                                     R + 3}))))


@functools.lru_cache(maxsize=None)
def _pad(n: int) -> SearchStrategy:
    """CUDA-graph padding of ``n`` segments: none, or n..n+3 slots."""
    return st.one_of(st.none(), st.integers(n, n + 3))


@functools.lru_cache(maxsize=4096)  # keyed by data (segments, longest length): bounded
def _stale(n: int, longest: int) -> SearchStrategy:
    return st.one_of(st.none(), stale_host_ints(n, longest))


@functools.lru_cache(maxsize=None)
def _eager_counts(n: int) -> SearchStrategy:
    """Note [Fields that disagree]: eager ``(bs, num_segments)`` as they agree (None), with more segments
    than requests (bs < n), fewer (bs > n), or ``num_segments=0`` (upstream then reads bs)."""
    if not n:  # num_segments=0 means "read bs": an empty batch has bs=0 too
        return st.none()
    return st.one_of(st.none(), st.tuples(st.integers(0, n - 1), st.just(n)),
                     st.tuples(st.integers(n + 1, n + 3), st.just(n)), st.just((n, 0)))


_SEG_LENS_DRIFT = {True: st.sampled_from((None, "rolled", "longer", "shorter")),  # beside max_len
                   False: st.sampled_from((None, "rolled", "longer"))}


@_named("lora_problems")
def _lora_problems(draw, ops, dtypes, limits, min_segments, max_segments, permute, big, declines=(), tiles=None):
    lim = limits
    op = draw(_as_strategy(ops))
    tiled = field_blocks(tiles, op)  # Note [Tile-aware sizes]: field -> the blocks the code tiles it with
    dtype = draw(_as_strategy(dtypes))
    hi = max_segments if max_segments is not None else lim.max_segments
    if big and max_segments is None and draw(_ints(0, lim.big_odds - 1)) == lim.big_odds - 1:
        hi = lim.big_segments  # rarely: hundreds of segments
    n = draw(_ints(min_segments, max(hi, min_segments)))
    seg_max = lim.max_seg_len
    lens = []
    for _ in range(n):
        if big and draw(_ints(0, lim.big_odds - 1)) == lim.big_odds - 1:
            lens.append(draw(edge_biased(0, lim.big_seg_len)))  # rarely: thousands of rows
        else:
            lens.append(draw(edge_biased(0, seg_max, reach=min(seg_max + 1, lim.big_seg_len))))
    lens = tiled_rows(draw, lens, tiled.get("rows", ()), lim.tile_reach)
    L = draw(_ints(1, lim.max_slots))
    R = draw(tiled_sizes(edge_biased_dims(lim.ranks), tiled.get("R", ()), lim.tile_reach))
    # ranks 0..R, mixed, and occasionally above R (the buffer's R then caps them)
    ranks = tuple(draw(_rank(R)) for _ in range(L))
    scal = tuple(draw(_SCALING) for _ in range(L))
    slots = tuple(draw(_ints(0, L - 1)) for _ in range(n))
    perm = draw(_BOOLS) if permute is None else (draw(permute) if isinstance(permute, SearchStrategy)
                                                         else permute)
    pad = draw(_pad(n))
    # under CUDA graph, half the time the host ints are stale capture-time values
    stale = None if pad is None else draw(_stale(n, max(lens, default=0)))
    # a target that declines the missing-max_len contract reads neither length: every batch gives both, so
    # that no partial or malformed case built from it (a dropped max_len) expects that contract
    declined = "lora.missing_max_len" in declines
    with_max_len = True if declined else draw(_TRUE_FIRST)
    with_seg_lens = True if declined or not with_max_len else draw(_TRUE_FIRST)
    # Note [Fields that disagree] (eager mode: under CUDA graph the host ints are stale_host_ints')
    eager = draw(_eager_counts(n)) if pad is None else None
    slack = draw(past_next_block(_MAX_LEN_SLACK, max(lens, default=0), tiled.get("rows", ()))) \
        if pad is None and with_max_len else 0
    drift = draw(_SEG_LENS_DRIFT[with_max_len]) if with_seg_lens else None
    base_dtype = None
    if dtype != "float32" and op not in ("step_a_q", "step_a_v"):
        base_dtype = draw(_BASE_DTYPE)
    poison = None
    if op in ("step_b_q", "step_b_v"):
        poison = draw(_POISON)
    extra = draw(_ints(0, lim.max_extra_rows))
    # under CUDA graph the padded tail may hold an earlier, larger batch's segments (over padding rows)
    tail = pad is not None and pad > n and not perm and draw(_BOOLS)
    if tail:
        extra = max(extra, pad - n)
    return LoRAProblem(
        op=op, seg_lens=tuple(lens), weight_indices=slots, lora_ranks=ranks, scalings=scal,
        H=draw(tiled_sizes(_ints(1, lim.heads), tiled.get("H", ()), lim.tile_reach)),
        **{f: draw(tiled_sizes(edge_biased_dims(getattr(lim, dims)), tiled.get(f, ()), lim.tile_reach))
           for f, dims in (("qk", "qk_dims"), ("vd", "v_dims"), ("C", "kv_lora_ranks"))}, R=R,
        extra_rows=extra, permute=perm, cuda_graph_pad_to=pad, graph_tail=tail,
        with_max_len=with_max_len, with_seg_lens=with_seg_lens, dtype=dtype, base_dtype=base_dtype,
        strided=draw(_BOOLS), offset_views=draw(_BOOLS), poison_beyond_rank=poison,
        seed=draw(_SEED), stale_host_ints=stale, eager_counts=eager, max_len_slack=slack, seg_lens_drift=drift,
        is_prefill=draw(_BOOLS),
    )


def lora_problems(*, ops: Sequence[str] | SearchStrategy = LORA_OPS,
                  dtypes: Sequence[str] | SearchStrategy = ALL_DTYPES, limits: str | Limits = "small",
                  min_segments: int = 0, max_segments: Optional[int] = None,
                  permute: bool | None | SearchStrategy = None, big: bool = False,
                  declines: Sequence[str] = (), tiles: Optional[dict] = None) -> SearchStrategy:
    """kv_b LoRA problems: segments 0..``max_segments`` (lengths 0..limits, rarely big ones when
    ``big``), 1..L slots, ranks 0..R (mixed, some above R), scalings incl. 0 / negative / non-unit,
    permutation or not, CUDA-graph padding, strided / offset views, half / fp32 base_output, and
    for step B a poison beyond each slot's rank; ``declines``: contracts of :data:`LORA_FEATURES` the
    target does not have (``lora.missing_max_len``: every batch gives ``max_len``); ``tiles``: the target's
    tile model, whose blocks the sizes are drawn around (Note [Tile-aware sizes])."""
    declines = _check_features(declines, LORA_FEATURES)
    ops = _check_choices("ops", ops, LORA_OPS)
    dtypes = _check_choices("dtypes", dtypes, tuple(DTYPES))
    lim = _limits(limits)
    _check_range("min_segments", min_segments, "max_segments", max_segments)
    _check_bool_or_none("permute", permute)
    if not isinstance(big, bool):
        raise InvalidArgument(f"Expected a bool but got big={big!r}")
    return with_realistic_share(limits, _lora_problems(ops, dtypes, lim, min_segments, max_segments, permute, big,
                                                       declines, tiles),
                                lambda real: _lora_problems(ops, dtypes, LIMITS[real], min_segments, max_segments,
                                                            permute, big, declines, tiles))


def lora_cases(*, ops: Optional[Sequence[str]], dtypes, declines: Sequence[str], categories: Sequence[str],
               limits: str | Limits = "small", big: bool = False, tiles: Optional[dict] = None) -> SearchStrategy:
    """The ``lora`` record's ``cases``: :func:`lora_problems` and the mutation tables' LoRA kinds; a target
    declining every upstream contract (:data:`LORA_FEATURES`) gets no ``"upstream"`` case."""
    categories = _check_choices("categories", categories, ("valid", *CATEGORIES))
    declines = _check_features(declines, LORA_FEATURES)
    if set(LORA_FEATURES) <= set(declines):
        categories = tuple(c for c in categories if c != "upstream")
    problems = lora_problems(ops=ops if ops is not None else LORA_OPS, dtypes=dtypes, limits=limits, big=big,
                             declines=declines, tiles=tiles)
    return cases_of(problems, "lora", categories)
