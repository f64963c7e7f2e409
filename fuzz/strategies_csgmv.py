"""The Hypothesis strategy of csgmv problems (:class:`~kernel_oracle.harness.problem_csgmv.CsgmvProblem`).

Note [csgmv strategy]
---------------------
A drawn batch is one the csgmv backend could build, plus what its contract also allows: 1-3 slots with
ranks from 0 (a rank-0 slot routes rows that nothing writes) to above the buffer rank ``R`` (the kernels
clamp it), scalings of either sign, tokens assigned to slots and ordered by slot through the
permutation, each slot's run cut into segments of at most ``max_len`` rows (the chunk bucket: 16, 32
or 128), 0-2 zero-length segments anywhere, 0-3 physical rows no segment names, a random physical
order; 1-3 slices of ragged widths.  Sizes come from the preset (:data:`CSGMV_LIMITS`, the names of ``--limits``):
small under the Triton interpreter (a program costs about 30 ms, and a launch has a program per segment, times
the slices, column blocks and ``split_k``), serving shapes in ``"full"`` (K 2048 - 8192, ranks up to 128).
Where the target describes its blocks (Note [csgmv tile model] in :mod:`kernel_oracle.harness.tiles_csgmv`),
the input width K, the slice widths and the buffer rank are drawn around the release's ``BLOCK_K`` /
``BLOCK_N`` of the drawn op, and one slot's run of rows around the chunk, three times in four past the first
block (Note [Tile-aware sizes] in :mod:`kernel_oracle.fuzz.strategies_tiles`): a second K block, a ragged K
tail and a ``split_k`` with several non-empty parts are drawn on the CPU too.

What a target ``declines`` (``Target.declines``: an SGLang release's call sites never reach it, or the
release is known to differ there; docs/csgmv.md) is not drawn: :data:`CSGMV_FEATURES`.

:func:`csgmv_cases` adds the metadata mutations of :mod:`kernel_oracle.harness.mutations_csgmv` (upstream
contract breakers and malformed metadata) to those problems, one category per branch so each gets an even
share.  A target declining ``csgmv.unchecked_bounds`` (SGLang's: its kernels address memory outside a tensor
on them, heap corruption included) is never given the kinds of ``UNCHECKED_BOUNDS``, and one declining
``csgmv.split_k`` no ``split_k`` below 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.mutations import Mutation, kinds
from kernel_oracle.harness.mutations_csgmv import UNCHECKED_BOUNDS, UNCHECKED_BOUNDS_FEATURE
from kernel_oracle.harness.problem_csgmv import CSGMV_OPS, CsgmvProblem
from kernel_oracle.harness.tiles import tile_hints

from kernel_oracle.fuzz.limits import with_realistic_share
from kernel_oracle.fuzz.strategies_tiles import tiled_sizes

__all__ = ["CASE_CATEGORIES", "CHUNKS", "CSGMV_FEATURES", "CSGMV_LIMITS", "CsgmvLimits", "chunked", "csgmv_cases",
           "csgmv_problems", "family_cases"]

CHUNKS = (16, 32, 128)
# feature -> what a problem without it lacks
CSGMV_FEATURES = {
    "csgmv.stale_host_ints": "CUDA-graph replay with capture-time host ints (bs, num_segments) below the batch's",
    "csgmv.output_view": "an expand into a column view of a wider projection",
    "csgmv.split_k": "the shrink's split_k keyword",
    "csgmv.slice_offsets_cpu": "the expand's slice_offsets_cpu keyword",
    UNCHECKED_BOUNDS_FEATURE: "malformed metadata that makes the kernels address memory outside a tensor (a "
                              "permutation row at or past x.shape[0], a slot or segment bound past its tensor)",
}
CASE_CATEGORIES = ("valid", "upstream", "malformed")


def chunked(token_slots: Sequence[int], chunk: int) -> tuple[list[int], list[int], list[int]]:
    """(seg_lens, slots, logical order) of the tokens: a stable sort by slot, each slot's run cut into
    segments of at most ``chunk`` rows (how the csgmv backend builds its batch)."""
    order = sorted(range(len(token_slots)), key=lambda t: token_slots[t])
    lens, slots = [], []
    for slot in sorted(set(token_slots)):
        run = sum(1 for s in token_slots if s == slot)
        for start in range(0, run, chunk):
            lens.append(min(chunk, run - start))
            slots.append(slot)
    return lens, slots, order


@dataclass(frozen=True)
class CsgmvLimits:
    """Size bounds of csgmv problems per preset (the names of :data:`kernel_oracle.fuzz.limits.LIMITS`): ``tokens``
    routed rows at most; ``widths`` slice widths, ``ranks`` buffer ranks ``R``, ``inputs`` input widths ``K``
    (common values, Hypothesis shrinks towards the first); ``chunks`` chunk sizes; ``reach`` blocks past the
    first a tiled size may run (Note [Tile-aware sizes]); ``splits`` the largest ``split_k`` drawn."""

    tokens: int
    widths: tuple
    ranks: tuple
    inputs: tuple
    chunks: tuple
    reach: int
    splits: int


CSGMV_LIMITS = {
    # the Triton interpreter (about 30 ms a program): a few dozen programs a launch at most
    "tiny": CsgmvLimits(tokens=40, widths=(24, 8, 1), ranks=(4, 8, 16), inputs=(16, 8, 24, 48), chunks=CHUNKS,
                        reach=1, splits=3),
    "small": CsgmvLimits(tokens=80, widths=(24, 8, 1, 40), ranks=(4, 8, 16), inputs=(16, 8, 48, 96),
                         chunks=CHUNKS, reach=2, splits=4),
    # a GPU: serving shapes (qkv 4096 / 1024 / 1024, K 2048 - 8192), ranks up to 128
    "full": CsgmvLimits(tokens=600, widths=(1024, 4096, 512), ranks=(16, 32, 64, 128),
                        inputs=(4096, 2048, 5120, 7168, 8192), chunks=(16, 32, 64, 128), reach=4, splits=16),
    "gpu": CsgmvLimits(tokens=160, widths=(64, 16, 128, 24), ranks=(8, 16, 32, 64), inputs=(256, 64, 512, 1024),
                       chunks=(16, 32, 64, 128), reach=2, splits=8),
}


@functools.lru_cache(maxsize=None)  # one strategy object per preset (tiled_sizes caches by it)
def _pick(values: tuple) -> st.SearchStrategy:
    return st.sampled_from(values)


@functools.lru_cache(maxsize=None)
def _common(values: tuple) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(values), st.integers(1, max(values)))


@st.composite
def _slices(draw, lim: CsgmvLimits, blocks: tuple) -> tuple[int, tuple[int, ...]]:
    num = draw(st.integers(1, 3))
    widths = draw(st.lists(tiled_sizes(_common(lim.widths), blocks, lim.reach), min_size=num, max_size=num))
    offsets = [0]
    for w in widths:
        offsets.append(offsets[-1] + w)
    return num, tuple(offsets)


@st.composite
def _segments(draw, num_slots: int, chunk: int, lim: CsgmvLimits):
    """(seg_lens, slots, permutation, unrouted rows): the chunked batch with zero-length segments inserted
    and the logical rows scattered over the physical rows; slot 0's run drawn around the chunk (the rows
    block) three times in four (Note [Tile-aware sizes])."""
    token_slots = draw(st.lists(st.integers(0, num_slots - 1), min_size=1, max_size=lim.tokens))
    run = draw(tiled_sizes(st.none(), (chunk,), lim.reach))
    if run is not None:
        token_slots = [0] * run + [s for s in token_slots if s != 0]
    lens, slots, order = chunked(token_slots, chunk)
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(lens)))
        lens.insert(at, 0)
        slots.insert(at, draw(st.integers(0, num_slots - 1)))
    if not lens:
        lens, slots = [0], [0]
    unrouted = draw(st.integers(0, 3))
    physical = draw(st.permutations(range(len(token_slots) + unrouted)))
    return tuple(lens), tuple(slots), tuple(physical[t] for t in range(len(order))), unrouted


@st.composite
def _graph(draw, segments: int, declines: frozenset):
    """(use_cuda_graph, graph_pad_to, stale_host_ints)."""
    if not draw(st.booleans()):
        return False, None, None
    pad_to = segments + draw(st.integers(0, 3))
    stale = None
    if "csgmv.stale_host_ints" not in declines and draw(st.booleans()):
        stale = (draw(st.integers(1, pad_to)), draw(st.integers(1, pad_to)))
    return True, pad_to, stale


@st.composite
def _problem(draw, ops: tuple, dtypes: tuple, declines: frozenset, lim: CsgmvLimits, tiles) -> CsgmvProblem:
    op = draw(st.sampled_from(ops))
    hints = tile_hints(tiles, op)  # Note [Tile-aware sizes]: the release's blocks along each size of this op
    num_slices, offsets = draw(_slices(lim, hints.get("N=slice", ())))
    # the rank is the expand's K; the shrink's N is slices * R
    R = draw(tiled_sizes(_pick(lim.ranks), hints.get("K=rank", hints.get("N=slices*R", ())), lim.reach))
    num_slots = draw(st.integers(1, 3))
    ranks = tuple(draw(st.lists(st.sampled_from((0, 1, R // 2, R, R + 2)), min_size=num_slots, max_size=num_slots)))
    scalings = tuple(draw(st.lists(st.sampled_from((1.0, 0.5, -1.25, 2.0, 0.0)), min_size=num_slots,
                                   max_size=num_slots)))
    chunk = draw(st.sampled_from(lim.chunks))
    lens, slots, permutation, unrouted = draw(_segments(num_slots, chunk, lim))
    use_graph, pad_to, stale = draw(_graph(len(lens), declines))
    bases = tuple(b for b in ("buffer", "view", "none") if b != "view" or "csgmv.output_view" not in declines)
    base = draw(st.sampled_from(bases)) if op == "csgmv_expand" else "buffer"
    split_k = None
    if op == "csgmv_shrink" and "csgmv.split_k" not in declines and draw(st.integers(0, 3)):  # three in four
        split_k = draw(st.integers(1, lim.splits))
    cpu_offsets = (op == "csgmv_expand" and "csgmv.slice_offsets_cpu" not in declines and draw(st.booleans()))
    K = draw(tiled_sizes(_pick(lim.inputs), hints.get("K=K", ()), lim.reach))
    return CsgmvProblem(op=op, seg_lens=lens, weight_indices=slots, lora_ranks=ranks, scalings=scalings,
                        permutation=permutation, num_slices=num_slices, slice_offsets=offsets,
                        K=K, R=R, max_len=chunk, unrouted_rows=unrouted,
                        dtype=draw(st.sampled_from(dtypes)), seed=draw(st.integers(0, 2**31 - 1)),
                        use_cuda_graph=use_graph, graph_pad_to=pad_to, stale_host_ints=stale, base=base,
                        split_k=split_k, cpu_offsets=cpu_offsets)


def _limits(limits) -> CsgmvLimits:
    if isinstance(limits, CsgmvLimits):
        return limits
    if limits not in CSGMV_LIMITS:
        raise InvalidArgument(f"Expected a CsgmvLimits or one of {sorted(CSGMV_LIMITS)} but got limits={limits!r}")
    return CSGMV_LIMITS[limits]


def csgmv_problems(*, ops: Sequence[str] | None = None, dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
                   declines: Sequence[str] = (), limits: object = "tiny", tiles=None) -> st.SearchStrategy:
    """Valid csgmv problems of ``ops`` (default both) in ``dtypes``, without what ``declines`` names
    (:data:`CSGMV_FEATURES`), of the sizes of the preset ``limits`` (:data:`CSGMV_LIMITS`; ``"gpu"`` mixes one
    ``"full"`` problem in :data:`~kernel_oracle.fuzz.limits.REALISTIC_SHARE`'s odds), drawn around the blocks of
    the tile model ``tiles`` (Note [csgmv strategy])."""
    ops = tuple(CSGMV_OPS if ops is None else ops)
    bad = [o for o in ops if o not in CSGMV_OPS] + [d for d in declines if d not in CSGMV_FEATURES]
    if not ops or not dtypes or bad:
        raise InvalidArgument(f"Expected ops from {list(CSGMV_OPS)}, dtypes and declines from "
                              f"{list(CSGMV_FEATURES)} but got ops={ops!r}, dtypes={dtypes!r}, declines={declines!r}")
    return with_realistic_share(limits, _problem(ops, tuple(dtypes), frozenset(declines), _limits(limits), tiles),
                                lambda real: _problem(ops, tuple(dtypes), frozenset(declines), CSGMV_LIMITS[real],
                                                      tiles))


def _mutation_kinds(category: str, declines: frozenset) -> tuple[str, ...]:
    out = kinds("csgmv", (category,))
    if UNCHECKED_BOUNDS_FEATURE in declines:
        out = [k for k in out if k not in UNCHECKED_BOUNDS]
    if "csgmv.split_k" in declines:
        out = [k for k in out if k != "split_k_below_one"]
    return tuple(out)


@st.composite
def _mutated(draw, problems, kind_list: tuple) -> Case:
    problem = draw(problems)
    return Case(problem, Mutation("csgmv", draw(st.sampled_from(kind_list)), draw(st.integers(0, 7)),
                                  draw(st.integers(1, 3))))


def csgmv_cases(*, ops: Sequence[str] | None = None, dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
                declines: Sequence[str] = (), categories: Sequence[str] = CASE_CATEGORIES, limits: object = "tiny",
                tiles=None) -> st.SearchStrategy:
    """Cases (problem + mutation) of ``categories`` (:data:`CASE_CATEGORIES`): valid problems of
    :func:`csgmv_problems` (``limits``, ``tiles``), upstream contract breakers, malformed metadata; nothing a
    target ``declines`` (Note [csgmv strategy])."""
    bad = [c for c in categories if c not in CASE_CATEGORIES]
    if bad or not categories:
        raise InvalidArgument(f"Expected categories from {list(CASE_CATEGORIES)} but got categories={categories!r}")
    problems = csgmv_problems(ops=ops, dtypes=dtypes, declines=declines, limits=limits, tiles=tiles)
    parts = [problems.map(Case)] if "valid" in categories else []
    for category in (c for c in categories if c != "valid"):
        kind_list = _mutation_kinds(category, frozenset(declines))
        if kind_list:
            parts.append(_mutated(problems, kind_list))
    if not parts:
        raise InvalidArgument(f"categories={categories!r} leave no csgmv case for declines={sorted(declines)}")
    return st.one_of(*parts)


def family_cases(*, ops: Sequence[str] | None, dtypes, declines: Sequence[str],
                 categories: Sequence[str], limits: object = "small", big: bool = False,
                 tiles=None) -> st.SearchStrategy:
    """The family record's ``cases``: :func:`csgmv_cases` of the asked categories it has
    (:data:`CASE_CATEGORIES`), of the preset ``limits`` (:data:`CSGMV_LIMITS`), around the blocks of ``tiles``;
    ``big`` is a LoRA and vision knob (csgmv's ``"full"`` preset holds its serving sizes)."""
    return csgmv_cases(ops=ops, dtypes=dtypes, declines=declines, limits=limits, tiles=tiles,
                       categories=tuple(c for c in categories if c in CASE_CATEGORIES))
