"""Composable Hypothesis strategies for fuzz cases: what every family's share (argument checks, tile edges, the
cases of a family's problems and mutation kinds); each family's problems are drawn in a module of its own
(:mod:`kernel_oracle.fuzz.strategies_lora`, :mod:`kernel_oracle.fuzz.strategies_vision`,
:mod:`kernel_oracle.fuzz.strategies_csgmv`), which its record names.

Note [Strategies]
-----------------
Strategies generate *plain data* -- :class:`~harness.problem_lora.LoRAProblem`,
:class:`~harness.problem_vision.VisionProblem` and :class:`~fuzz.check.Case` (a problem plus an optional
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
(:data:`kernel_oracle.harness.features_vision.VISION_FEATURES`, ``declines=``) is given no case of it.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.mutations import Mutation, MutationError, kinds

from kernel_oracle.fuzz.limits import LIMITS, REALISTIC_SHARE, Limits, default_limits

__all__ = [
    "ALL_DTYPES",
    "InvalidArgument",
    "LIMITS",
    "REALISTIC_SHARE",
    "TILE_SIZES",
    "Limits",
    "cases",
    "cases_of",
    "default_limits",
    "edge_biased",
    "edge_biased_dims",
    "malformed_metadata",
    "partial_metadata",
    "tile_edges",
    "upstream_contract_cases",
]

ALL_DTYPES = ("float32", "float16", "bfloat16")  # float32 first: Hypothesis shrinks towards it


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
_SEED = st.integers(0, 2**16)
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


def _check_features(declines, features: tuple) -> tuple[str, ...]:
    """``declines`` sorted, each one of ``features`` (a family's declinable features)."""
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
    ``declines``: what the target does not implement (each family's own features); ``tiles``: the target's
    tile model of the family (Note [Tile-aware sizes]).  The family's record names the strategy
    (``Family.cases``: ``strategies_lora.lora_cases``, ``strategies_vision.vision_cases``, csgmv's own)."""
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
