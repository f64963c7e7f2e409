"""Sizes drawn around the blocks of the code under test (Note [Tile-aware sizes]).

Note [Tile-aware sizes]
-----------------------
A kernel's bugs live past its first block: the second block of a loop, a ragged tail, a reduction split across
programs.  So where the target describes its blocks (``Target.tiles``, Note [Tile models] in
:mod:`kernel_oracle.harness.tiles`), each size the code tiles in the drawn op is drawn one time in four as the
preset draws it anyway (the first branch: Hypothesis shrinks towards it) and three times in four past the
first block (:func:`tiled_sizes`): of the largest block the code may use for it, or one time in three of a
smaller one.  Past the first block means ``n * block`` exactly (``n`` 2 .. ``reach + 1``) or, three times in
four, ``n * block`` plus a ragged tail (``n`` 1 .. ``reach``; the tail 1, ``block - 1`` or any): two or more
blocks, and a tail in most of them.  (Hypothesis leans towards the simplest choice and copies parts of earlier
examples within a run, so the shares a campaign meets are lower than these odds: about two in three several
blocks, one in two a tail; the coverage table says what they are.)  ``reach`` is the preset's ``tile_reach``:
how many blocks past the first a size may run, 1 under the Triton interpreter (a few dozen programs per case at
most), more on a GPU.  A batch's rows are tiled through its segments: one segment's length is drawn that way
(:func:`tiled_rows`), and ``max_len`` half the time just past the next row block above the longest segment
(:func:`past_next_block`).  The shares this gives, per op and dimension at the real blocks, are the campaign's
coverage table (Note [Tile coverage] in :mod:`kernel_oracle.harness.tile_coverage`);
:func:`kernel_oracle.fuzz.coverage.draw_coverage` measures them from the draws alone.
"""

from __future__ import annotations

import functools
from typing import Sequence

import hypothesis.strategies as st
from hypothesis.strategies import SearchStrategy

from kernel_oracle.harness.tiles import tile_hints

__all__ = ["field_blocks", "past_first_block", "past_next_block", "tiled_rows", "tiled_sizes"]


@st.composite
def _mostly(draw, first: SearchStrategy, rest: SearchStrategy, odds: int):
    """``first`` once in ``odds`` draws, else ``rest``; Hypothesis shrinks towards ``first``.  (An explicit
    draw: ``st.one_of`` merges repeated branches, so it cannot weigh them.)"""
    return draw(first if draw(st.integers(0, odds - 1)) == 0 else rest)


@functools.lru_cache(maxsize=None)
def past_first_block(block: int, reach: int) -> SearchStrategy:
    """Sizes past the first ``block``: ``n * block`` (n = 2 .. reach + 1) or ``n * block`` + a ragged tail
    (n = 1 .. reach), three draws in four ragged."""
    reach = max(int(reach), 1)
    if block <= 1:
        return st.integers(2, reach + 1)
    tails = st.one_of(st.sampled_from(tuple(sorted({1, block - 1}))), st.integers(1, block - 1))
    ragged = st.tuples(st.integers(1, reach), tails).map(lambda nt: nt[0] * block + nt[1])
    exact = st.sampled_from(tuple(n * block for n in range(2, reach + 2)))
    return _mostly(exact, ragged, 4)


@functools.lru_cache(maxsize=None)
def tiled_sizes(common: SearchStrategy, blocks: tuple, reach: int) -> SearchStrategy:
    """``common`` one draw in four, else a size past the first block of one of ``blocks`` (Note [Tile-aware
    sizes]); ``common`` alone when ``blocks`` is empty."""
    blocks = tuple(b for b in blocks if b > 0)
    if not blocks:
        return common
    largest = past_first_block(max(blocks), reach)  # past every block; the smaller ones' own second blocks too
    smaller = [past_first_block(b, reach) for b in blocks if b != max(blocks)]
    past = _mostly(st.one_of(*smaller), largest, 3) if smaller else largest
    return _mostly(common, past, 4)


def field_blocks(tiles, op: str) -> dict:
    """problem field -> the blocks that tile it in ``op`` under the tile model ``tiles`` (a dimension ``<role>=
    <field>`` names its field; ``heads`` is ``H``; ``rows`` stays ``rows``)."""
    out: dict = {}
    for label, blocks in tile_hints(tiles, op).items():
        name = "H" if label == "heads" else (label.partition("=")[2] or label)
        out[name] = tuple(sorted({*out.get(name, ()), *blocks}))
    return out


@functools.lru_cache(maxsize=4096)  # keyed by data (the longest segment): bounded
def past_next_block(common: SearchStrategy, longest: int, blocks: tuple) -> SearchStrategy:
    """How far ``max_len`` lies above the ``longest`` segment: ``common``, or half the time just past the next
    multiple of one of the row ``blocks`` (the launch then has a row tile more per segment than the longest
    segment fills: the grid a code sizes from ``max_len``)."""
    crossings = tuple(sorted({(longest // b + 1) * b - longest + d for b in blocks if b > 0 for d in (0, 1)}))
    return st.one_of(common, st.sampled_from(crossings)) if crossings else common


def tiled_rows(draw, lengths: Sequence[int], blocks: tuple, reach: int) -> list:
    """``lengths`` (a batch's segments or sequences), one of them redrawn past the first of ``blocks`` three
    times in four (Note [Tile-aware sizes]); unchanged without blocks or segments."""
    lengths = list(lengths)
    if not lengths or not blocks:
        return lengths
    longer = draw(tiled_sizes(st.none(), tuple(blocks), reach))
    if longer is not None:
        lengths[draw(st.integers(0, len(lengths) - 1))] = longer
    return lengths
