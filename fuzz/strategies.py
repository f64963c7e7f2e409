"""Composable Hypothesis strategies for kv_b LoRA and vision-attention fuzz cases.

Note [Strategies]
-----------------
Strategies generate *plain data* -- :class:`~fuzz.problems.LoRAProblem`,
:class:`~fuzz.problems.VisionProblem` and :class:`~fuzz.check.Case` (a problem plus an optional
:class:`~fuzz.mutations.Mutation`) -- never tensors: the tensors come from the problem's seed, so
Hypothesis shrinks ints and tuples (fewer segments, shorter lengths, smaller dims, no permutation,
float32) and a failing example reads as code.

Sizes come from a :class:`Limits` preset, because what is affordable differs by six orders of
magnitude: ``"tiny"`` for Triton kernels under the CPU interpreter (20-35 ms per program
instance: few segments, small dims, H <= 2), ``"small"`` for the pure-torch reference on the CPU,
``"full"`` for realistic GPU sizes (hundreds of segments, lengths into the thousands -- drawn rarely,
so shrinking stays fast and the common case stays cheap), and ``"gpu"``, a GPU campaign's default
(:func:`default_limits`): mostly small, boundary-heavy problems (cheap, no new compilations, where
kernels break) with one in :data:`REALISTIC_SHARE` drawn from ``"full"`` (the presets: :mod:`kernel_oracle.fuzz.
limits`).  Where the target describes the blocks of its code, the sizes it tiles are drawn around them (Note
[Tile-aware sizes] in :mod:`kernel_oracle.fuzz.strategies_tiles`).

Every public strategy validates its arguments up front and raises
:class:`hypothesis.errors.InvalidArgument` ("Expected X but got name=value", "min_x=... is larger
than max_x=..."), accepts a value or a strategy where that makes sense, and has a call-like repr.

Each generated case carries its expected outcome implicitly: :func:`fuzz.check.expected_outcome`
runs the reference on it (a result, an upstream contract error or a strict-validation error).

Note [Fields that disagree]
---------------------------
Upstream's metadata is redundant, and a valid batch may have its copies disagree
(docs/semantics.md#fields-that-may-disagree); an implementation that reads the wrong copy passes every batch whose copies agree.
So the strategies draw them apart, each as often as they agree: LoRA ``num_segments`` vs ``bs`` in
eager mode (more and fewer segments than requests, ``num_segments=0``; stale leftovers of a larger
batch past the real segments), ``seg_lens`` vs ``seg_indptr`` (a stale order, longer, or shorter
beside ``max_len``), ``max_len`` above the longest segment; vision ``sequence_lengths`` vs the indptr
gaps (uncovered tokens between sequences), ``forward_metadata`` beside kwargs that disagree (stale
values, or the Nones SGLang's ``VisionAttention`` passes), ``forward_metadata`` without packed
indptrs.  The vision op also covers the rest of SGLang's call: GQA/MQA (``H_kv`` of ``H``, a divisor
or 1), ``(b, s, H, D)`` inputs of several rows, the release's metadata helper, ``window_size``,
``s_aux`` and every keyword ``VisionAttention.forward`` passes; a target that declines a feature
(:data:`VISION_FEATURES`, ``declines=``) is given no case of it.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.mutations import CATEGORIES, Mutation, MutationError, kinds
from kernel_oracle.harness.opinfo import FAMILY_OPS
from kernel_oracle.harness.problems import DTYPES, VISION_PATHS, LoRAProblem, VisionProblem

from kernel_oracle.fuzz.limits import LIMITS, REALISTIC_SHARE, Limits, default_limits, with_realistic_share
from kernel_oracle.fuzz.strategies_tiles import field_blocks, past_next_block, tiled_rows, tiled_sizes

__all__ = [
    "InvalidArgument",
    "LIMITS",
    "REALISTIC_SHARE",
    "TILE_SIZES",
    "VISION_FEATURES",
    "Limits",
    "cases",
    "cases_of",
    "default_limits",
    "edge_biased",
    "edge_biased_dims",
    "lora_problems",
    "malformed_metadata",
    "partial_metadata",
    "stale_host_ints",
    "tile_edges",
    "upstream_contract_cases",
    "vision_problems",
]

ALL_DTYPES = ("float32", "float16", "bfloat16")  # float32 first: Hypothesis shrinks towards it
LORA_OPS = FAMILY_OPS["lora"]


# Note [Strategy objects]: a composite draws from strategies built once and kept (Hypothesis validates
# each new strategy object on its first draw, and a fresh ``st.integers`` per draw made validation
# and construction a third of a small case's time).  Caches keyed by preset values are unbounded
# (a few dozen entries); those keyed by a drawn batch (segment count x longest length) are bounded,
# so a long campaign's memory does not grow with what it meets.
@functools.lru_cache(maxsize=None)
def _ints(lo: int, hi: int) -> SearchStrategy:
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=None)
def _pick(values: tuple) -> SearchStrategy:
    return st.sampled_from(values)


_BOOLS = st.booleans()
_TRUE_FIRST = st.booleans().map(lambda b: not b)  # shrinks to True


# ---- argument validation (one exception type, Hypothesis's own) -----------------------------------

def _check_choices(name: str, value, allowed: Sequence) -> tuple:
    if isinstance(value, SearchStrategy):
        return value
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise InvalidArgument(f"Expected a list of values from {list(allowed)} but got {name}={value!r}")
    if not value:
        raise InvalidArgument(f"Expected at least one value in {name} but got {name}={value!r}")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise InvalidArgument(f"Expected values from {list(allowed)} but got {name}={value!r} "
                              f"(unknown: {bad})")
    return tuple(value)


def _limits(value) -> Limits:
    if isinstance(value, Limits):
        return value
    if value in LIMITS:
        return LIMITS[value]
    raise InvalidArgument(f"Expected a Limits or one of {sorted(LIMITS)} but got limits={value!r}")


def _check_bool_or_none(name: str, value) -> None:
    if value is not None and not isinstance(value, (bool, SearchStrategy)):
        raise InvalidArgument(f"Expected True, False, None or a strategy but got {name}={value!r}")


def _check_range(min_name: str, lo, max_name: str, hi) -> None:
    for n, v in ((min_name, lo), (max_name, hi)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise InvalidArgument(f"Expected a non-negative int but got {n}={v!r}")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidArgument(f"{min_name}={lo} is larger than {max_name}={hi}")


def _as_strategy(value) -> SearchStrategy:
    if isinstance(value, SearchStrategy):
        return value
    return _pick(tuple(value))


def _named(name: str):
    """``st.composite`` whose repr is ``name(args...)``: the public function validates, then calls it."""
    def deco(fn):
        fn.__name__ = fn.__qualname__ = name
        return st.composite(fn)
    return deco


# ---- tile edges ----------------------------------------------------------------------------------
# Kernels break where a size crosses a tile: n*T - 1, n*T, n*T + 1 for the tile sizes Triton kernels
# use (BLOCK 16/32/64/128).  Sizes (tokens per segment, LoRA dims and ranks, vision sequence lengths)
# are drawn half the time from these edges, in every preset; the uniform branch comes first so
# Hypothesis still shrinks towards small values.
TILE_SIZES = (16, 32, 64, 128)


def tile_edges(lo: int, hi: int) -> tuple[int, ...]:
    """The sizes ``n*T-1, n*T, n*T+1`` (``T`` in :data:`TILE_SIZES`, ``n >= 1``) within ``lo..hi``, sorted."""
    out = set()
    for t in TILE_SIZES:
        for m in range(t, hi + 2, t):
            out.update(v for v in (m - 1, m, m + 1) if lo <= v <= hi)
    return tuple(sorted(out))


@functools.lru_cache(maxsize=None)  # Note [Strategy objects]
def edge_biased(lo: int, hi: int, *, reach: Optional[int] = None) -> SearchStrategy:
    """Integers ``lo..hi``, half of them tile edges within ``lo..reach`` (``reach`` defaults to ``hi``;
    one past ``hi`` lets a tiny preset still cross its first tile, e.g. 17 rows for 16-row tiles)."""
    uniform = st.integers(lo, hi)
    edges = tile_edges(lo, hi if reach is None else reach)
    return st.one_of(uniform, st.sampled_from(edges)) if edges else uniform


def edge_biased_dims(dims: Sequence[int]) -> SearchStrategy:
    """One of ``dims``, or half the time a tile edge between ``min(dims)-1`` and ``max(dims)+1``."""
    return _edge_biased_dims(tuple(dims))


@functools.lru_cache(maxsize=None)  # Note [Strategy objects]
def _edge_biased_dims(dims: tuple) -> SearchStrategy:
    edges = tile_edges(max(min(dims) - 1, 1), max(dims) + 1)
    return st.one_of(st.sampled_from(tuple(dims)), st.sampled_from(edges)) if edges else st.sampled_from(tuple(dims))


# max_len above the longest segment: by a little, or by enough to cross a 16-, 64- or 128-row tile
_MAX_LEN_SLACK = st.one_of(st.just(0), st.integers(1, 3), st.sampled_from((15, 16, 17, 63, 64, 65, 127, 128, 129)))


@functools.lru_cache(maxsize=4096)  # Note [Strategy objects]; keyed by data: bounded
def stale_host_ints(n: int, longest: int) -> SearchStrategy:
    """CUDA-graph host ints ``(bs, num_segments, max_len)`` as a graph captured for another batch left
    them (docs/semantics.md#cuda-graph-host-ints): ``bs``/``num_segments`` smaller than the ``n`` replayed
    segments (0 included), ``max_len`` an upper bound above the longest replayed segment."""
    below = st.integers(0, max(n - 1, 0))
    return st.tuples(below, below, _MAX_LEN_SLACK.map(lambda d: longest + d))


# ---- LoRA problems -------------------------------------------------------------------------------

_SCALINGS = (1.0, 0.0, -1.0, 0.5, 2.0, -0.25, 3.5)
_SCALING = st.one_of(st.sampled_from(_SCALINGS), st.floats(-8.0, 8.0, allow_nan=False, width=32))
_BASE_DTYPE = st.sampled_from((None, "float32"))
_POISON = st.sampled_from((None, "huge", "nan"))
_SEED = st.integers(0, 2**16)


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


# ---- vision problems -----------------------------------------------------------------------------

_SOFTMAX_SCALE = st.one_of(st.none(), st.sampled_from((0.3, 1.0, 0.05)))


# features of SGLang's vision call a target may decline (Note [Targets] in harness.targets: ``declines``):
# grouped key/value heads, a local window, attention sinks
VISION_FEATURES = ("gqa", "window_size", "s_aux", "softmax_scale", "forward_metadata")
# what a LoRA target may decline: an upstream contract of the kv_b files that its code path does not have
# (SGLang's triton_v2 correction reads no max_len)
LORA_FEATURES = ("lora.missing_max_len",)
_WINDOW = st.one_of(st.none(), st.just((-1, -1)), st.tuples(st.integers(-1, 6), st.integers(-1, 6)))
_SINKS = st.sampled_from((None, "normal", "large"))


@functools.lru_cache(maxsize=None)
def _heads(max_heads: int, declines: tuple) -> SearchStrategy:
    """(H, H_kv) for at most ``max_heads`` query heads, a third each: MHA (H_kv None), GQA (H_kv a proper
    divisor of H: the only shape where a wrong head mapping can hide behind MQA's or MHA's), MQA (1)."""
    mha = st.tuples(st.integers(1, max_heads), st.none())
    if "gqa" in declines:
        return mha
    pairs = tuple((h, d) for h in range(4, max_heads + 1) for d in range(2, h) if h % d == 0)
    mqa = st.tuples(st.integers(2, max(max_heads, 2)), st.just(1))
    return st.one_of(mha, st.sampled_from(pairs), mqa) if pairs else st.one_of(mha, mqa)


@_named("vision_problems")
def _vision_problems(draw, dtypes, limits, min_sequences, max_sequences, paths, big, declines, tiles=None):
    lim = limits
    hi = max_sequences if max_sequences is not None else lim.max_sequences
    n = draw(_ints(min_sequences, max(hi, min_sequences)))
    lens = []
    for _ in range(n):
        if big and draw(_ints(0, lim.big_odds - 1)) == lim.big_odds - 1:
            lens.append(draw(edge_biased(0, lim.big_seq_len)))
        else:  # tile edges up to 17 even in the tiny preset (its lengths stop at 12)
            lens.append(draw(edge_biased(0, lim.max_seq_len,
                                         reach=min(max(lim.max_seq_len + 1, 17), lim.big_seq_len))))
    tiled = field_blocks(tiles, "vision")  # Note [Tile-aware sizes]: query rows and key blocks of a sequence
    lens = tiled_rows(draw, lens, tuple(sorted({*tiled.get("queries", ()), *tiled.get("keys", ())})), lim.tile_reach)
    four_d = draw(_BOOLS)
    layout = draw(_pick(("contiguous", "v_strided")))
    H, H_kv = draw(_heads(lim.vision_heads, declines))
    fields = dict(
        lengths=tuple(lens), H=H, D=draw(_pick(tuple(lim.head_dims))),
        dtype=draw(_as_strategy(dtypes)), layout=layout,
        v_shift=draw(_ints(0, 3)), o_shift=draw(_ints(0, 3)), extra_tokens=draw(_ints(0, 3)),
        path="kwargs" if "forward_metadata" in declines else draw(_as_strategy(paths)),
        max_seqlen_kind=draw(_pick(("int", "cpu_tensor", "device_tensor"))),
        four_d=four_d,
        softmax_scale=None if "softmax_scale" in declines else draw(_SOFTMAX_SCALE),
        logit_scale=draw(_pick((1.0, 8.0, 30.0))),
        sequence_lengths_4d=draw(_BOOLS),
        seed=draw(_SEED),
    )
    # Note [Fields that disagree] and the rest of SGLang's call
    fields["H_kv"] = H_kv
    fields["batch"] = draw(_ints(1, 3)) if four_d else 1
    if draw(_BOOLS):
        fields["gaps"] = tuple(draw(_ints(0, 3)) for _ in lens)
    if fields["path"] != "kwargs" and draw(_ints(0, 3)) == 3:  # the release's helper: contiguous MHA only
        fields.update(metadata_source="helper", layout="contiguous", v_shift=0, o_shift=0, gaps=(), H_kv=None)
    fields["window"] = None if "window_size" in declines else draw(_WINDOW)
    fields["sinks"] = None if "s_aux" in declines else draw(_SINKS)
    fields["full_call"] = draw(_BOOLS)
    if fields["full_call"] and {"window_size", "s_aux"} & set(declines):  # full calls pass both keywords
        fields["full_call"] = False
    return VisionProblem(**fields)


def vision_problems(*, dtypes: Sequence[str] | SearchStrategy = ALL_DTYPES, limits: str | Limits = "small",
                    min_sequences: int = 0, max_sequences: Optional[int] = None,
                    paths: Sequence[str] | SearchStrategy = VISION_PATHS, big: bool = False,
                    declines: Sequence[str] = (), tiles: Optional[dict] = None) -> SearchStrategy:
    """Vision problems: ragged lengths incl. 0 (bucket padding added by the builder), 3-D/4-D (several
    rows), contiguous or strided v, distinct v/o offsets, max_seqlen as int / CPU tensor / device tensor,
    every metadata path (:data:`~harness.problems.VISION_PATHS`), non-default softmax scales and large
    logits, and Note [Fields that disagree]'s draws: GQA/MQA, indptr gaps, the release's helper, windows,
    sinks, VisionAttention's whole call; none of the :data:`VISION_FEATURES` in ``declines``; lengths drawn
    around the blocks of the tile model ``tiles`` (Note [Tile-aware sizes])."""
    dtypes = _check_choices("dtypes", dtypes, tuple(DTYPES))
    paths = _check_choices("paths", paths, VISION_PATHS)
    declines = _check_features(declines)
    lim = _limits(limits)
    _check_range("min_sequences", min_sequences, "max_sequences", max_sequences)
    if not isinstance(big, bool):
        raise InvalidArgument(f"Expected a bool but got big={big!r}")
    return with_realistic_share(limits, _vision_problems(dtypes, lim, min_sequences, max_sequences, paths, big,
                                                         declines, tiles),
                                lambda real: _vision_problems(dtypes, LIMITS[real], min_sequences, max_sequences,
                                                              paths, big, declines, tiles))


def _check_features(declines, features: tuple = VISION_FEATURES) -> tuple[str, ...]:
    if isinstance(declines, str) or not isinstance(declines, (tuple, list, set, frozenset)):
        raise InvalidArgument(f"Expected a list of features from {list(features)} but got declines={declines!r}")
    bad = [f for f in declines if f not in features]
    if bad:
        raise InvalidArgument(f"Expected features from {list(features)} but got declines={sorted(declines)!r} "
                              f"(unknown: {bad})")
    return tuple(sorted(declines))


# ---- cases (problem + mutation) ------------------------------------------------------------------

@_named("mutated_cases")
def _mutated(draw, problems, family, kind_list):
    problem = draw(problems)
    kind = draw(_pick(tuple(kind_list)))
    m = Mutation(family, kind, draw(_ints(0, 7)), draw(_ints(1, 3)))
    return Case(problem, m)


def _mutated_cases(problems, family: str, categories: tuple) -> SearchStrategy:
    if not isinstance(problems, SearchStrategy):
        raise InvalidArgument(f"Expected a strategy of problems but got problems={problems!r}")
    try:
        kind_list = tuple(kinds(family, categories))  # the family's record's mutation kinds
    except MutationError as exc:
        raise InvalidArgument(f"Expected a family with mutation kinds: {exc}") from None
    return _mutated(problems, family, kind_list)


def partial_metadata(problems: SearchStrategy, *, family: str) -> SearchStrategy:
    """Cases whose optional metadata is dropped or passed as None (may stay valid or hit an
    upstream contract): ``max_len``, ``seg_lens``, ``permutation``; ``sequence_lengths``,
    ``max_seqlen``, ``packed_indptrs``."""
    return _mutated_cases(problems, family, ("partial",))


def upstream_contract_cases(problems: SearchStrategy, *, family: str) -> SearchStrategy:
    """Cases that break one of SGLang's documented contracts (exact type and text expected)."""
    return _mutated_cases(problems, family, ("upstream",))


def malformed_metadata(problems: SearchStrategy, *, family: str) -> SearchStrategy:
    """Cases that break one invariant upstream does not check (strict validation must reject)."""
    return _mutated_cases(problems, family, ("malformed",))


def cases(family: str, *, categories: Sequence[str] = ("valid", "partial", "upstream", "malformed"),
          dtypes: Sequence[str] | SearchStrategy = ALL_DTYPES, ops: Optional[Sequence[str]] = None,
          limits: str | Limits = "small", big: bool = False, declines: Sequence[str] = (),
          tiles: Optional[dict] = None) -> SearchStrategy:
    """Every kind of case of one family: valid problems, partial metadata, upstream-contract
    breakers and malformed metadata (drop ``"malformed"`` for upstream-contract-only campaigns);
    ``declines``: what the target does not implement (:data:`VISION_FEATURES`, :data:`LORA_FEATURES`, a
    family's own); ``tiles``: the target's tile model of the family (Note [Tile-aware sizes]).  The family's
    record names the strategy (``Family.cases``: :func:`lora_cases`, :func:`vision_cases`, csgmv's own)."""
    from kernel_oracle.harness.family import family_names, get_family

    names = family_names()
    if family not in names or get_family(family).cases is None:
        listed = ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"
        raise InvalidArgument(f"Expected family={listed} but got family={family!r}")
    return get_family(family).resolve("cases")(ops=ops, dtypes=dtypes, declines=declines, categories=categories,
                                               limits=limits, big=big, tiles=tiles)


def cases_of(problems: SearchStrategy, family: str, categories: Sequence[str]) -> SearchStrategy:
    """The cases of ``family`` over ``problems``: valid problems, and each of ``categories`` but ``"valid"``
    through the family's mutation kinds (its record's ``mutations``), one branch per category, so each gets an
    even share (malformed has many more kinds than upstream).  What a record's ``cases`` returns."""
    parts = [problems.map(Case)] if "valid" in categories else []
    mutated = [c for c in categories if c != "valid" and kinds(family, (c,))]  # a category it has kinds of
    return st.one_of(*parts, *(_mutated_cases(problems, family, (c,)) for c in mutated))


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


def vision_cases(*, ops: Optional[Sequence[str]], dtypes, declines: Sequence[str], categories: Sequence[str],
                 limits: str | Limits = "small", big: bool = False, tiles: Optional[dict] = None) -> SearchStrategy:
    """The ``vision`` record's ``cases``: :func:`vision_problems` and the mutation tables' vision kinds."""
    categories = _check_choices("categories", categories, ("valid", *CATEGORIES))
    if ops is not None and tuple(ops) != ("vision",):
        raise InvalidArgument(f"Expected ops=None or ['vision'] for family='vision' but got ops={ops!r}")
    return cases_of(vision_problems(dtypes=dtypes, limits=limits, big=big, declines=declines, tiles=tiles), "vision",
                     categories)
