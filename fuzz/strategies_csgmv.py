"""The Hypothesis strategy of csgmv problems (:class:`~kernel_oracle.harness.problem_csgmv.CsgmvProblem`).

Note [csgmv strategy]
---------------------
A drawn batch is one the csgmv backend could build, plus what its contract also allows: 1-3 slots with
ranks from 0 (a rank-0 slot routes rows that nothing writes) to above the buffer rank ``R`` (the kernels
clamp it), scalings of either sign, tokens assigned to slots and ordered by slot through the
permutation, each slot's run cut into segments of at most ``max_len`` rows (the chunk bucket: 16, 32
or 128), 0-2 zero-length segments anywhere, 0-3 physical rows no segment names, a random physical
order; 1-3 slices of ragged widths.  Shapes stay small: under the Triton interpreter a program costs
about 30 ms, and a launch has a program per segment (times the slices and column blocks).

What a target ``declines`` (``Target.declines``: an SGLang release's call sites never reach it, or the
release is known to differ there; docs/csgmv.md) is not drawn: :data:`CSGMV_FEATURES`.

:func:`csgmv_cases` adds the metadata mutations of :mod:`kernel_oracle.harness.mutations_csgmv` (upstream
contract breakers and malformed metadata) to those problems, one category per branch so each gets an even
share.  A target declining ``csgmv.unchecked_bounds`` (SGLang's: its kernels address memory outside a tensor
on them, heap corruption included) is never given the kinds of ``UNCHECKED_BOUNDS``, and one declining
``csgmv.split_k`` no ``split_k`` below 1.
"""

from __future__ import annotations

from typing import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from kernel_oracle.harness.check import Case
from kernel_oracle.harness.mutations import Mutation, kinds
from kernel_oracle.harness.mutations_csgmv import UNCHECKED_BOUNDS, UNCHECKED_BOUNDS_FEATURE
from kernel_oracle.harness.problem_csgmv import CSGMV_OPS, CsgmvProblem

__all__ = ["CASE_CATEGORIES", "CHUNKS", "CSGMV_FEATURES", "chunked", "csgmv_cases", "csgmv_problems", "family_cases"]

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


@st.composite
def _slices(draw) -> tuple[int, tuple[int, ...]]:
    num = draw(st.integers(1, 3))
    widths = draw(st.lists(st.integers(1, 24), min_size=num, max_size=num))
    offsets = [0]
    for w in widths:
        offsets.append(offsets[-1] + w)
    return num, tuple(offsets)


@st.composite
def _segments(draw, num_slots: int, chunk: int):
    """(seg_lens, slots, permutation, unrouted rows): the chunked batch with zero-length segments inserted
    and the logical rows scattered over the physical rows."""
    token_slots = draw(st.lists(st.integers(0, num_slots - 1), min_size=1, max_size=40))
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
def _problem(draw, ops: tuple, dtypes: tuple, declines: frozenset) -> CsgmvProblem:
    op = draw(st.sampled_from(ops))
    num_slices, offsets = draw(_slices())
    R = draw(st.sampled_from((4, 8, 16)))
    num_slots = draw(st.integers(1, 3))
    ranks = tuple(draw(st.lists(st.sampled_from((0, 1, R // 2, R, R + 2)), min_size=num_slots, max_size=num_slots)))
    scalings = tuple(draw(st.lists(st.sampled_from((1.0, 0.5, -1.25, 2.0, 0.0)), min_size=num_slots,
                                   max_size=num_slots)))
    chunk = draw(st.sampled_from(CHUNKS))
    lens, slots, permutation, unrouted = draw(_segments(num_slots, chunk))
    use_graph, pad_to, stale = draw(_graph(len(lens), declines))
    bases = tuple(b for b in ("buffer", "view", "none") if b != "view" or "csgmv.output_view" not in declines)
    base = draw(st.sampled_from(bases)) if op == "csgmv_expand" else "buffer"
    split_k = None
    if op == "csgmv_shrink" and "csgmv.split_k" not in declines and draw(st.booleans()):
        split_k = draw(st.integers(1, 4))
    cpu_offsets = (op == "csgmv_expand" and "csgmv.slice_offsets_cpu" not in declines and draw(st.booleans()))
    return CsgmvProblem(op=op, seg_lens=lens, weight_indices=slots, lora_ranks=ranks, scalings=scalings,
                        permutation=permutation, num_slices=num_slices, slice_offsets=offsets,
                        K=draw(st.sampled_from((8, 16, 24, 48))), R=R, max_len=chunk, unrouted_rows=unrouted,
                        dtype=draw(st.sampled_from(dtypes)), seed=draw(st.integers(0, 2**31 - 1)),
                        use_cuda_graph=use_graph, graph_pad_to=pad_to, stale_host_ints=stale, base=base,
                        split_k=split_k, cpu_offsets=cpu_offsets)


def csgmv_problems(*, ops: Sequence[str] | None = None, dtypes: Sequence[str] = ("float32", "float16", "bfloat16"),
                   declines: Sequence[str] = ()) -> st.SearchStrategy:
    """Valid csgmv problems of ``ops`` (default both) in ``dtypes``, without what ``declines`` names
    (:data:`CSGMV_FEATURES`; Note [csgmv strategy])."""
    ops = tuple(CSGMV_OPS if ops is None else ops)
    bad = [o for o in ops if o not in CSGMV_OPS] + [d for d in declines if d not in CSGMV_FEATURES]
    if not ops or not dtypes or bad:
        raise InvalidArgument(f"Expected ops from {list(CSGMV_OPS)}, dtypes and declines from "
                              f"{list(CSGMV_FEATURES)} but got ops={ops!r}, dtypes={dtypes!r}, declines={declines!r}")
    return _problem(ops, tuple(dtypes), frozenset(declines))


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
                declines: Sequence[str] = (), categories: Sequence[str] = CASE_CATEGORIES) -> st.SearchStrategy:
    """Cases (problem + mutation) of ``categories`` (:data:`CASE_CATEGORIES`): valid problems, upstream
    contract breakers, malformed metadata; nothing a target ``declines`` (Note [csgmv strategy])."""
    bad = [c for c in categories if c not in CASE_CATEGORIES]
    if bad or not categories:
        raise InvalidArgument(f"Expected categories from {list(CASE_CATEGORIES)} but got categories={categories!r}")
    problems = csgmv_problems(ops=ops, dtypes=dtypes, declines=declines)
    parts = [problems.map(Case)] if "valid" in categories else []
    for category in (c for c in categories if c != "valid"):
        kind_list = _mutation_kinds(category, frozenset(declines))
        if kind_list:
            parts.append(_mutated(problems, kind_list))
    if not parts:
        raise InvalidArgument(f"categories={categories!r} leave no csgmv case for declines={sorted(declines)}")
    return st.one_of(*parts)


def family_cases(*, ops: Sequence[str] | None, dtypes, declines: Sequence[str],
                 categories: Sequence[str], limits: object = "small", big: bool = False) -> st.SearchStrategy:
    """The family record's ``cases``: :func:`csgmv_cases` of the asked categories it has
    (:data:`CASE_CATEGORIES`); ``limits`` and ``big`` are the LoRA and vision size knobs, which csgmv's
    strategy does not take (its serving widths are drawn from its own tables, Note [csgmv strategy])."""
    return csgmv_cases(ops=ops, dtypes=dtypes, declines=declines,
                       categories=tuple(c for c in categories if c in CASE_CATEGORIES))
