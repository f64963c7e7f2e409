"""The vision family's Hypothesis strategies (Note [Strategies] in :mod:`kernel_oracle.fuzz.strategies`):
:func:`vision_problems` and the ``vision`` record's case strategy :func:`vision_cases`."""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from kernel_oracle.harness.features_vision import VISION_FEATURES  # what a vision target may decline
from kernel_oracle.harness.mutations import CATEGORIES
from kernel_oracle.harness.problem_vision import VISION_PATHS, VisionProblem
from kernel_oracle.harness.problems import DTYPES

from kernel_oracle.fuzz.limits import LIMITS, Limits, with_realistic_share
from kernel_oracle.fuzz.strategies import (ALL_DTYPES, _BOOLS, _SEED, _as_strategy, _check_choices, _check_features,
                                           _check_range, _ints, _limits, _named, _pick, cases_of, edge_biased)
from kernel_oracle.fuzz.strategies_tiles import field_blocks, tiled_rows

__all__ = ["VISION_FEATURES", "vision_cases", "vision_problems"]

_SOFTMAX_SCALE = st.one_of(st.none(), st.sampled_from((0.3, 1.0, 0.05)))

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
    every metadata path (:data:`~harness.problem_vision.VISION_PATHS`), non-default softmax scales and large
    logits, and Note [Fields that disagree]'s draws: GQA/MQA, indptr gaps, the release's helper, windows,
    sinks, VisionAttention's whole call; none of the :data:`VISION_FEATURES` in ``declines``; lengths drawn
    around the blocks of the tile model ``tiles`` (Note [Tile-aware sizes])."""
    dtypes = _check_choices("dtypes", dtypes, tuple(DTYPES))
    paths = _check_choices("paths", paths, VISION_PATHS)
    declines = _check_features(declines, VISION_FEATURES)
    lim = _limits(limits)
    _check_range("min_sequences", min_sequences, "max_sequences", max_sequences)
    if not isinstance(big, bool):
        raise InvalidArgument(f"Expected a bool but got big={big!r}")
    return with_realistic_share(limits, _vision_problems(dtypes, lim, min_sequences, max_sequences, paths, big,
                                                         declines, tiles),
                                lambda real: _vision_problems(dtypes, LIMITS[real], min_sequences, max_sequences,
                                                              paths, big, declines, tiles))


def vision_cases(*, ops: Optional[Sequence[str]], dtypes, declines: Sequence[str], categories: Sequence[str],
                 limits: str | Limits = "small", big: bool = False, tiles: Optional[dict] = None) -> SearchStrategy:
    """The ``vision`` record's ``cases``: :func:`vision_problems` and the mutation tables' vision kinds."""
    categories = _check_choices("categories", categories, ("valid", *CATEGORIES))
    if ops is not None and tuple(ops) != ("vision",):
        raise InvalidArgument(f"Expected ops=None or ['vision'] for family='vision' but got ops={ops!r}")
    return cases_of(vision_problems(dtypes=dtypes, limits=limits, big=big, declines=declines, tiles=tiles), "vision",
                     categories)
